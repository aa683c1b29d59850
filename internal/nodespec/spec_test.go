package nodespec

import (
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD"

// Every problem names its field and says what to do; a good spec has none.
func TestValidateNamesFieldAndRemedy(t *testing.T) {
	yes := true
	good := Spec{Node: "web01", SSH: &SSH{Host: "h", HostKey: testKey, Keepalive: "0s", RevertOnLockout: &yes},
		Timings: map[string]string{"lock_wait": "5m"}, Activation: "reboot-if-needed", SecretChain: []string{"a.service"}, LoopBudgets: map[string]int64{"a.service": 2}}
	if p := good.Validate(); len(p) != 0 {
		t.Fatalf("a good spec: %v", p)
	}
	cases := []struct {
		name  string
		spec  Spec
		field string
		want  string
	}{
		{"unpinned", Spec{SSH: &SSH{Host: "h"}}, "ssh.host_key", "missing: the node h:22"},
		{"field-counted key", Spec{SSH: &SSH{Host: "h", HostKey: "ssh-ed25519 AAAA"}}, "ssh.host_key", "is not in authorized_keys format"},
		{"keepalive", Spec{SSH: &SSH{Host: "h", HostKey: testKey, Keepalive: "soon"}}, "ssh.keepalive", `keepalive = "soon" is not a non-negative Go duration`},
		{"jump unpinned", Spec{SSH: &SSH{Host: "h", HostKey: testKey, Jump: &Jump{Host: "j"}}}, "ssh.jump.host_key", "missing: the jump host j:22"},
		{"both transports", Spec{SSH: &SSH{Host: "h", HostKey: testKey}, Incus: &Incus{Instance: "c"}}, "incus", "not both"},
		{"no instance", Spec{Incus: &Incus{}}, "incus.instance", "missing"},
		{"zero timing", Spec{Timings: map[string]string{"lock_wait": "0s"}}, "timings.lock_wait", `"0s" is not a positive duration: lock_wait = "0s" is zero`},
		{"k8s timing on a node", Spec{Timings: map[string]string{"rollout_wait": "1m"}}, "timings.rollout_wait", "unknown timing; known: node_wait"},
		{"unit name", Spec{SecretChain: []string{"$(x)"}}, "secret_chain[0]", "is not a systemd unit name"},
		{"budget", Spec{LoopBudgets: map[string]int64{"a.service": -1}}, `loop_budgets["a.service"]`, "want a systemd unit name and a budget ≥ 0"},
		{"build", Spec{Build: &Build{Attribute: "x"}}, "build", "give exactly one of file and expression (or installable, `<file>#<attribute>`; or flake"},
		{"flake without attribute", Spec{Node: "web01", Build: &Build{Flake: "./fleet"}}, "build.flake", `".#nixosConfigurations.web01.config.system.build.toplevel"`},
		{"flake and file", Spec{Build: &Build{Flake: ".#a", File: "x.nix"}}, "build.flake", "remove build.installable, build.file"},
		{"flake args", Spec{Build: &Build{Flake: ".#a", Args: map[string]string{"k": "v"}}}, "build.args", "a flake takes no arguments"},
		{"toplevel", Spec{Toplevel: "/tmp/x"}, "toplevel", "is not a Nix store path"},
		{"snapshot over ssh", Spec{SSH: &SSH{Host: "h", HostKey: testKey}, Snapshot: &Snapshot{}}, "snapshot", "an SSH node has no native snapshots"},
		{"interrupted restore", Spec{Incus: &Incus{Instance: "c"}, Snapshot: &Snapshot{InterruptedRestore: "resume"}}, "snapshot.interrupted_restore", `"resume": want "finish"`},
		{"activation", Spec{Activation: "kexec"}, "activation", `"kexec" is not an activation; want one of "switch", "boot", "reboot-if-needed", "reboot"`},
		{"check", Spec{Checks: []Check{{Name: "c"}}}, "checks", `check "c": argv is empty`},
		{"probe pattern", Spec{Probes: []Probe{{Name: "p", TCP: "h:1", BodyRegexp: "("}}}, "checks", `probe "p": body_regexp = "("`},
	}
	for _, c := range cases {
		problems := c.spec.Validate()
		found := false
		for _, p := range problems {
			if p.Field == c.field && strings.Contains(p.Message, c.want) && p.Summary != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want a problem at %s saying %q, got %v", c.name, c.field, c.want, problems)
		}
	}
}

// A flake build: the reference is taken from the roster's directory when it is a
// relative path, and left alone otherwise; the attribute follows the '#'.
func TestNixBuildFlake(t *testing.T) {
	attr := "nixosConfigurations.web01.config.system.build.toplevel"
	for ref, want := range map[string]string{
		".":                  "/srv/fleet",
		"./nodes":            "/srv/fleet/nodes",
		"path:../shared":     "path:/srv/shared",
		"/abs/flake":         "/abs/flake",
		"git+file:///x/repo": "git+file:///x/repo",
	} {
		s := Spec{Node: "web01", Build: &Build{Flake: ref + "#" + attr}}
		if p := s.Validate(); len(p) != 0 {
			t.Fatalf("%s: %v", ref, p)
		}
		b := s.NixBuild("/srv/fleet")
		if b.Flake != want || b.Attr != attr || b.File != "" {
			t.Errorf("%s: got flake %q attribute %q, want %q %q", ref, b.Flake, b.Attr, want, attr)
		}
	}
}

// The one SSH config builder: defaults, keepalive (0s turns it off), sudo, the node's
// insecure switch not reaching the jump host, which inherits user and known_hosts.
func TestSSHConfig(t *testing.T) {
	creds := Credentials{PrivateKeyFile: "/k", AgentSocket: "/a"}
	c := Spec{SSH: &SSH{Host: "h", InsecureIgnoreHostKey: true}}.Target().SSHConfig(creds)
	if c.Port != 22 || c.User != "root" || c.Keepalive != DefaultKeepalive || !c.InsecureIgnoreHostKey || c.PrivateKeyFile != "/k" || c.AgentSocket != "/a" {
		t.Fatalf("defaults: %+v", c)
	}
	c = Spec{SSH: &SSH{Host: "h", User: "deploy", Sudo: true, Keepalive: "0s", InsecureIgnoreHostKey: true, KnownHostsFile: "/kh",
		Jump: &Jump{Host: "b", HostKey: testKey}}}.Target().SSHConfig(creds)
	if !c.Sudo || c.User != "deploy" || c.Keepalive >= 0 {
		t.Fatalf("sudo user, keepalive off: %+v", c)
	}
	if j := c.Jump; j == nil || j.User != "deploy" || j.KnownHostsFile != "/kh" || j.InsecureIgnoreHostKey || j.Sudo || j.PrivateKeyFile != "/k" {
		t.Fatalf("jump: %+v", c.Jump)
	}
}

// The body's options: node timings over the front end's over the table's defaults;
// the self-revert on for SSH unless turned off, never for Incus.
func TestOptions(t *testing.T) {
	no := false
	s := Spec{Node: "n", SSH: &SSH{Host: "h", RevertOnLockout: &no}, Strict: &no, Timings: map[string]string{"lock_wait": "5m"}}
	o := s.Options(deploybody.Timings{LockWait: time.Minute, Settle: 3 * time.Second})
	if o.Timings.LockWait != 5*time.Minute || o.Timings.Settle != 3*time.Second || o.Timings.Watch != deploybody.DefaultWatch {
		t.Fatalf("timings: %+v", o.Timings)
	}
	if o.SelfRevert || o.Strict {
		t.Fatalf("revert_on_lockout = false and strict = false: %+v", o)
	}
	if o := (Spec{SSH: &SSH{Host: "h"}}).Options(deploybody.Timings{}); !o.SelfRevert || !o.Strict {
		t.Fatalf("defaults: self-revert and strict on: %+v", o)
	}
	if o := (Spec{Incus: &Incus{Instance: "c"}}).Options(deploybody.Timings{}); o.SelfRevert {
		t.Fatal("an Incus node has no self-revert")
	}
}

func TestSnapshotKeep(t *testing.T) {
	no := false
	for _, c := range []struct {
		s    *Snapshot
		want int
	}{{nil, 0}, {&Snapshot{}, DefaultSnapshotKeep}, {&Snapshot{Keep: 5}, 5}, {&Snapshot{Enabled: &no, Keep: 5}, 0}} {
		if got := (Spec{Incus: &Incus{Instance: "c"}, Snapshot: c.s}).SnapshotKeep(); got != c.want {
			t.Errorf("%+v: keep %d, want %d", c.s, got, c.want)
		}
	}
}
