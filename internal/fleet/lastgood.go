package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// The node's last good system: the toplevel whose verdict was last clean (ok with no
// reason at all, so a lenient pass over a failed unit is not good), recorded on the node
// by every group run that judged it so, and pinned against garbage collection, so that
// `fediversity rollback` can always switch the node back to it.
const (
	// LastGoodFile is the node's record of its last good system.
	LastGoodFile = "/var/lib/fediversity/last-good.json"
	// LastGoodRoot is the GC root that keeps the last good system in the node's store.
	LastGoodRoot = "/nix/var/nix/gcroots/fediversity/last-good"
)

const lastGoodVersion = 1

// LastGood is the node's record of its last good system.
type LastGood struct {
	Version  int       `json:"version"`
	Toplevel string    `json:"toplevel"`
	At       time.Time `json:"at"` // when its clean verdict was taken
}

// writeLastGoodScript pins $2 (a GC root, replaced atomically) and then writes stdin to
// $1 atomically: the record never names a system that is not pinned.
const writeLastGoodScript = `set -e; umask 077; r=$3; mkdir -p "${r%/*}" "${1%/*}"; chmod 700 "${1%/*}"
ln -sfn "$2" "$r.tmp"; mv -fT "$r.tmp" "$r"
cat >"$1.tmp"; mv -f "$1.tmp" "$1"`

// readLastGoodScript prints $1, or exits 3 when there is none.
const readLastGoodScript = `[ -e "$1" ] || exit 3; cat "$1"`

var nodeToolPath = []string{"/run/current-system/sw/bin", "/usr/bin", "/bin"}

// cleanVerdict reports whether res judged the node good: ok, with no reason (a
// lenient verdict's reasons are failures it let pass).
func cleanVerdict(res *deploybody.Result) bool {
	return res != nil && res.Verdict != nil && res.Verdict.OK && len(res.Verdict.Reasons) == 0 &&
		strings.HasPrefix(res.Toplevel, "/nix/store/") && res.RunningSystem == res.Toplevel
}

// recordLastGood records res's toplevel as the node's last good system when its
// verdict was clean. A failure is a warning: the node keeps its previous record.
func recordLastGood(ctx context.Context, t deploybody.Transport, res *deploybody.Result, now time.Time) {
	if !cleanVerdict(res) {
		return
	}
	b, err := json.Marshal(LastGood{Version: lastGoodVersion, Toplevel: res.Toplevel, At: now.UTC()})
	if err == nil {
		var out deploybody.RunResult
		out, err = t.Run(ctx, []string{"sh", "-c", writeLastGoodScript, "sh", LastGoodFile, res.Toplevel, LastGoodRoot},
			deploybody.RunOptions{Path: nodeToolPath, Stdin: b, Privileged: true})
		if err == nil && out.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", out.ExitCode, strings.TrimSpace(string(out.Stderr)))
		}
	}
	if err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("the last good system %s was not recorded on the node (%v): `fediversity rollback` takes the node back to the one recorded before", res.Toplevel, err))
	}
}

// ReadLastGood reads the node's last good system: nil (and no error) when the node
// has none.
func ReadLastGood(ctx context.Context, t deploybody.Transport) (*LastGood, error) {
	out, err := t.Run(ctx, []string{"sh", "-c", readLastGoodScript, "sh", LastGoodFile}, deploybody.RunOptions{Path: nodeToolPath, Privileged: true})
	if err != nil {
		return nil, err
	}
	switch out.ExitCode {
	case 0:
	case 3:
		return nil, nil
	default:
		return nil, fmt.Errorf("reading %s exited %d: %s", LastGoodFile, out.ExitCode, strings.TrimSpace(string(out.Stderr)))
	}
	var rec LastGood
	if err := json.Unmarshal(out.Stdout, &rec); err != nil {
		return nil, fmt.Errorf("%s is not a record of the last good system: %w", LastGoodFile, err)
	}
	if rec.Version != lastGoodVersion || !strings.HasPrefix(rec.Toplevel, "/nix/store/") {
		return nil, nil
	}
	return &rec, nil
}

// lastGoodTarget sets opts to deploy the node's last good system instead of a build.
// A node without one fails, untouched: it never had a clean verdict from a group run.
func lastGoodTarget(ctx context.Context, t deploybody.Transport, opts *deploybody.Options) error {
	rec, err := ReadLastGood(ctx, t)
	if err != nil {
		return &deploybody.DeployError{Node: opts.Node, Phase: "read-last-good", Err: err,
			Hint: "check that the node answers (its roster entry, SSH_PRIVATE_KEY_FILE / SSH_AUTH_SOCK)"}
	}
	if rec == nil {
		return &deploybody.DeployError{Node: opts.Node, Phase: "read-last-good",
			Err:  fmt.Errorf("the node has no last good system (%s): no deploy by the fediversity command ever judged it clean", LastGoodFile),
			Hint: "deploy a good system to it first; it was left untouched"}
	}
	opts.Toplevel, opts.Build = rec.Toplevel, nil
	return nil
}
