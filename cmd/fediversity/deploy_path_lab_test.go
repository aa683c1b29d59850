package main

// The deploy path on a real lab node, through the command's binary (until now shown on
// the deploy body's fake node only): the phases run in the order the deploy body
// promises; a unit that fails leaves the node on the new system with its boot entry
// (the system profile) pointing at it; a unit systemd cannot spawn because the closure
// names a missing binary is a closure fault, 203/EXEC; a unit in a restart loop is
// named and does not fail the deploy.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// specPhases is the order of the deploy body's phases (docs/design.md#phases): the step
// table itself, which records every phase of a run, a skipped one with its note.
var specPhases = deploybody.Phases

type pathNode struct {
	Node     string `json:"node"`
	OK       bool   `json:"ok"`
	Toplevel string `json:"toplevel"`
	Phases   []struct {
		Name string `json:"name"`
	} `json:"phases"`
	Verdict struct {
		Failed []struct {
			Unit string `json:"unit"`
		} `json:"failed_units"`
		RestartLoops []struct {
			Unit string `json:"unit"`
		} `json:"restart_loops"`
		NeverSpawnedClosure []struct {
			Unit   string `json:"unit"`
			Status int    `json:"status"`
		} `json:"never_spawned_closure"`
		Reasons []string `json:"reasons"`
	} `json:"verdict"`
}

func TestLabCLIDeployPathOnARealNode(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	node := labtest.NewInstance(t, "cli-path")
	dir := t.TempDir()
	deploy := func(t *testing.T, attr string) (pathNode, int, string) {
		t.Helper()
		top := labtest.BuildClosure(t, attr)
		roster := writeFileJSON(t, dir, attr+".json", map[string]any{
			"timings": map[string]string{"settle": "2s", "watch": "6s", "sample_interval": "1s"},
			"nodes": map[string]any{node.Name: map[string]any{
				"host": node.SSHHost, "port": node.SSHPort, "host_key": node.HostKey, "toplevel": top,
			}},
		})
		stdout, stderr, code := runCLI(t, bin, "deploy", "--json", "--roster", roster)
		var out struct {
			Nodes []pathNode `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Nodes) != 1 {
			t.Fatalf("--json output (%v):\n%s\nstderr:\n%s", err, stdout, stderr)
		}
		n := out.Nodes[0]
		var names []string
		for _, p := range n.Phases {
			names = append(names, p.Name)
		}
		if err := inOrder(names, specPhases); err != nil {
			t.Errorf("%s: phases %v: %v", attr, names, err)
		}
		if n.Toplevel != top {
			t.Errorf("%s: deployed %q, want %s", attr, n.Toplevel, top)
		}
		return n, code, top
	}

	t.Run("failed unit keeps the new boot entry", func(t *testing.T) {
		n, code, top := deploy(t, labtest.ClosureFailedUnit)
		if code != exitFailed || n.OK || len(n.Verdict.Failed) == 0 || n.Verdict.Failed[0].Unit != "fedi-broken.service" {
			t.Fatalf("exit %d, ok %v, failed units %+v; want exit %d naming fedi-broken.service", code, n.OK, n.Verdict.Failed, exitFailed)
		}
		for _, link := range []string{"/run/current-system", "/nix/var/nix/profiles/system"} {
			if got := readlink(t, node.Instance, link); got != top {
				t.Errorf("%s -> %s after the failed unit; want the new system %s", link, got, top)
			}
		}
	})
	t.Run("203/EXEC is a closure fault on the deploy path", func(t *testing.T) {
		n, code, _ := deploy(t, labtest.ClosureClosureFault)
		spawn := n.Verdict.NeverSpawnedClosure
		if code != exitFailed || len(spawn) != 1 || spawn[0].Unit != "fedi-missing.service" || spawn[0].Status != 203 {
			t.Fatalf("exit %d, never spawned (closure) %+v; want exit %d naming fedi-missing.service with 203", code, spawn, exitFailed)
		}
	})
	t.Run("a restart loop is named and does not fail the deploy", func(t *testing.T) {
		n, code, _ := deploy(t, labtest.ClosureRestartLoop)
		if code != 0 || !n.OK || !slices.ContainsFunc(n.Verdict.RestartLoops, func(l struct {
			Unit string `json:"unit"`
		}) bool {
			return l.Unit == "fedi-loop.service"
		}) {
			t.Fatalf("exit %d, ok %v, restart loops %+v, reasons %v; want exit 0 naming fedi-loop.service", code, n.OK, n.Verdict.RestartLoops, n.Verdict.Reasons)
		}
	})
}

// inOrder says whether want is a subsequence of got: every phase of want ran, in order.
func inOrder(got, want []string) error {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	if i < len(want) {
		return fmt.Errorf("phase %q missing or out of order (want the order %s)", want[i], strings.Join(want, " → "))
	}
	return nil
}
