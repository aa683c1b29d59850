package deploybody

// The drift decision: what a node runs and boots against what the deployer knows of it.
//
// Both front ends ask it, in the same words: the provider's node switch when it reads a
// node (Read), against the system its state names; and the `fediversity` command when a
// staged rollout resumes, which keeps no record of its own of what a node runs, so it
// asks with none and resumes a node only when the answer adopts this run's system with
// an ok verdict. What each front end then does (a warning and a mark for the next plan,
// or a verdict-only pass in place of a deploy) is its own.

import (
	"context"
	"fmt"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// linkFunctions resolve links as readlink -e does ("" for a missing path or a loop of
// links), for several paths with one command: `links PATH...` runs one readlink -m (a
// line per path, existing or not), then each `link PATH`, in the same order, sets p to
// the next path's answer, tested for existence by the shell. Only when readlink -m
// printed nothing (an error reading a link) is the path asked of readlink -e alone.
// Every Read and every deploy's reboot check runs them, and on a lab node each command
// a script forks costs about 9 ms of CPU (docs/testing.md#plan-cost).
const linkFunctions = `nl='
'
links() { r=$(readlink -m "$@" 2>/dev/null) || r=; }
link() { p=${r%%"$nl"*}; r=${r#*"$nl"}
if [ -z "$p" ]; then p=$(readlink -e "$1" 2>/dev/null); elif [ ! -e "$1" ]; then p=; fi; }
`

// SystemScript prints /run/current-system, the system profile (both resolved, "" when
// either does not exist: a node that booted without a NixOS system, or whose /run was
// cleared, has no /run/current-system: that is not drift) and the profile's own link
// (system-<generation>-link), a line each: what ParseNodeSystem reads.
const SystemScript = linkFunctions + `links /run/current-system /nix/var/nix/profiles/system; ` +
	`link /run/current-system; c=$p; link /nix/var/nix/profiles/system; ` +
	`printf '%s\n' "$c" "$p" "$(readlink /nix/var/nix/profiles/system)"`

// NodeSystem is what a node says about its system.
type NodeSystem struct {
	// Running is what /run/current-system points at; Profile is what the system profile
	// (what the node boots) points at ("" when it has none).
	Running, Profile string
	// Generation is the system profile's generation (0 when unknown).
	Generation int
	// Record is the node's verdict record (nil: none, unread, or not asked for);
	// RecordErr says why it could not be read.
	Record    *VerdictRecord
	RecordErr error
}

// ParseNodeSystem reads SystemScript's three lines (missing lines are empty). An empty
// Running means the node runs no NixOS system.
func ParseNodeSystem(lines []string) NodeSystem {
	for len(lines) < 3 {
		lines = append(lines, "")
	}
	return NodeSystem{
		Running:    strings.TrimSpace(lines[0]),
		Profile:    strings.TrimSpace(lines[1]),
		Generation: records.ProfileGeneration(strings.TrimSpace(lines[2])),
	}
}

// ReadNodeSystem asks the node what it runs and boots, in one round trip, and reads its
// verdict record over the same connection when wantRecord says so (DriftQuestion.NeedsRecord).
// An error is the transport's, or a node that runs no NixOS system.
func ReadNodeSystem(ctx context.Context, t Transport, wantRecord func(NodeSystem) bool) (NodeSystem, error) {
	res, err := t.Run(ctx, []string{"sh", "-c", SystemScript}, RunOptions{Path: records.ToolPath})
	if err != nil {
		return NodeSystem{}, err
	}
	s := ParseNodeSystem(strings.Split(string(res.Stdout), "\n"))
	if err := s.CheckRead(res); err != nil {
		return NodeSystem{}, err
	}
	if wantRecord != nil && wantRecord(s) {
		s.Record, s.RecordErr = ReadVerdictRecord(ctx, t)
	}
	return s, nil
}

// CheckRead is the error of a read (of SystemScript, alone or first in a longer script)
// that exited non-zero or found no running system; nil when it found one.
func (s NodeSystem) CheckRead(res RunResult) error {
	if res.ExitCode != 0 || s.Running == "" {
		return fmt.Errorf("readlink /run/current-system found no system (exit %d, %s): the node runs no NixOS system", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

// DriftQuestion is what the deployer knows of a node before it reads it.
type DriftQuestion struct {
	Node string
	// Known is the system the deployer's own record says the node runs (the provider's
	// state); "" when it names none: an import, or the command, which keeps no record
	// of what a node runs beside the node's own.
	Known string
	// Failed is a system the deployer switched the node to and judged failed, whose
	// record it did not take ("" when none).
	Failed string
	// Activation is how the known system was activated: after "boot" the node runs its
	// previous system until its next boot.
	Activation Activation
	// Adopting: the deployer takes the node as it finds it (an import): a system on
	// record with a failed verdict is taken with that verdict, not deployed again.
	Adopting bool
}

// NeedsRecord tells whether the decision over s reads the node's verdict record: only
// when it would adopt the system the node runs, which it also boots.
func (q DriftQuestion) NeedsRecord(s NodeSystem) bool {
	return s.Running == s.Profile && s.Running != q.Known && s.Running != q.Failed
}

// DriftDecision is what a node's system is, against what the deployer knows.
type DriftDecision string

const (
	// DriftNone: the node runs the known system.
	DriftNone DriftDecision = "none"
	// DriftAwaitingBoot: activation = "boot"; the node boots the known system at its
	// next boot and runs its previous one until then. Not drift, not unfinished.
	DriftAwaitingBoot DriftDecision = "awaiting-boot"
	// DriftFailedDeploy: the node runs the system whose deploy the deployer judged
	// failed (DriftQuestion.Failed); the known system is kept, and deployed again.
	DriftFailedDeploy DriftDecision = "failed-deploy"
	// DriftUnfinishedSwitch: the node runs a system its boot entry does not point at: a
	// deploy cut off after its switch started, or a switch by hand without the profile
	// (nixos-rebuild test). Never adopted; deployed again.
	DriftUnfinishedSwitch DriftDecision = "unfinished-switch"
	// DriftAdoptWithVerdict: the node runs and boots another system, and holds the
	// verdict of the run that deployed it (ok, or any when adopting): the system is
	// taken with that verdict.
	DriftAdoptWithVerdict DriftDecision = "adopt-with-verdict"
	// DriftAdoptUnjudged: the node runs and boots another system without a verdict of it
	// on record: the system is taken without a verdict, and (unless adopting) deployed
	// again.
	DriftAdoptUnjudged DriftDecision = "adopt-unjudged"
	// DriftKeepFailed: the node runs and boots another system whose deploy's verdict
	// failed it: the known system is kept, and deployed again, as after a failed update.
	DriftKeepFailed DriftDecision = "keep-failed"
)

// Drift is the drift decision over one node, in the words both front ends show.
type Drift struct {
	Decision DriftDecision
	// Running, Profile and Generation are what the node runs, boots, and its profile's
	// generation (0 when unknown), as read.
	Running, Profile string
	Generation       int
	// Record is the verdict record the decision rests on: set for DriftAdoptWithVerdict
	// (its Result is the verdict taken) and DriftKeepFailed (its Result names the failure).
	Record *VerdictRecord
	// Fact is the decision in one or two sentences naming the node and the systems
	// ("" for DriftNone): each front end shows it and adds what it does about it.
	Fact string
}

// JudgeDrift decides what the node's system s is against what q knows. The known
// system, a system waiting for its boot (activation = "boot") and a system whose deploy
// failed are kept as they are; a system the node runs but does not boot is an unfinished
// switch, never adopted; any other system the node runs and boots is adopted, with the
// verdict its deploy recorded on the node when that names it (and is ok, or q adopts),
// and without one otherwise; a recorded failed verdict keeps the known system.
func JudgeDrift(q DriftQuestion, s NodeSystem) Drift {
	d := Drift{Running: s.Running, Profile: s.Profile, Generation: s.Generation}
	switch {
	case s.Running == q.Known:
		d.Decision = DriftNone
	case q.Activation == ActivationBoot && s.Profile == q.Known:
		d.Decision = DriftAwaitingBoot
		d.Fact = fmt.Sprintf("Node %s runs %s and boots %s at its next boot (activation = \"boot\").", q.Node, s.Running, q.Known)
	case s.Running == q.Failed:
		d.Decision = DriftFailedDeploy
		d.Fact = fmt.Sprintf("Node %s runs %s, which the last deploy switched to but judged failed.", q.Node, s.Running)
	case s.Profile != s.Running:
		d.Decision = DriftUnfinishedSwitch
		d.Fact = fmt.Sprintf("Node %s runs %s, but its system profile (what it boots) points at %s: the switch to %s was not finished. "+
			"Either a deploy was interrupted after its switch started (the CLI or the provider was stopped, a time limit ran out, the connection was lost), "+
			"or someone switched it by hand without setting the profile (nixos-rebuild test).",
			q.Node, s.Running, DescribeProfile(s.Profile), s.Running)
	default:
		judgeAdoption(q, s, &d)
	}
	return d
}

// judgeAdoption decides over a node that runs and boots a system q does not know (a
// deploy killed between its boot entry and its deployer's record, a switch by hand, or
// an import): with the verdict its own deploy recorded on the node, never with the
// verdict of another system.
func judgeAdoption(q DriftQuestion, s NodeSystem, d *Drift) {
	rec := s.Record
	if rec == nil || rec.Toplevel != s.Running || rec.Result == nil || rec.Result.Verdict == nil {
		d.Decision = DriftAdoptUnjudged
		d.Fact = fmt.Sprintf("Node %s runs and boots %s, but holds no verdict of it (%s names another system, or none): "+
			"a deploy was cut off after it set the boot entry and before its outcome was recorded, or the node was switched by hand.",
			q.Node, s.Running, records.VerdictRecordFile)
		return
	}
	d.Record = rec
	if rec.Result.Verdict.OK || q.Adopting {
		d.Decision = DriftAdoptWithVerdict
		d.Fact = fmt.Sprintf("Node %s runs and boots %s, and the run that deployed it recorded its verdict on the node (%s, at %s).",
			q.Node, s.Running, rec.Holder, rec.At.Format("2006-01-02T15:04:05Z"))
		return
	}
	d.Decision = DriftKeepFailed
	d.Fact = fmt.Sprintf("Node %s runs and boots %s; the run that deployed it was judged failed (%s) and stopped before its outcome was recorded.",
		q.Node, s.Running, strings.Join(rec.Result.Verdict.Reasons, "; "))
}

// DescribeProfile names a system profile's target in words ("no system" when the node
// has none).
func DescribeProfile(p string) string {
	if p == "" {
		return "no system"
	}
	return p
}
