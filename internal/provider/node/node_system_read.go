package node

// What Read learns from a node: the system it runs, the one it boots (the system
// profile) and, when Read would adopt that system, the node's own record of the
// verdict its deploy got (deploybody.VerdictRecord).

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// nodeSystem is what a node says about its system: what the drift decision reads
// (deploybody.NodeSystem), and what the plan reads besides.
type nodeSystem struct {
	deploybody.NodeSystem
	// booted is what decides a reboot on the node: its booted system's kernel, initrd,
	// kernel modules and reboot-triggers, its running system's switch-inhibitors (nil:
	// no /run/booted-system); bootedRead is false when the node printed no such line.
	booted     *deploybody.RebootFacts
	bootedRead bool
	// lastGood is the node's last good system ("" when it has none); lastGoodRead is
	// false when the login could not read its record (records.LastGoodReadScript).
	lastGood     string
	lastGoodRead bool
	// unfinishedRestore is the fact of an earlier run's unfinished restore of the
	// (Incus) node, when it does not run the system the question knows
	// (deploybody.JudgeUnfinishedRestore): "" when there is none.
	unfinishedRestore string
}

// readSystemScript prints what the drift decision reads (deploybody.SystemScript: the
// running system, the system profile and its generation), then what decides a reboot
// (deploybody.RebootFactsScript: what the next plan compares a new toplevel with), then
// the record of its last good system (what a plan of `deploy = "last-good"` deploys).
var readSystemScript = deploybody.SystemScript + "; " + deploybody.RebootFactsScript + "; " + records.LastGoodReadScript

// readNodeSystem asks the node what it runs and boots, in one round trip, and, when the
// drift question needs it (q.NeedsRecord), reads its verdict record over the same
// connection. A node that does not answer, or does not run what q knows, is asked for
// an earlier run's unfinished restore too (deploybody.JudgeUnfinishedRestore): an
// instance that runs the state a cut-off restore kept aside answers like any other, and
// only its snapshots tell.
func readNodeSystem(ctx context.Context, target kit.TransportTarget, cfg *kit.Config, q deploybody.DriftQuestion) (_ nodeSystem, err error) {
	node := q.Node
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
		if fact := deploybody.JudgeUnfinishedRestore(ctx, opened, q, deploybody.NodeSystem{}, err); fact != "" {
			return ns, &unfinishedRestoreError{err: err, fact: fact}
		}
		return ns, err
	}
	lines := strings.Split(string(res.Stdout), "\n")
	for len(lines) < 5 {
		lines = append(lines, "")
	}
	ns.NodeSystem = deploybody.ParseNodeSystem(lines[:3])
	ns.booted, ns.bootedRead = deploybody.ParseRebootFacts(lines[3])
	ns.lastGood, ns.lastGoodRead = records.ParseLastGoodLine(lines[4])
	if err := ns.CheckRead(res); err != nil {
		return nodeSystem{}, err
	}
	if q.NeedsRecord(ns.NodeSystem) {
		ns.Record, ns.RecordErr = deploybody.ReadVerdictRecord(ctx, t)
	}
	ns.unfinishedRestore = deploybody.JudgeUnfinishedRestore(ctx, opened, q, ns.NodeSystem, nil)
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

// adoptRunningSystem fills m with the system the node runs and boots, per the drift
// decision d (deploybody.DriftAdoptWithVerdict, DriftAdoptUnjudged or DriftKeepFailed).
// It returns the mark to leave for the next plan: an unfinished (unjudged) system, or
// a failed one, and diagnostics that say what was done, in the decision's words.
func adoptRunningSystem(node string, m *nodeSwitchModel, d deploybody.Drift, recordErr error, imported bool) (unjudged *interruptedDeploy, failed string, diags diag.Diagnostics) {
	if recordErr != nil {
		diags.AddWarning(fmt.Sprintf("Node %s: its verdict record could not be read", node),
			fmt.Sprintf("Reading %s failed: %v. The system the node runs is taken without a verdict, and the next plan deploys it again.", records.VerdictRecordFile, recordErr))
	}
	previous := m.Toplevel.ValueString()
	switch d.Decision {
	case deploybody.DriftKeepFailed:
		diags.AddWarning(fmt.Sprintf("Node %s runs a system whose deploy failed", node),
			fmt.Sprintf("%s The state keeps %s, so the next apply deploys and judges it again.", d.Fact, previous))
		return nil, d.Running, diags
	case deploybody.DriftAdoptWithVerdict:
		v, vdiags := verdictValue(d.Record.Result)
		diags.Append(vdiags...)
		m.Verdict = v
		if !imported {
			diags.AddWarning(fmt.Sprintf("Node %s runs %s, deployed by an apply that did not write its state", node, d.Running),
				fmt.Sprintf("%s The state takes that system with that verdict, in place of %s.", d.Fact, previous))
		}
	case deploybody.DriftAdoptUnjudged:
		m.Verdict = types.ObjectNull(verdictAttrTypes)
		if !imported {
			unjudged = &interruptedDeploy{toplevel: d.Running, why: d.Fact}
		}
	}
	m.Toplevel = types.StringValue(d.Running)
	m.Generation = types.Int64Null()
	if d.Generation > 0 {
		m.Generation = types.Int64Value(int64(d.Generation))
	}
	m.Changes = types.ObjectNull(changesAttrTypes)
	return unjudged, "", diags
}
