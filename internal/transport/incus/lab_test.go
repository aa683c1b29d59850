package incus

// Lab tests: real incusd, real systemd and real nix in lab containers
// (FEDIVERSITY_LAB=1 after `bash lab/lab.sh up`). Tests that switch, snapshot or stop a
// node use a throwaway instance so the shared nodes stay clean.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

func labTransport(t *testing.T, node labtest.Node) *Transport {
	t.Helper()
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(Config{Client: c, Instance: node.Instance, Project: node.Project, Node: node.Name, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func labCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func freshSeed(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "incus-" + hex.EncodeToString(b[:])
}

func TestLabRunQuotingStdinExitCodes(t *testing.T) {
	labtest.Require(t)
	tr := labTransport(t, labtest.Nodes(t)[0])
	ctx := labCtx(t)

	if err := tr.Reach(ctx); err != nil {
		t.Fatalf("reach a lab node: %v", err)
	}
	awkward := []string{"a b", "'single'", `"double"`, "$HOME", "`id`", "$(id)", ";rm -rf /nope", "\\", "", "*", "new\nline", "ü"}
	res, err := tr.Run(ctx, append([]string{"printf", "[%s]"}, awkward...), deploybody.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, a := range awkward {
		want += "[" + a + "]"
	}
	if res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("got %d %q, want %q", res.ExitCode, res.Stdout, want)
	}

	stdin := []byte("line 1\n'quoted' \"x\" $HOME\x00binary\xff\n")
	res, err = tr.Run(ctx, []string{"cat"}, deploybody.RunOptions{Stdin: stdin})
	if err != nil || string(res.Stdout) != string(stdin) {
		t.Fatalf("stdin round trip: %v %q", err, res.Stdout)
	}
	// stdin with awkward argv: both stay data.
	res, err = tr.Run(ctx, []string{"sh", "-c", `cat; printf '|%s' "$@"`, "sh", "a b", "$0"}, deploybody.RunOptions{Stdin: []byte("in")})
	if err != nil || string(res.Stdout) != "in|a b|$0" {
		t.Fatalf("stdin with argv: %v %q", err, res.Stdout)
	}

	res, err = tr.Run(ctx, []string{"sh", "-c", "echo bad >&2; exit 42"}, deploybody.RunOptions{})
	if err != nil || res.ExitCode != 42 || string(res.Stderr) != "bad\n" {
		t.Fatalf("exit code: %v %+v", err, res)
	}
	res, err = tr.Run(ctx, []string{"fedi-no-such-command"}, deploybody.RunOptions{})
	if err != nil || res.ExitCode != 127 {
		t.Fatalf("missing command: want exit 127, got %v %+v", err, res)
	}
	if _, err := tr.Run(ctx, []string{"true"}, deploybody.RunOptions{Path: []string{"/a:b"}}); err == nil {
		t.Fatal("a PATH entry with ':' was accepted")
	}
}

func TestLabMissingInstanceIsUnreachable(t *testing.T) {
	labtest.Require(t)
	tr := labTransport(t, labtest.Node{Name: "ghost", Instance: "fedi-t-no-such-instance", Project: "default"})
	ctx := labCtx(t)
	err := tr.Reach(ctx)
	if !errors.Is(err, deploybody.ErrUnreachable) || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("Reach: want ErrUnreachable naming the node, got %v", err)
	}
	_, err = tr.Run(ctx, []string{"true"}, deploybody.RunOptions{})
	if !errors.Is(err, deploybody.ErrUnreachable) {
		t.Fatalf("Run: want ErrUnreachable, got %v", err)
	}
}

func resolve(t *testing.T, tr *Transport, link string) string {
	t.Helper()
	res, err := tr.Run(context.Background(), []string{"readlink", "-f", link}, deploybody.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func TestLabTransport(t *testing.T) {
	labtest.Require(t)
	seed := freshSeed(t)
	good := labtest.BuildClosureSeed(t, labtest.ClosureGood, seed)
	failed := labtest.BuildClosureSeed(t, labtest.ClosureFailedUnit, seed)
	node := labtest.NewInstance(t, "incus-tr")
	tr := labTransport(t, node)
	ctx := labCtx(t)

	t.Run("copy sends only missing paths", func(t *testing.T) {
		missing := labtest.MissingOnNode(t, node, good)
		st, err := tr.CopyClosure(ctx, good)
		if err != nil {
			t.Fatal(err)
		}
		if st.PathsTotal < 3 || missing == 0 || st.PathsMissing != missing || st.BytesSent <= 0 {
			t.Fatalf("first copy of a fresh closure: %+v", st)
		}
		again, err := tr.CopyClosure(ctx, good)
		if err != nil {
			t.Fatal(err)
		}
		if again.PathsMissing != 0 || again.BytesSent != 0 || again.PathsTotal != st.PathsTotal {
			t.Fatalf("re-copy: %+v, want 0 paths and 0 bytes sent", again)
		}
		// failed-unit shares fedi-tools and fedi-payload with good: only the rest goes.
		partial, err := tr.CopyClosure(ctx, failed)
		if err != nil {
			t.Fatal(err)
		}
		if partial.PathsMissing == 0 || partial.PathsMissing >= partial.PathsTotal {
			t.Fatalf("copy of a closure sharing paths: %+v", partial)
		}
		// No temporary files are left on the node.
		res, err := tr.Run(ctx, []string{"sh", "-c", "ls /var/tmp | grep -c fediversity- || true"}, deploybody.RunOptions{})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != "0" {
			t.Fatalf("temporary files left on the node: %v %q", err, res.Stdout)
		}
	})

	t.Run("closure tools on PATH", func(t *testing.T) {
		res, err := tr.Run(ctx, []string{"fedi-hello"}, deploybody.RunOptions{Path: []string{good + "/sw/bin"}})
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello from the closure") {
			t.Fatalf("fedi-hello via Path: %v %+v", err, res)
		}
		res, err = tr.Run(ctx, []string{"fedi-hello"}, deploybody.RunOptions{})
		if err != nil || res.ExitCode != 127 {
			t.Fatalf("fedi-hello without Path: want 127, got %v %+v", err, res)
		}
	})

	t.Run("switch good then failed unit", func(t *testing.T) {
		res, err := tr.Switch(ctx, good, "switch", 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 {
			t.Fatalf("switch good: exit %d\nstdout %s\nstderr %s", res.ExitCode, res.Stdout, res.Stderr)
		}
		if got := resolve(t, tr, "/run/current-system"); got != good {
			t.Fatalf("/run/current-system = %q, want %q", got, good)
		}
		res, err = tr.Switch(ctx, failed, "switch", 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 4 || !strings.Contains(res.Stderr, "fedi-broken.service") {
			t.Fatalf("switch failed-unit: exit %d, stderr %q", res.ExitCode, res.Stderr)
		}
		if err := tr.Reach(ctx); err != nil { // degraded is still an answer
			t.Fatalf("reach a degraded node: %v", err)
		}
	})

	t.Run("switch past its time limit is stopped and reported", func(t *testing.T) {
		slow := labtest.BuildClosureSeed(t, labtest.ClosureSlowSwitch, seed)
		if _, err := tr.CopyClosure(ctx, slow); err != nil {
			t.Fatal(err)
		}
		// slow-switch's activation takes 15 s; the limit is 3 s.
		res, err := tr.Switch(ctx, slow, "switch", 3*time.Second)
		if err == nil || !strings.Contains(err.Error(), "time limit") || !strings.Contains(err.Error(), node.Name) {
			t.Fatalf("want a time-limit error naming the node, got %v (%+v)", err, res)
		}
	})

	t.Run("switch keeps running when the caller goes away", func(t *testing.T) {
		slow := labtest.BuildClosureSeed(t, labtest.ClosureSlowSwitch, seed)
		if got := resolve(t, tr, "/run/current-system"); got == slow {
			t.Fatalf("precondition: %s is already the running system", slow)
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if _, err := tr.Switch(cctx, slow, "switch", time.Minute); err == nil {
			t.Fatal("a switch whose caller gave up after 3 s reported a result")
		}
		// The detached unit goes on without us and activates the closure.
		var got string
		for i := 0; i < 60 && got != slow; i++ {
			time.Sleep(time.Second)
			got = resolve(t, tr, "/run/current-system")
		}
		if got != slow {
			t.Fatalf("/run/current-system = %q after the abandoned switch, want %q", got, slow)
		}
		// It still holds switch-to-configuration's lock while it starts the units, as
		// the real one does: what follows (a boot) would be turned away with exit 11.
		// Wait for the switch to end.
		for i := 0; ; i++ {
			res, err := tr.Run(ctx, []string{"sh", "-c", "flock -n " + deploybody.SwitchLockFile + " true"}, deploybody.RunOptions{})
			if err == nil && res.ExitCode == 0 {
				break
			}
			if i == 60 {
				t.Fatalf("the abandoned switch still holds %s after a minute: %v %+v", deploybody.SwitchLockFile, err, res)
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("finalize and revert boot", func(t *testing.T) {
		g1, err := tr.FinalizeBoot(ctx, good, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got := resolve(t, tr, "/nix/var/nix/profiles/system"); got != good {
			t.Fatalf("profile after FinalizeBoot(good) = %q", got)
		}
		g2, err := tr.FinalizeBoot(ctx, failed, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if g2 <= g1 {
			t.Fatalf("generation %d after %d: want a new one", g2, g1)
		}
		if got := resolve(t, tr, "/nix/var/nix/profiles/system"); got != failed {
			t.Fatalf("profile after FinalizeBoot(failed) = %q", got)
		}
		if err := tr.RevertBoot(ctx, good, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := resolve(t, tr, "/nix/var/nix/profiles/system"); got != good {
			t.Fatalf("profile after RevertBoot(good) = %q", got)
		}
		res, err := tr.Run(ctx, []string{"cat", "/nix/var/nix/fediversity-boot-entry"}, deploybody.RunOptions{})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != good {
			t.Fatalf("boot entry after revert: %v %q", err, res.Stdout)
		}
		if g, err := tr.Generation(ctx); err != nil || g != g1 {
			t.Fatalf("generation after revert = %d (%v), want %d", g, err, g1)
		}
	})

	t.Run("snapshot rotation keeps exactly N rollback points and every bricked state", func(t *testing.T) {
		c := tr.c
		if err := c.CreateSnapshot(ctx, node.Instance, "operator-own"); err != nil {
			t.Fatal(err)
		}
		bricked := BrickedSnapshotName(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		if _, err := tr.KeepAside(ctx, bricked, bricked); err != nil {
			t.Fatal(err)
		}
		for gen := 1; gen <= 4; gen++ {
			if err := tr.SnapshotBeforeSwitch(ctx, GenerationSnapshotName(gen), 2); err != nil {
				t.Fatal(err)
			}
		}
		ours, err := tr.OurSnapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range ours {
			names = append(names, s.Name)
		}
		if strings.Join(names, ",") != bricked+",fediversity-gen-3,fediversity-gen-4" {
			t.Fatalf("our snapshots = %v, want the bricked state, gen-3 and gen-4", names)
		}
		all, err := c.ListSnapshots(ctx, node.Instance)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 4 {
			t.Fatalf("all snapshots = %+v, want the operator's, the bricked state and our two", all)
		}
		if err := c.DeleteSnapshot(ctx, node.Instance, bricked); err != nil {
			t.Fatal(err)
		}
		if err := tr.SnapshotBeforeSwitch(ctx, "operator-x", 2); err == nil {
			t.Fatal("a snapshot name without our prefix was accepted")
		}
	})

	t.Run("restore brings back a file changed after the snapshot", func(t *testing.T) {
		marker := "/root/fedi-marker"
		write := func(s string) {
			if _, err := tr.Run(ctx, []string{"sh", "-c", `printf %s "$1" > "$2"`, "sh", s, marker}, deploybody.RunOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		write("before")
		if err := tr.SnapshotBeforeSwitch(ctx, GenerationSnapshotName(5), 2); err != nil {
			t.Fatal(err)
		}
		write("after")
		if err := tr.RestoreSnapshot(ctx, GenerationSnapshotName(5)); err != nil {
			t.Fatal(err)
		}
		res, err := tr.Run(ctx, []string{"cat", marker}, deploybody.RunOptions{})
		if err != nil || string(res.Stdout) != "before" {
			t.Fatalf("after restore: %v %q, want \"before\"", err, res.Stdout)
		}
		if err := tr.Reach(ctx); err != nil {
			t.Fatalf("reach after restore: %v", err)
		}
		if err := tr.RestoreSnapshot(ctx, "fediversity-gen-999"); err == nil || !strings.Contains(err.Error(), node.Instance) {
			t.Fatalf("restore of a missing snapshot: %v", err)
		}
		_ = tr.c.Start(ctx, node.Instance) // the failed restore leaves it stopped
	})

	t.Run("stopped instance is unreachable", func(t *testing.T) {
		if err := tr.c.Stop(ctx, node.Instance, true, 0); err != nil {
			t.Fatal(err)
		}
		err := tr.Reach(ctx)
		if !errors.Is(err, deploybody.ErrUnreachable) || !strings.Contains(err.Error(), node.Name) {
			t.Fatalf("Reach of a stopped instance: %v", err)
		}
		_, err = tr.Run(ctx, []string{"true"}, deploybody.RunOptions{})
		if !errors.Is(err, deploybody.ErrUnreachable) {
			t.Fatalf("Run on a stopped instance: %v", err)
		}
		_, err = tr.CopyClosure(ctx, good)
		if !errors.Is(err, deploybody.ErrUnreachable) {
			t.Fatalf("CopyClosure to a stopped instance: %v", err)
		}
	})
}
