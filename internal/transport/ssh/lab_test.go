package ssh

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// Lab tests: real sshd, nix and systemd in Incus containers (FEDIVERSITY_LAB=1).

func labConfig(n labtest.Node) Config {
	return Config{Host: n.SSHHost, Port: n.SSHPort, HostKey: n.HostKey, PrivateKeyFile: labtest.KeyFile()}
}

func TestLabHostKeys(t *testing.T) {
	nodes := labtest.Nodes(t)
	if len(nodes) < 2 {
		t.Fatal("the lab needs two nodes for the changed-key test")
	}
	n, other := nodes[0], nodes[1]
	pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(n.HostKey))
	if err != nil {
		t.Fatal(err)
	}
	fp := gossh.FingerprintSHA256(pub)
	run := func(cfg Config) error {
		c, err := NewClient(cfg, nil)
		if err != nil {
			return err
		}
		defer mustClose(t, c)
		_, err = c.Exec(tctx(t), []string{"true"}, nil, nil, nil)
		return err
	}
	if err := run(labConfig(n)); err != nil {
		t.Fatalf("pinned host key: %v", err)
	}
	cfg := labConfig(n)
	cfg.HostKey, cfg.KnownHostsFile = "", labtest.KnownHostsFile()
	if err := run(cfg); err != nil {
		t.Fatalf("lab known_hosts: %v", err)
	}
	// A known_hosts without this node: refused, fingerprint shown.
	kh := filepath.Join(t.TempDir(), "known_hosts")
	_ = os.WriteFile(kh, []byte(fmt.Sprintf("[%s]:%d %s\n", other.SSHHost, other.SSHPort, other.HostKey)), 0o600)
	cfg.KnownHostsFile = kh
	if err := run(cfg); err == nil || !strings.Contains(err.Error(), "unknown host key") || !strings.Contains(err.Error(), fp) {
		t.Fatalf("unknown key: %v (want the fingerprint %s)", err, fp)
	}
	// Another node's key pinned: the key "changed".
	cfg = labConfig(n)
	cfg.HostKey = other.HostKey
	var hk *HostKeyError
	if err := run(cfg); !errors.As(err, &hk) || !strings.Contains(err.Error(), "HOST KEY MISMATCH") || hk.Offered != fp {
		t.Fatalf("changed key: %v", err)
	}
}

func TestLabJumpHost(t *testing.T) {
	labtest.Require(t)
	n := labtest.Nodes(t)[0]
	// The jump host is a real OpenSSH sshd on the deployer's loopback (containers have
	// no network, so no lab node can reach another); it opens the TCP connection to the
	// lab node's loopback proxy with direct-tcpip.
	s := startSSHD(t)
	jump := s.config()
	target := labConfig(n)
	target.Jump = &jump
	tr, err := New(n.Name, target, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, tr)
	// The lab nodes share hostname and machine-id (one image), so mark this one.
	marker := fmt.Sprintf("jump-%d", time.Now().UnixNano())
	labtest.Incus(t, "exec", n.Instance, "--", "sh", "-c", "echo "+marker+" > /run/fediversity-jump-marker")
	res, err := tr.Run(tctx(t), []string{"cat", "/run/fediversity-jump-marker"}, deploybody.RunOptions{})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != marker {
		t.Fatalf("through the jump host: %q %v, want the marker %s of %s", res.Stdout, err, marker, n.Name)
	}
	roundTrip(t, tr)
}

// switchLog captures the transport's log so the test can act when the switch started.
type switchLog struct {
	t       *testing.T
	started chan string
}

func (l *switchLog) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.t.Log(msg)
	if i := strings.Index(msg, "switch: started fediversity-switch-"); i >= 0 {
		unit := strings.Fields(msg[i+len("switch: started "):])[0]
		select {
		case l.started <- unit:
		default:
		}
	}
}

func TestLabDeploy(t *testing.T) {
	labtest.Require(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	goodV2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	failed := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch)
	n := labtest.NewInstance(t, "ssh-deploy")
	log := &switchLog{t: t, started: make(chan string, 1)}
	tr, err := New(n.Name, labConfig(n), log.logf)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, tr)
	// One bound for the whole test: its steps (copies, switches of up to 2 minutes each,
	// polls) run one after the other, and on a loaded CI machine they take longer than
	// tctx's 2 minutes together.
	ctx := labCtx(t)
	sh := func(script string) string {
		t.Helper()
		res, err := tr.Run(ctx, []string{"/bin/sh", "-c", script}, deploybody.RunOptions{})
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}

	if err := tr.Reach(ctx); err != nil {
		t.Fatalf("reach: %v", err)
	}
	roundTrip(t, tr)

	t.Run("copy then re-copy sends nothing", func(t *testing.T) {
		missing := labtest.MissingOnNode(t, n, good)
		st, err := tr.CopyClosure(ctx, good)
		if err != nil {
			t.Fatal(err)
		}
		if st.PathsTotal < 3 || missing == 0 || st.PathsMissing != missing || st.BytesSent < 256<<10 {
			t.Fatalf("first copy into a fresh node: %+v", st)
		}
		st, err = tr.CopyClosure(ctx, good)
		if err != nil || st.PathsMissing != 0 || st.BytesSent != 0 {
			t.Fatalf("re-copy: %+v %v, want 0 paths and 0 bytes", st, err)
		}
		if got := sh("nix-store --check-validity " + good + " && echo valid"); got != "valid" {
			t.Fatalf("node store: %q", got)
		}
	})

	t.Run("closure tools on PATH", func(t *testing.T) {
		res, err := tr.Run(ctx, []string{"fedi-hello"}, deploybody.RunOptions{Path: []string{good + "/sw/bin"}})
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello from the closure") {
			t.Fatalf("fedi-hello via Path: exit %d %q %v", res.ExitCode, res.Stdout, err)
		}
	})

	t.Run("switch good", func(t *testing.T) {
		res, err := tr.Switch(ctx, good, "switch", 2*time.Minute)
		if err != nil || res.ExitCode != 0 || res.Reconnected {
			t.Fatalf("switch good: %+v %v", res, err)
		}
		if got := sh("readlink -f /run/current-system"); got != good {
			t.Fatalf("/run/current-system = %q, want %s", got, good)
		}
		if got := sh("systemctl is-active fedi-web.service fedi-setup.service"); got != "active\nactive" {
			t.Fatalf("units: %q", got)
		}
	})

	t.Run("finalize and revert boot entry", func(t *testing.T) {
		gen1, err := tr.FinalizeBoot(ctx, good, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := tr.FinalizeBoot(ctx, good, time.Minute); err != nil || again != gen1 {
			t.Fatalf("finalizing the same toplevel again: generation %d (%v), want %d", again, err, gen1)
		}
		if _, err := tr.CopyClosure(ctx, goodV2); err != nil {
			t.Fatal(err)
		}
		gen2, err := tr.FinalizeBoot(ctx, goodV2, time.Minute)
		if err != nil || gen2 != gen1+1 {
			t.Fatalf("generation after v2 = %d (%v), want %d", gen2, err, gen1+1)
		}
		if got := sh("readlink -f /nix/var/nix/profiles/system; cat /nix/var/nix/fediversity-boot-entry"); got != goodV2+"\n"+goodV2 {
			t.Fatalf("profile and boot entry: %q, want %s twice", got, goodV2)
		}
		// The node still runs good (only the boot entry moved): revert to it.
		if err := tr.RevertBoot(ctx, "", time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := sh("readlink /nix/var/nix/profiles/system; readlink -f /nix/var/nix/profiles/system; cat /nix/var/nix/fediversity-boot-entry"); got != fmt.Sprintf("system-%d-link\n%s\n%s", gen1, good, good) {
			t.Fatalf("after revert: %q, want generation %d = %s", got, gen1, good)
		}
	})

	t.Run("failed unit", func(t *testing.T) {
		if _, err := tr.CopyClosure(ctx, failed); err != nil {
			t.Fatal(err)
		}
		res, err := tr.Switch(ctx, failed, "switch", 2*time.Minute)
		if err != nil || res.ExitCode != 4 || !strings.Contains(res.Stderr, "warning: the following units failed: fedi-broken.service") {
			t.Fatalf("switch failed-unit: %+v %v", res, err)
		}
	})

	t.Run("time limit", func(t *testing.T) {
		if _, err := tr.CopyClosure(ctx, slow); err != nil {
			t.Fatal(err)
		}
		before := sh("readlink -f /run/current-system")
		_, err := tr.Switch(ctx, slow, "switch", 3*time.Second)
		if err == nil || !strings.Contains(err.Error(), "time limit") || !strings.Contains(err.Error(), n.Name) {
			t.Fatalf("switch past its limit: %v", err)
		}
		if got := sh("readlink -f /run/current-system"); got != before {
			t.Fatalf("a switch stopped at its limit still moved /run/current-system to %s", got)
		}
	})

	t.Run("dropped connection during the switch", func(t *testing.T) {
		type out struct {
			res deploybody.SwitchResult
			err error
		}
		// Forget the start of an earlier subtest's switch (its result files stay on the
		// node for an hour, so its name would look like a finished switch).
		select {
		case <-log.started:
		default:
		}
		done := make(chan out, 1)
		go func() {
			res, err := tr.Switch(ctx, slow, "switch", 2*time.Minute)
			done <- out{res, err}
		}()
		var unit string
		select {
		case unit = <-log.started:
		case <-time.After(time.Minute):
			t.Fatal("the switch never started")
		}
		c := tr.Client()
		c.mu.Lock()
		_ = c.conn.net.Close() // the TCP connection under SSH: as if the network dropped
		c.mu.Unlock()
		// The drop happened mid-switch: no result yet on the node (slow-switch takes 15 s).
		if rc := labtest.Incus(t, "exec", n.Instance, "--", "sh", "-c", "ls /run/fediversity/"+unit+".rc 2>/dev/null; true"); strings.TrimSpace(rc) != "" {
			t.Fatalf("the switch had already finished when the connection dropped: %s", rc)
		}
		var o out
		select {
		case o = <-done:
		case <-time.After(3 * time.Minute):
			t.Fatal("no switch result after the drop")
		}
		if o.err != nil || o.res.ExitCode != 0 || !o.res.Reconnected {
			t.Fatalf("after a dropped connection: %+v %v, want exit 0 and Reconnected", o.res, o.err)
		}
		if got := sh("readlink -f /run/current-system"); got != slow {
			t.Fatalf("/run/current-system = %q, want %s", got, slow)
		}
	})
}

// TestLabClosureScenarios proves that each lab closure (lab/closures) makes a real
// node show the unit state the verdict code is written against (LAB.md's table).
func TestLabClosureScenarios(t *testing.T) {
	labtest.Require(t)
	attrs := []string{labtest.ClosureGood, labtest.ClosureHostFault, labtest.ClosureClosureFault, labtest.ClosureRestartLoop,
		labtest.ClosureSkipped, labtest.ClosureChain, labtest.ClosureChainMemberFails, labtest.ClosureChainNoProgress}
	paths := map[string]string{}
	for _, a := range attrs {
		paths[a] = labtest.BuildClosure(t, a)
	}
	n := labtest.NewInstance(t, "ssh-scenarios")
	tr, err := New(n.Name, labConfig(n), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, tr)
	// One bound for the whole test: its steps (copies, switches of up to 2 minutes each,
	// polls) run one after the other, and on a loaded CI machine they take longer than
	// tctx's 2 minutes together.
	ctx := labCtx(t)
	show := func(t *testing.T, unit string) map[string]string {
		t.Helper()
		res, err := tr.Run(ctx, []string{"systemctl", "show", "-p", "ActiveState,SubState,Result,NRestarts,ExecMainStatus,ConditionResult,InvocationID", unit}, deploybody.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("systemctl show %s: %v %s", unit, err, res.Stderr)
		}
		m := map[string]string{}
		for _, l := range strings.Split(string(res.Stdout), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	// eventually polls cond (bounded: 60 tries a second apart).
	eventually := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		for i := 0; i < 60; i++ {
			if cond() {
				return
			}
			time.Sleep(time.Second)
		}
		t.Fatalf("%s: not after 60 s", what)
	}
	switchTo := func(t *testing.T, attr string, wantCode int, wantFailed string) {
		t.Helper()
		if _, err := tr.CopyClosure(ctx, paths[attr]); err != nil {
			t.Fatal(err)
		}
		res, err := tr.Switch(ctx, paths[attr], "switch", 2*time.Minute)
		if err != nil {
			t.Fatalf("switch %s: %v", attr, err)
		}
		if wantCode >= 0 && res.ExitCode != wantCode {
			t.Fatalf("switch %s: exit %d, want %d; stderr:\n%s", attr, res.ExitCode, wantCode, res.Stderr)
		}
		if wantFailed != "" && !strings.Contains(res.Stderr, "the following units failed: "+wantFailed) {
			t.Fatalf("switch %s: stderr does not name %s:\n%s", attr, wantFailed, res.Stderr)
		}
	}

	t.Run("host fault 214", func(t *testing.T) {
		switchTo(t, labtest.ClosureHostFault, 4, "fedi-rt.service")
		if m := show(t, "fedi-rt.service"); m["ActiveState"] != "failed" || m["ExecMainStatus"] != "214" {
			t.Fatalf("fedi-rt.service: %v", m)
		}
	})
	t.Run("closure fault 203", func(t *testing.T) {
		switchTo(t, labtest.ClosureClosureFault, 4, "fedi-missing.service")
		if m := show(t, "fedi-missing.service"); m["ActiveState"] != "failed" || m["ExecMainStatus"] != "203" {
			t.Fatalf("fedi-missing.service: %v", m)
		}
		// The previous closure's unit is gone from the node.
		if m := show(t, "fedi-rt.service"); m["ActiveState"] == "failed" {
			t.Fatalf("fedi-rt.service of the previous closure is still failed: %v", m)
		}
	})
	t.Run("restart loop", func(t *testing.T) {
		switchTo(t, labtest.ClosureRestartLoop, -1, "")
		eventually(t, "fedi-loop.service restarting", func() bool {
			m := show(t, "fedi-loop.service")
			return m["NRestarts"] != "" && m["NRestarts"] != "0" && m["NRestarts"] != "1"
		})
	})
	t.Run("skipped on condition", func(t *testing.T) {
		switchTo(t, labtest.ClosureSkipped, 0, "")
		if m := show(t, "fedi-skipped.service"); m["ActiveState"] != "inactive" || m["ConditionResult"] != "no" || m["InvocationID"] != "" {
			t.Fatalf("fedi-skipped.service: %v", m)
		}
	})
	t.Run("secret chain converges", func(t *testing.T) {
		switchTo(t, labtest.ClosureChain, 4, "app.service")
		eventually(t, "/run/secret", func() bool {
			res, _ := tr.Run(ctx, []string{"test", "-e", "/run/secret"}, deploybody.RunOptions{})
			return res.ExitCode == 0
		})
		if res, err := tr.Run(ctx, []string{"systemctl", "restart", "app.service"}, deploybody.RunOptions{}); err != nil || res.ExitCode != 0 {
			t.Fatalf("restart app: %v %s", err, res.Stderr)
		}
		eventually(t, "app.service active", func() bool { return show(t, "app.service")["ActiveState"] == "active" })
	})
	t.Run("secret chain member fails", func(t *testing.T) {
		switchTo(t, labtest.ClosureChainMemberFails, 4, "")
		eventually(t, "secret-chain-fetch.service failed", func() bool { return show(t, "secret-chain-fetch.service")["ActiveState"] == "failed" })
		if res, _ := tr.Run(ctx, []string{"test", "-e", "/run/secret"}, deploybody.RunOptions{}); res.ExitCode == 0 {
			t.Fatal("/run/secret exists though the chain failed")
		}
	})
	t.Run("secret chain makes no progress", func(t *testing.T) {
		switchTo(t, labtest.ClosureChainNoProgress, 4, "app.service")
		if m := show(t, "secret-chain-fetch.service"); m["ActiveState"] != "active" {
			t.Fatalf("secret-chain-fetch.service: %v", m)
		}
		if res, _ := tr.Run(ctx, []string{"sh", "-c", "ls /run/fediversity-chain/*.progress"}, deploybody.RunOptions{}); res.ExitCode == 0 {
			t.Fatalf("progress files exist: %s", res.Stdout)
		}
	})
	t.Run("good again clears failures", func(t *testing.T) {
		switchTo(t, labtest.ClosureGood, 0, "")
		res, _ := tr.Run(ctx, []string{"systemctl", "is-system-running"}, deploybody.RunOptions{})
		if s := strings.TrimSpace(string(res.Stdout)); s != "running" {
			t.Fatalf("is-system-running = %q after switching back to good", s)
		}
	})
}

// labCtx bounds a whole lab test that runs several switches in turn.
func labCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	return c
}
