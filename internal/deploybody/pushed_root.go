package deploybody

import (
	"context"
	"fmt"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
)

// The pushed closure's GC root. Between the copy and the moment the system profile (or
// /run/current-system) holds the new system, nothing on the node roots it: a garbage
// collection then (nix.gc's timer, an operator's nix-collect-garbage) would delete what
// the copy sent, and the switch would fail on missing paths. So the copy's first round
// trip points PushedRoot at the toplevel before it asks which paths the node lacks
// (a root on a path that is not valid yet is skipped by the collector, and holds the
// path from the moment the import makes it valid); the boot entry's round trip after
// the profile took over releases it (remote.FinalizeBoot), and a run that ends before
// its boot entry releases it as it unlocks. One root per node is enough: only the run
// that holds the node's lock pushes.

// PushedRootDir holds the roots this project keeps on a node's store.
const PushedRootDir = "/nix/var/nix/gcroots/fediversity"

// PushedRoot is the GC root on the closure a deploy is pushing.
const PushedRoot = PushedRootDir + "/pushed-system"

// PushRootScript points PushedRoot at the toplevel $1, then runs the rest of its
// arguments (the query of the paths the node lacks). Exit 93: the root could not be
// made.
const PushRootScript = `top=$1; shift; mkdir -p ` + PushedRootDir + ` && ln -sfn "$top" ` + PushedRoot + ` || exit 93; exec "$@"`

// ReleasePushedRootScript removes PushedRoot when it still points at the toplevel $2
// (a later run's root is not this run's to remove).
const ReleasePushedRootScript = `if [ "$(readlink ` + PushedRoot + ` 2>/dev/null)" = "$2" ]; then rm -f ` + PushedRoot + `; fi`

// releasePushedRoot removes this run's GC root on the pushed closure, for a run that
// ends before its boot entry (whose round trip releases it). A failure only warns: the
// next deploy of the node replaces the root.
func (e *runEnv) releasePushedRoot(ctx context.Context, toplevel string) {
	if toplevel == "" {
		return
	}
	res, err := e.t.Run(ctx, []string{"sh", "-c", ReleasePushedRootScript, "sh", "", toplevel}, RunOptions{Path: records.ToolPath, Privileged: true})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exited %d: %s", res.ExitCode, judge.FirstLine(string(res.Stderr), "no output"))
	}
	if err != nil {
		e.log(ctx, LevelWarn, PhaseConclude, "could not release the pushed closure's GC root "+PushedRoot+" (the next deploy replaces it): "+err.Error(), nil)
	}
}
