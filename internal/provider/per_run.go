package provider

// Per-run values must not reach a plan input or the state. A per-run value is one
// that is true for one run or one login only, so storing it makes every plan differ or
// leaks where a credential was staged. The rule, checked at plan time:
//   - an absolute path under a directory whose contents live for one run or login:
//     /tmp, /var/tmp, /run/user, /dev/shm, /dev/fd, /proc;
//   - any of the provider's own credential locations (ssh_private_key_file,
//     ssh_auth_sock, registry_auth_file, kubeconfig, the Incus client key), wherever
//     they are.
// It applies to build.args, the verdict's triggers and the submission's identity map.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var perRunDirs = []string{"/tmp", "/var/tmp", "/run/user", "/dev/shm", "/dev/fd", "/proc"}

// perRunReason says why v is a per-run value ("" when it is not). cfg may be nil (then
// only the directories are checked).
func perRunReason(v string, cfg *Config) string {
	v = strings.TrimSpace(v)
	if filepath.IsAbs(v) {
		clean := filepath.Clean(v)
		for _, d := range perRunDirs {
			if clean == d || strings.HasPrefix(clean, d+"/") {
				return fmt.Sprintf("it is a path under %s, whose contents live for one run or login", d)
			}
		}
	}
	if v == "" {
		return ""
	}
	abs, err := filepath.Abs(v)
	if err != nil {
		return ""
	}
	for name, loc := range perRunValues(cfg) {
		if abs == loc {
			return "it is the provider's " + name + " location"
		}
	}
	return ""
}

// checkPerRunMap reports every per-run value of m at the attribute at.
func checkPerRunMap(ctx context.Context, m types.Map, at path.Path, cfg *Config) diag.Diagnostics {
	var diags diag.Diagnostics
	if m.IsNull() || m.IsUnknown() {
		return diags
	}
	vals := map[string]types.String{}
	diags.Append(m.ElementsAs(ctx, &vals, false)...)
	for k, v := range vals {
		if v.IsNull() || v.IsUnknown() {
			continue
		}
		if why := perRunReason(v.ValueString(), cfg); why != "" {
			diags.AddAttributeError(at.AtMapKey(k), "Per-run value refused",
				fmt.Sprintf("%s[%q] = %q is a per-run value: %s. It would be stored in the state and change every plan. "+
					"Pass a stable value (a path inside the operator tree, a name), and give credentials through the provider's settings.",
					at, k, v.ValueString(), why))
		}
	}
	return diags
}

// perRunMapValidator is checkPerRunMap as a schema validator (directories only: the
// provider's credential locations are checked in ModifyPlan, once it is configured).
type perRunMapValidator struct{}

func (perRunMapValidator) Description(context.Context) string {
	return "values must not be per-run (paths under /tmp, /run/user, …)"
}
func (v perRunMapValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (perRunMapValidator) ValidateMap(ctx context.Context, req validator.MapRequest, resp *validator.MapResponse) {
	resp.Diagnostics.Append(checkPerRunMap(ctx, req.ConfigValue, req.Path, nil)...)
}
