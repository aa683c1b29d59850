package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// `fediversity rollback` on real lab nodes, from the real binary: a group deployed
// good (a and b; c fails strictly, so it never had a good system), then bad with
// --lenient (every verdict ok, with the failed unit as a warning: not good), then a
// garbage collection that deletes the old generations on a; the rollback switches a and
// b back to the good system (still in a's store: the last good system is a GC root),
// each with a fresh clean verdict, and leaves c untouched, saying it has no last good
// system.
func TestLabCLIRollbackToLastGood(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	bad := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	a, b, c := labtest.NewInstance(t, "rb-a"), labtest.NewInstance(t, "rb-b"), labtest.NewInstance(t, "rb-c")
	dir := t.TempDir()
	closures := filepath.Join(labtest.RepoRoot(t), "lab", "closures", "default.nix")
	roster := map[string]any{
		"timings": map[string]string{"settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"nodes":   map[string]any{},
	}
	rn := roster["nodes"].(map[string]any)
	build := func(attr string) map[string]any { return map[string]any{"file": closures, "attribute": attr} }
	for _, n := range []labtest.Node{a, b, c} {
		rn[n.Name] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey, "build": build(labtest.ClosureGood)}
	}
	rn[c.Name].(map[string]any)["build"] = build(labtest.ClosureFailedUnit)
	run := func(t *testing.T, wantCode int, args ...string) jsonSummary {
		t.Helper()
		rosterFile := writeFileJSON(t, dir, "roster.json", roster)
		stdout, stderr, code := runCLI(t, bin, append(args, "--output", "json", "--roster", rosterFile)...)
		var out jsonSummary
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != wantCode {
			t.Fatalf("%v: exit %d (want %d), %v:\n%s\nstderr:\n%s", args, code, wantCode, err, stdout, stderr)
		}
		return out
	}
	byName := func(out jsonSummary) map[string]jsonNode {
		m := map[string]jsonNode{}
		for _, n := range out.Nodes {
			m[n.Node] = n
		}
		return m
	}

	run(t, exitFailed, "deploy") // a, b good; c fails strictly
	for _, n := range []labtest.Node{a, b, c} {
		rn[n.Name].(map[string]any)["build"] = build(labtest.ClosureFailedUnit)
	}
	lenient := byName(run(t, exitOK, "deploy", "--lenient"))
	for _, n := range []string{a.Name, b.Name, c.Name} {
		if readlink(t, n, "/run/current-system") != bad || !lenient[n].OK {
			t.Fatalf("%s: after the lenient deploy runs %s (ok %v), want %s", n, readlink(t, n, "/run/current-system"), lenient[n].OK, bad)
		}
	}
	if out, err := labtest.IncusErr("exec", a.Name, "--", "nix-collect-garbage", "-d"); err != nil {
		t.Fatalf("garbage collection on %s: %v\n%s", a.Name, err, out)
	}
	// Only the GC root keeps the good system now: no profile generation names it.
	if gens := labtest.Incus(t, "exec", a.Name, "--", "sh", "-c", "for l in /nix/var/nix/profiles/system-*-link; do readlink -f \"$l\"; done"); strings.Contains(gens, good) || !strings.Contains(gens, bad) {
		t.Fatalf("%s: after the collection the system generations are %q: want only %s", a.Name, gens, bad)
	}
	if !inStore(t, a.Name, good) {
		t.Fatalf("%s: the garbage collection removed the last good system %s", a.Name, good)
	}

	out := byName(run(t, exitFailed, "rollback", "--to", "last-good"))
	for _, n := range []string{a.Name, b.Name} {
		got := out[n]
		if !got.OK || got.Toplevel != good || got.Verdict == nil || !got.Verdict.OK || len(got.Verdict.Reasons) != 0 || got.Verdict.VerdictOnly {
			t.Errorf("%s: rollback %+v, want a deploy of %s with a fresh clean verdict", n, got, good)
		}
		if running := readlink(t, n, "/run/current-system"); running != good {
			t.Errorf("%s runs %s after the rollback, want its last good system %s", n, running, good)
		}
	}
	if got := out[a.Name]; got.Copied == nil || got.Copied.PathsCopied != 0 {
		t.Errorf("%s: the rollback copied %+v: the pinned system should have been in its store", a.Name, got.Copied)
	}
	if got := out[c.Name]; got.OK || got.Phase != "read-last-good" || !strings.Contains(got.Error, "the node has no last good system") {
		t.Errorf("%s: %+v, want failed in read-last-good saying it has no last good system", c.Name, got)
	}
	if running := readlink(t, c.Name, "/run/current-system"); running != bad {
		t.Errorf("%s (no last good system) runs %s, want it untouched on %s", c.Name, running, bad)
	}
	if root := readlink(t, a.Name, records.LastGoodRoot); root != good {
		t.Errorf("%s: GC root %s points at %s, want %s", a.Name, records.LastGoodRoot, root, good)
	}
}
