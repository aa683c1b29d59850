package fleet

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

const rosterKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"

func loadRosterText(t *testing.T, text string) *Roster {
	t.Helper()
	file := filepath.Join(t.TempDir(), "roster.json")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRoster(file)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A roster says what a fediversity_node_switch says of a node (lock_wait, a sudo user,
// revert_on_lockout, keepalive, insecure_ignore_host_key, strict, secret_chain,
// loop_budgets, checks, probes), and each reaches the SSH config and the body's options.
func TestRosterSetsEveryNodeField(t *testing.T) {
	r := loadRosterText(t, `{
  "timings": {"lock_wait": "5m", "settle": "2s"},
  "secret_chain": ["secrets-fetch.service"],
  "nodes": {
    "web01": {
      "host": "10.0.0.5", "port": 2201, "user": "deploy", "sudo": true,
      "host_key": "`+rosterKey+`", "keepalive": "30s", "revert_on_lockout": false,
      "jump": {"host": "bastion", "host_key": "`+rosterKey+`"},
      "toplevel": "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-web01",
      "strict": false, "activation": "reboot-if-needed", "loop_budgets": {"app.service": 2},
      "timings": {"lock_wait": "7m", "confirm_timeout": "45s"},
      "checks": [{"name": "up", "argv": ["true"], "interval": "1s"}],
      "probes": [{"name": "web", "url": "http://10.0.0.5/", "body_regexp": "ok", "timeout": "5s"}]
    },
    "lab": {"host": "127.0.0.1", "insecure_ignore_host_key": true, "keepalive": "0s"},
    "box": {"incus": {"instance": "box", "project": "tenants"}, "snapshot": {"keep": 2, "interrupted_restore": "abort"}}
  }
}`)
	creds := Credentials{PrivateKeyFile: "/k"}
	spec := r.Spec("web01")
	c := spec.Target().SSHConfig(creds)
	if c.Host != "10.0.0.5" || c.Port != 2201 || c.User != "deploy" || !c.Sudo || c.Keepalive != 30*time.Second || c.HostKey != rosterKey ||
		c.Jump == nil || c.Jump.Host != "bastion" || c.Jump.User != "deploy" {
		t.Fatalf("ssh config: %+v", c)
	}
	o := spec.Options(deploybody.Timings{})
	if o.Timings.LockWait != 7*time.Minute || o.Timings.ConfirmTimeout != 45*time.Second || o.Timings.Settle != 2*time.Second {
		t.Errorf("timings (the node's over the roster's): %+v", o.Timings)
	}
	if o.Activation != deploybody.ActivationRebootIfNeeded {
		t.Errorf("activation: %q, want reboot-if-needed", o.Activation)
	}
	if o.SelfRevert || o.Strict || o.LoopBudgets["app.service"] != 2 || strings.Join(o.SecretChain, ",") != "secrets-fetch.service" {
		t.Errorf("revert_on_lockout, strict, loop_budgets, secret_chain: %+v", o)
	}
	if len(o.Checks) != 1 || o.Checks[0].Interval != time.Second || len(o.Probes) != 1 || o.Probes[0].BodyPattern == nil || o.Probes[0].Timeout != 5*time.Second {
		t.Errorf("checks and probes: %+v %+v", o.Checks, o.Probes)
	}
	lab := r.Spec("lab").Target().SSHConfig(creds)
	if !lab.InsecureIgnoreHostKey || lab.Keepalive >= 0 {
		t.Errorf("insecure_ignore_host_key and keepalive 0s: %+v", lab)
	}
	if o := r.Spec("lab").Options(deploybody.Timings{}); !o.SelfRevert || o.Timings.LockWait != 5*time.Minute {
		t.Errorf("defaults: self-revert on, the roster's lock_wait: %+v", o)
	}
	if box := r.Spec("box"); box.Target().Kind != "incus" || box.Target().Project != "tenants" || box.SnapshotKeep() != 2 || box.InterruptedRestore() != "abort" || box.Options(deploybody.Timings{}).SelfRevert {
		t.Errorf("an Incus node with a snapshot guard: %+v", box.Target())
	}
	// Every timing a node's run reads is a key the roster accepts.
	for _, tm := range deploybody.TimingTable {
		if !tm.NodeTiming() {
			continue
		}
		r := loadRosterText(t, `{"timings": {"`+tm.Name+`": "11s"}, "nodes": {"a": {"host": "h", "host_key": "`+rosterKey+`"}}}`)
		set := r.Spec("a").OwnTimings()
		if *tm.In(&set) != 11*time.Second {
			t.Errorf("timings.%s did not reach the spec", tm.Name)
		}
	}
}

// The table's TIME column is each node's run, not 0s: a node whose sshd takes 300ms
// to hang up shows at least that long.
func TestOutcomeElapsedIsTheNodesRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { time.Sleep(300 * time.Millisecond); conn.Close() }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	r := loadRosterText(t, `{"nodes": {"slow": {"host": "127.0.0.1", "port": `+itoa(port)+`, "host_key": "`+rosterKey+`"}}}`)
	var done Event
	g := &Group{Roster: r, VerdictOnly: true, Strict: true, Credentials: Credentials{AgentSocket: "/nonexistent"},
		Progress: func(e Event) {
			if e.Done {
				done = e
			}
		}}
	outcomes, err := g.Run(context.Background())
	if err != nil || len(outcomes) != 1 {
		t.Fatalf("Run = %v, %v", outcomes, err)
	}
	o := outcomes[0]
	if o.Err == nil {
		t.Fatal("a node that hangs up must fail to connect")
	}
	if o.Elapsed < 300*time.Millisecond || o.Elapsed != done.Elapsed {
		t.Fatalf("Elapsed = %v (done event %v), want the run's ≥ 300ms", o.Elapsed, done.Elapsed)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
