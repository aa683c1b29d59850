package node

// The `snapshot` block of fediversity_node_switch (Incus only) and the diagnostics of a
// restore. Taking, rotating and restoring snapshots is the Incus transport's
// (incustransport.SnapshotGuard).

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
)

// snapshotRestoreDiagnostic says that the guard restored the snapshot it took before the
// switch (restoreErr == nil) and what the restored system's verdict is (judged), or that
// restoring it failed.
func snapshotRestoreDiagnostic(node string, g *incustransport.SnapshotGuard, restoreErr error, judged string) diag.Diagnostics {
	var diags diag.Diagnostics
	taken := g.Taken()
	// What became of the state that stopped answering, in the words of both front ends.
	aside := ""
	if text := g.AsideText(); text != "" {
		aside = " " + text
	}
	after := g.LostAfter()
	if incustransport.IsSpaceError(restoreErr) {
		// The error carries the figures and what to do; nothing was changed.
		diags.AddError(fmt.Sprintf("Node %s is unreachable after %s and there is no space to restore snapshot %s", node, after, taken),
			fmt.Sprintf("Node %s, phase restore-snapshot: the node did not answer after %s; %v.", node, after, restoreErr))
		return diags
	}
	if restoreErr != nil {
		diags.AddError(fmt.Sprintf("Node %s is unreachable after %s and its snapshot could not be restored", node, after),
			fmt.Sprintf("Node %s, phase restore-snapshot: the node did not answer after %s; restoring snapshot %s failed: %v. "+
				"Restore it by hand (`incus snapshot restore %s %s`) and start the instance.%s", node, after, taken, restoreErr, g.Instance(), taken, aside))
		return diags
	}
	if vols := g.Set().Manifest.Volumes; len(vols) > 0 {
		names := make([]string, 0, len(vols))
		for _, v := range vols {
			names = append(names, v.Volume)
		}
		aside = fmt.Sprintf(" The set's custom volumes (%s) were restored with the root disk.", strings.Join(names, ", ")) + aside
	}
	diags.AddError(fmt.Sprintf("Node %s was unreachable after %s: snapshot %s restored", node, after, taken),
		fmt.Sprintf("Node %s, phase wait-for-node: the node did not answer after %s, so the snapshot %s taken before it was restored "+
			"and the instance started again (in %s); it runs its previous system. %s%s Find out why the new closure bricks the node before applying it again.",
			node, after, taken, g.RestoreTook().Round(100*time.Millisecond), judged, aside))
	return diags
}

// unfinishedRestoreError is a node read that failed on an instance an earlier run's
// unfinished restore left stopped; fact says so, naming the node, for the plan
// (deploybody.JudgeUnfinishedRestore).
type unfinishedRestoreError struct {
	err  error
	fact string
}

func (e *unfinishedRestoreError) Error() string { return e.err.Error() + "; " + e.fact }
func (e *unfinishedRestoreError) Unwrap() error { return e.err }

// snapshotModel is the `snapshot` block (Incus only).
type snapshotModel struct {
	Enabled            types.Bool   `tfsdk:"enabled"`
	Keep               types.Int64  `tfsdk:"keep"`
	InterruptedRestore types.String `tfsdk:"interrupted_restore"`
}

// spec decodes the block into the engine's node spec (nil for no block).
func (m *snapshotModel) spec() *nodespec.Snapshot {
	if m == nil {
		return nil
	}
	return &nodespec.Snapshot{Enabled: m.Enabled.ValueBoolPointer(), Keep: int(m.Keep.ValueInt64()), InterruptedRestore: m.InterruptedRestore.ValueString()}
}

func snapshotBlockSchema() schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "Incus only: take a rollback point (`fediversity-gen-<N>`, N = the generation the node ran) before each switch, " +
			"and keep the newest `keep`. A rollback point is a set: a snapshot of the root disk and of every custom storage volume attached " +
			"to the instance, taken under one freeze, with a manifest in the instance config key `user.fediversity.set.<name>`; disk devices " +
			"that are host paths cannot be snapshotted and are named in a warning. When the node does not answer after the switch, the set is " +
			"restored (every member), the instance started, and the apply fails saying so. Before anything changes, the restore checks that the " +
			"storage pools and the project's `limits.disk` have room for a copy of every member, and refuses with the figures if not. " +
			"Before the restore, the state that stopped answering is kept aside as its own snapshots " +
			"(`fediversity-bricked-<time>`, of the root disk and of each custom volume); inspect them in a copy of their own with " +
			"`fediversity incus inspect-copy <instance> <snapshot> <new-name>`, whose volumes are copies of those snapshots and nothing of the live node. " +
			"Rotation never deletes them: remove them with `incus snapshot delete <instance> <snapshot>`. " +
			"A node with a failed unit is not restored (it keeps its new boot entry). Changing it redeploys nothing by itself.",
		Attributes: map[string]schema.Attribute{
			"enabled": schema.BoolAttribute{Optional: true, MarkdownDescription: "Take the snapshot. Default `true` when the block is present."},
			"keep": schema.Int64Attribute{Optional: true, MarkdownDescription: "How many rollback points (`fediversity-gen-*`) to keep, newest first. Default `3`.",
				Validators: []validator.Int64{int64validator.AtLeast(1)}},
			"interrupted_restore": schema.StringAttribute{Optional: true, MarkdownDescription: "What a deploy does first when an earlier run's restore " +
				"did not finish (it was cut off between stopping the instance and starting it again; the plan warns about it): `finish` (the default) " +
				"restores the rollback point that restore was restoring and starts the instance; `abort` puts the instance back on the state that " +
				"stopped answering, kept aside by that restore, and starts it. Either way the state kept aside stays, and the deploy then goes on.",
				Validators: []validator.String{stringvalidator.OneOf(nodespec.InterruptedRestoreFinish, nodespec.InterruptedRestoreAbort)}},
		},
	}
}
