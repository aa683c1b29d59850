package kit

// Per-run values must not reach a plan input or the state. A per-run value is one
// that is true for one run or one login only, so storing it makes every plan differ or
// leaks where a credential was staged. The rule, checked at plan time:
//   - an absolute path under a directory whose contents live for one run or login:
//     /tmp, /var/tmp, /run/user, /dev/shm, /dev/fd, /proc, macOS' /private/tmp,
//     /private/var/tmp and /var/folders (its per-user temporary and cache directories,
//     also as /private/var/folders), and the run's own temporary directories ($TMPDIR,
//     $XDG_RUNTIME_DIR, $RUNNER_TEMP: a CI job's temp dir);
//   - any of the provider's own credential locations (ssh_private_key_file,
//     ssh_auth_sock, registry_auth_file, kubeconfig, the Incus client key), wherever
//     they are.
// A path counts also inside a larger value (`--identity=/tmp/k`, `a:/tmp/b`).
// It applies to build.args, the verdict's triggers and the submission's identity map.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// PerRunValues are the provider's credential locations, made absolute, by the
// attribute that sets them. A node plan that holds one is refused (docs/design.md#node-plans).
func PerRunValues(cfg *Config) map[string]string {
	out := map[string]string{}
	if cfg == nil {
		return out
	}
	for label, v := range map[string]string{
		"ssh_private_key_file":   cfg.SSHPrivateKeyFile,
		"ssh_auth_sock":          cfg.SSHAuthSock,
		"kube_config_path":       cfg.KubeConfigPath,
		"registry_auth_file":     cfg.RegistryAuthFile,
		"incus.client_key_file":  cfg.IncusClientKey,
		"incus.client_cert_file": cfg.IncusClientCert,
	} {
		if v == "" {
			continue
		}
		if abs, err := filepath.Abs(v); err == nil {
			out[label] = abs
		}
	}
	return out
}

var perRunDirs = []string{"/tmp", "/var/tmp", "/run/user", "/dev/shm", "/dev/fd", "/proc",
	"/private/tmp", "/private/var/tmp", "/var/folders", "/private/var/folders"}

// perRunDirEnv are the environment variables that name a run's own temporary
// directory.
var perRunDirEnv = []string{"TMPDIR", "XDG_RUNTIME_DIR", "RUNNER_TEMP"}

// perRunDirList is perRunDirs with the directories the environment names (cleaned,
// absolute, and never the root: a TMPDIR of "/" would refuse every path).
func perRunDirList() []string {
	dirs := append([]string{}, perRunDirs...)
	for _, env := range perRunDirEnv {
		d := filepath.Clean(os.Getenv(env))
		if filepath.IsAbs(d) && d != "/" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// absolutePaths are the absolute paths inside v: v itself, and every word of it that
// starts with "/" once it is split at blanks, quotes, separators and the "=" of an
// option.
func absolutePaths(v string) []string {
	words := strings.FieldsFunc(v, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || strings.ContainsRune("=:,;\"'()[]{}<>|&", r)
	})
	var out []string
	for _, w := range words {
		if strings.HasPrefix(w, "/") {
			out = append(out, filepath.Clean(w))
		}
	}
	return out
}

// holdsLocation reports whether v names loc: v is loc (also relative to the working
// directory), or one of the absolute paths inside v is.
func holdsLocation(v, loc string) bool {
	if abs, err := filepath.Abs(v); err == nil && abs == loc {
		return true
	}
	for _, p := range absolutePaths(v) {
		if p == loc {
			return true
		}
	}
	return false
}

// perRunReason says why v is a per-run value ("" when it is not). cfg may be nil (then
// only the directories are checked).
func perRunReason(v string, cfg *Config) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return ""
	}
	dirs := perRunDirList()
	for _, p := range absolutePaths(v) {
		for _, d := range dirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				return fmt.Sprintf("it holds %s, a path under %s, whose contents live for one run or login", p, d)
			}
		}
	}
	locs := PerRunValues(cfg)
	names := make([]string, 0, len(locs))
	for name := range locs {
		names = append(names, name)
	}
	sort.Strings(names) // one message, whatever the map order
	for _, name := range names {
		if holdsLocation(v, locs[name]) {
			return "it holds the provider's " + name + " location"
		}
	}
	return ""
}

// CheckPerRunMap reports every per-run value of m at the attribute at.
func CheckPerRunMap(ctx context.Context, m types.Map, at path.Path, cfg *Config) diag.Diagnostics {
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

// PerRunMapValidator is checkPerRunMap as a schema validator (directories only: the
// provider's credential locations are checked in ModifyPlan, once it is configured).
type PerRunMapValidator struct{}

func (PerRunMapValidator) Description(context.Context) string {
	return "values must not be per-run (paths under /tmp, /run/user, …)"
}
func (v PerRunMapValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (PerRunMapValidator) ValidateMap(ctx context.Context, req validator.MapRequest, resp *validator.MapResponse) {
	resp.Diagnostics.Append(CheckPerRunMap(ctx, req.ConfigValue, req.Path, nil)...)
}
