package node

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// readIncusNode runs the resource's Read on a state naming container name in project,
// against the real daemon, and returns the response. It calls Read directly (not
// through a binary) because terraform-plugin-testing cannot assert a warning.
func readIncusNode(t *testing.T, name, project string) *fwresource.ReadResponse {
	t.Helper()
	ctx := context.Background()
	socket := os.Getenv("INCUS_SOCKET")
	if socket == "" {
		socket = incusapi.DefaultSocket
	}
	cfg := &kit.Config{IncusSocket: socket, IncusProject: "default"}
	cfg.Clients = kit.NewClients(cfg)
	r := &incusNodeResource{cfg: cfg}
	var sr fwresource.SchemaResponse
	r.Schema(ctx, fwresource.SchemaRequest{}, &sr)
	st := tfsdk.State{Schema: sr.Schema}
	m := incusNodeModel{
		ID: types.StringValue("incus://local/" + project + "/" + name), Name: types.StringValue(name), Image: types.StringValue(labtest.Image),
		Project: types.StringValue(project), NodeWait: types.StringNull(),
		Instance: types.StringValue(name), ImageFingerprint: types.StringNull(), Status: types.StringValue("Running"),
		Profiles: types.ListNull(types.StringType), Config: types.MapNull(types.StringType), Limits: types.MapNull(types.StringType),
		Timeouts: timeouts.Value{Object: types.ObjectNull(incusNodeTimeoutsAttrTypes)},
	}
	if diags := st.Set(ctx, m); diags.HasError() {
		t.Fatalf("state: %v", diags)
	}
	resp := &fwresource.ReadResponse{State: st}
	r.Read(ctx, fwresource.ReadRequest{State: st}, resp)
	return resp
}

// TestLabIncusNodeReadGone: a container deleted out of band is removed from state with
// a warning that names it and carries the daemon's answer; so is one whose project is
// gone (Incus deletes only empty projects). A stopped one is kept, with a warning. No
// container is booted.
func TestLabIncusNodeReadGone(t *testing.T) {
	labtest.Require(t)
	name := labtest.Prefix() + "-t-readgone"
	_, _ = labtest.IncusErr("delete", "--force", name)
	for _, tc := range []struct{ project, daemonSays string }{
		{"default", "Instance not found"},
		{labtest.Prefix() + "-t-no-such-project", "Project not found"},
	} {
		resp := readIncusNode(t, name, tc.project)
		if !resp.State.Raw.IsNull() {
			t.Fatalf("project %s: Read of a missing container must remove it from state", tc.project)
		}
		if resp.Diagnostics.HasError() || resp.Diagnostics.WarningsCount() != 1 {
			t.Fatalf("project %s: want exactly one warning, got %v", tc.project, resp.Diagnostics)
		}
		w := resp.Diagnostics.Warnings()[0].Detail()
		if !strings.Contains(w, name+" (project "+tc.project+") was deleted outside Terraform") || !strings.Contains(w, tc.daemonSays) {
			t.Fatalf("project %s: the warning must name the container and carry %q: %s", tc.project, tc.daemonSays, w)
		}
		t.Logf("warning: %s", w)
	}

	// A stopped container stays in state, with a warning that says how to start it.
	labtest.Incus(t, "init", "--empty", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })
	resp := readIncusNode(t, name, "default")
	if resp.State.Raw.IsNull() || resp.Diagnostics.HasError() || resp.Diagnostics.WarningsCount() != 1 ||
		!strings.Contains(resp.Diagnostics.Warnings()[0].Detail(), "incus start --project default "+name) {
		t.Fatalf("stopped container: want it kept with one warning saying how to start it, got %v", resp.Diagnostics)
	}
}
