package node

// What Read learns from a node: the system it runs, the one it boots (the system
// profile) and, when Read would adopt that system, the node's own record of the
// verdict its deploy got (deploybody.VerdictRecord).

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// nodeSystem is what a node says about its system.
type nodeSystem struct {
	running, profile string
	// generation is the system profile's generation (0 when unknown).
	generation int
	// record is the node's verdict record (nil: none, or unread: recordErr says why).
	record    *deploybody.VerdictRecord
	recordErr error
	// booted is what decides a reboot on the node: its booted system's kernel, initrd,
	// kernel modules and reboot-triggers, its running system's switch-inhibitors (nil:
	// no /run/booted-system); bootedRead is false when the node printed no such line.
	booted     *deploybody.RebootFacts
	bootedRead bool
	// lastGood is the node's last good system ("" when it has none); lastGoodRead is
	// false when the login could not read its record (records.LastGoodReadScript).
	lastGood     string
	lastGoodRead bool
	// pendingRestore describes an earlier run's unfinished restore of the (Incus)
	// node, read only when wantPending asked: "" when there is none.
	pendingRestore string
}

// readSystemScript prints /run/current-system, the system profile (both resolved;
// -e: every component must exist, and a node that booted without a NixOS system, or
// whose /run was cleared, has no /run/current-system: that is not "drift") and the
// profile's own link (system-<generation>-link), then what decides a reboot
// (deploybody.RebootFactsScript: what the next plan compares a new toplevel with), then
// the record of its last good system (what a plan of `deploy = "last-good"` deploys).
var readSystemScript = `printf '%s\n' "$(readlink -e /run/current-system)" "$(readlink -e /nix/var/nix/profiles/system)" "$(readlink /nix/var/nix/profiles/system)"; ` +
	deploybody.RebootFactsScript + "; " + records.LastGoodReadScript

// readNodeSystem asks the node what it runs and boots, in one round trip, and, when
// wantRecord says so, reads its verdict record over the same connection; when
// wantPending says so (a node that does not run what the state says), it lists an Incus
// node's unfinished restores too: an instance that runs the state a cut-off restore
// kept aside answers like any other, and only its snapshots tell.
func readNodeSystem(ctx context.Context, node string, target kit.TransportTarget, cfg *kit.Config, wantRecord, wantPending func(nodeSystem) bool) (_ nodeSystem, err error) {
	var ns nodeSystem
	opened, err := kit.OpenTransport(ctx, node, target, cfg)
	if err != nil {
		return ns, err
	}
	defer func() { _ = opened.Close() }()
	t := &countedTransport{Transport: opened}
	defer logNodeRead(ctx, node, target, opened, time.Now(), dialsOf(opened), t, &err)
	res, err := t.Run(ctx, []string{"sh", "-c", readSystemScript}, deploybody.RunOptions{})
	if err != nil {
		return ns, withPendingRestore(ctx, opened, err)
	}
	lines := strings.Split(string(res.Stdout), "\n")
	for len(lines) < 5 {
		lines = append(lines, "")
	}
	ns.running, ns.profile = strings.TrimSpace(lines[0]), strings.TrimSpace(lines[1])
	ns.generation = profileGeneration(strings.TrimSpace(lines[2]))
	ns.booted, ns.bootedRead = deploybody.ParseRebootFacts(lines[3])
	ns.lastGood, ns.lastGoodRead = records.ParseLastGoodLine(lines[4])
	if res.ExitCode != 0 || ns.running == "" {
		return nodeSystem{}, fmt.Errorf("readlink /run/current-system found no system (exit %d, %s): the node runs no NixOS system", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if wantRecord != nil && wantRecord(ns) {
		ns.record, ns.recordErr = deploybody.ReadVerdictRecord(ctx, t)
	}
	if it, ok := opened.(*incustransport.Transport); ok && wantPending != nil && wantPending(ns) {
		if pending, err := it.PendingRestores(ctx); err == nil && len(pending) > 0 {
			ns.pendingRestore = pending[len(pending)-1].Describe(it.Instance())
		}
	}
	return ns, nil
}

// countedTransport counts the commands a read runs on the node: each is a round trip
// (an SSH session, or an Incus exec).
type countedTransport struct {
	deploybody.Transport
	commands int
}

func (c *countedTransport) Run(ctx context.Context, argv []string, opts deploybody.RunOptions) (deploybody.RunResult, error) {
	c.commands++
	return c.Transport.Run(ctx, argv, opts)
}

// dialsOf is how many connections the transport's client has made so far (0 for a
// transport that does not count them: Incus).
func dialsOf(t deploybody.Transport) uint64 {
	if d, ok := t.(remote.Redials); ok {
		return d.Dials()
	}
	return 0
}

// logNodeRead logs what one node's read cost: its time, the connections it made (an
// SSH dial is a TCP connect, a key exchange, a host key check and a login) and the
// commands it ran. lab/bench-plan.sh reads these lines.
func logNodeRead(ctx context.Context, node string, target kit.TransportTarget, t deploybody.Transport, start time.Time, dials0 uint64, c *countedTransport, err *error) {
	tflog.Debug(ctx, "node read", map[string]any{
		"node":      node,
		"transport": target.Kind,
		"ms":        float64(time.Since(start).Microseconds()) / 1000,
		"dials":     dialsOf(t) - dials0,
		"commands":  c.commands,
		"failed":    *err != nil,
	})
}

// profileGeneration is N of a system profile link "system-N-link" (0 when it is not one).
func profileGeneration(link string) int {
	s, ok := strings.CutPrefix(link[strings.LastIndexByte(link, '/')+1:], "system-")
	if !ok {
		return 0
	}
	s, ok = strings.CutSuffix(s, "-link")
	n, err := strconv.Atoi(s)
	if !ok || err != nil {
		return 0
	}
	return n
}

// adoptedSystem is what Read does with a node that runs and boots a system the state
// does not name (a deploy killed between its boot entry and its state write, a switch
// by hand, or an import).
type adoptedSystem int

const (
	// adoptWithVerdict: the node's record holds the verdict of the run that deployed
	// it; the state takes the system with that verdict.
	adoptWithVerdict adoptedSystem = iota
	// adoptUnjudged: no verdict of it is on record; the state takes the system without
	// a verdict, and the next plan deploys again (unless it is an import).
	adoptUnjudged
	// keepFailed: its deploy's verdict failed it; the state keeps the previous system,
	// as a failed update does (docs/design.md#failed-deploy).
	keepFailed
)

// adoption decides what Read does with the running system ns.running (= the profile).
func adoption(ns nodeSystem, imported bool) adoptedSystem {
	rec := ns.record
	if rec == nil || rec.Toplevel != ns.running {
		return adoptUnjudged
	}
	if rec.Result.Verdict.OK || imported {
		return adoptWithVerdict
	}
	return keepFailed
}

// adoptRunningSystem fills m with the system the node runs and boots, per adoption.
// It returns the mark to leave for the next plan: an unfinished (unjudged) system, or
// a failed one, and diagnostics that say what was done.
func adoptRunningSystem(node string, m *nodeSwitchModel, ns nodeSystem, imported bool) (unjudged *interruptedDeploy, failed string, diags diag.Diagnostics) {
	if ns.recordErr != nil {
		diags.AddWarning(fmt.Sprintf("Node %s: its verdict record could not be read", node),
			fmt.Sprintf("Reading %s failed: %v. The system the node runs is taken without a verdict, and the next plan deploys it again.", records.VerdictRecordFile, ns.recordErr))
	}
	previous := m.Toplevel.ValueString()
	switch adoption(ns, imported) {
	case keepFailed:
		diags.AddWarning(fmt.Sprintf("Node %s runs a system whose deploy failed", node),
			fmt.Sprintf("The node runs and boots %s; the apply that deployed it was judged failed (%s) and stopped before it wrote the state. The state keeps %s, so the next apply deploys and judges it again.",
				ns.running, strings.Join(ns.record.Result.Verdict.Reasons, "; "), previous))
		return nil, ns.running, diags
	case adoptWithVerdict:
		v, vdiags := verdictValue(ns.record.Result)
		diags.Append(vdiags...)
		m.Verdict = v
		if !imported {
			diags.AddWarning(fmt.Sprintf("Node %s runs %s, deployed by an apply that did not write its state", node, ns.running),
				fmt.Sprintf("The node runs and boots %s, and the run that deployed it recorded its verdict on the node (%s, at %s). The state takes that system with that verdict, in place of %s.",
					ns.running, ns.record.Holder, ns.record.At.Format("2006-01-02T15:04:05Z"), previous))
		}
	case adoptUnjudged:
		m.Verdict = types.ObjectNull(verdictAttrTypes)
		if !imported {
			unjudged = &interruptedDeploy{toplevel: ns.running, why: fmt.Sprintf(
				"Node %s runs and boots %s, but holds no verdict of it (%s names another system, or none): an apply was cut off after it set the boot entry and before it wrote its state, or the node was switched by hand.",
				node, ns.running, records.VerdictRecordFile)}
		}
	}
	m.Toplevel = types.StringValue(ns.running)
	m.Generation = types.Int64Null()
	if ns.generation > 0 {
		m.Generation = types.Int64Value(int64(ns.generation))
	}
	m.Changes = types.ObjectNull(changesAttrTypes)
	return unjudged, "", diags
}
