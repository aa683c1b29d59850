// Package labtest gives tests access to the lab that `bash lab/lab.sh up` makes: real
// incusd, real systemd, real sshd and real nix in Incus containers, reached only through
// the Incus API and loopback proxy devices. It is imported by _test.go files only.
//
// Lab tests run when FEDIVERSITY_LAB=1 and are skipped, with the reason, otherwise.
package labtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The lab's stand-in systems (lab/closures, the tests' own) are built by /bin/sh, which
// a build sandbox lacks. The product never changes the deployer's nix settings, so the
// lab sets it off for every test that uses the lab, as lab/test.sh does for the
// commands it runs, unless NIX_CONFIG already says otherwise. The provider plugins and
// the fediversity commands the tests start inherit it.
func init() {
	cfg := os.Getenv("NIX_CONFIG")
	for _, line := range strings.Split(cfg, "\n") {
		if name, _, ok := strings.Cut(line, "="); ok && strings.TrimSpace(name) == "sandbox" {
			return
		}
	}
	_ = os.Setenv("NIX_CONFIG", strings.TrimPrefix(cfg+"\nsandbox = false", "\n"))
}

// StateDir is where lab.sh writes the lab key, known_hosts and nodes.json.
func StateDir() string {
	if d := os.Getenv("LAB_STATE"); d != "" {
		return d
	}
	return "/var/lib/fediversity-lab"
}

// Node is one lab node as lab.sh describes it in nodes.json.
type Node struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	Project  string `json:"project"`
	SSHHost  string `json:"ssh_host"`
	SSHPort  int    `json:"ssh_port"`
	HostKey  string `json:"host_key"` // authorized_keys format: "ssh-ed25519 AAAA…"
}

// Enabled reports whether lab tests should run.
func Enabled() bool { return os.Getenv("FEDIVERSITY_LAB") == "1" }

// Require skips t unless FEDIVERSITY_LAB=1, and fails it when the lab is asked for but
// is not up (a silent skip would hide a broken lab in CI).
func Require(t testing.TB) {
	t.Helper()
	if !Enabled() {
		t.Skip("lab test: set FEDIVERSITY_LAB=1 after `bash lab/lab.sh up` to run it")
	}
	if _, err := os.Stat(filepath.Join(StateDir(), "nodes.json")); err != nil {
		t.Fatalf("FEDIVERSITY_LAB=1 but the lab is not up (%v): run `bash lab/lab.sh up`", err)
	}
}

// Nodes returns the lab's long-lived nodes (fedi-n1 …).
func Nodes(t testing.TB) []Node {
	t.Helper()
	Require(t)
	b, err := os.ReadFile(filepath.Join(StateDir(), "nodes.json"))
	if err != nil {
		t.Fatalf("read lab nodes: %v", err)
	}
	var nodes []Node
	if err := json.Unmarshal(b, &nodes); err != nil {
		t.Fatalf("parse lab nodes.json: %v", err)
	}
	if len(nodes) == 0 {
		t.Fatal("lab nodes.json lists no nodes: run `bash lab/lab.sh up`")
	}
	return nodes
}

// KeyFile is the private key authorised on every lab node.
func KeyFile() string { return filepath.Join(StateDir(), "id_ed25519") }

// KnownHostsFile pins the host keys of the lab nodes.
func KnownHostsFile() string { return filepath.Join(StateDir(), "known_hosts") }

// Incus runs the incus CLI (test setup only; the product talks to the REST API).
func Incus(t testing.TB, args ...string) string {
	t.Helper()
	out, err := IncusErr(args...)
	if err != nil {
		t.Fatalf("incus %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// IncusErr runs the incus CLI and returns its combined output.
// `exec INSTANCE [--project P] -- ARGV…` is run through the daemon's API with its output
// recorded (see recordedExec for why).
func IncusErr(args ...string) (string, error) {
	if out, handled, err := recordedExec(args); handled {
		return out, err
	}
	for try := 1; ; try++ {
		cmd := exec.Command("incus", args...)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err := cmd.Run()
		// A file push goes through the instance's SFTP server, which incusd starts on
		// demand (forkfile); under load a CI run's push failed to reach it ("Failed
		// getting instance SFTP connection: dial unix …/forkfile.sock: connect: no such
		// file or directory"). A lab fault, not a test's subject, and a push overwrites:
		// tried again, at most three times a second apart.
		if err == nil || try == 3 || len(args) < 2 || args[0] != "file" || args[1] != "push" ||
			!strings.Contains(buf.String(), "SFTP connection") {
			return buf.String(), err
		}
		time.Sleep(time.Second)
	}
}

var instanceMu sync.Mutex

// Prefix is the lab's name prefix (LAB_PREFIX, default "fedi"), shared with lab.sh.
func Prefix() string {
	if p := os.Getenv("LAB_PREFIX"); p != "" {
		return p
	}
	return "fedi"
}

// Image is the lab image every lab container starts from: the alias lab/lab.sh imported
// (lab/debian-v<version>-<hash>; lab.sh writes it to <LAB_STATE>/image). Its image is a
// Debian system shaped like NixOS, with the first stand-in system in its store.
var Image = imageAlias()

// imageAlias reads the alias of the lab's image. Without a lab it names none that
// exists, so a test that launches from it fails at the launch, saying so.
func imageAlias() string {
	b, err := os.ReadFile(filepath.Join(StateDir(), "image"))
	if alias := strings.TrimSpace(string(b)); err == nil && alias != "" {
		return alias
	}
	return "lab/debian-unknown-run-lab.sh-up"
}

// NewInstance launches a throwaway lab container named <prefix>-t-<name> from the lab image,
// with the lab key authorised, fresh host keys and an SSH proxy on a free loopback port.
// It is deleted when the test ends. Use it for tests that damage a node (stop it, sever
// its bus, restore snapshots) so the shared nodes stay clean.
func NewInstance(t testing.TB, name string) Node {
	t.Helper()
	return newInstance(t, name)
}

// NewInstanceOn is NewInstance with the root disk on storage pool pool, of rootSize
// (an Incus size such as "3GiB"; a size also makes a btrfs pool count each volume's
// and snapshot's usage, which it otherwise does not tell).
func NewInstanceOn(t testing.TB, name, pool, rootSize string) Node {
	t.Helper()
	return newInstance(t, name, "--storage", pool, "--device", "root,size="+rootSize)
}

func newInstance(t testing.TB, name string, launchArgs ...string) Node {
	t.Helper()
	Require(t)
	instanceMu.Lock()
	defer instanceMu.Unlock()
	inst := Prefix() + "-t-" + name
	_, _ = IncusErr("delete", "--force", inst)
	t.Cleanup(func() { _, _ = IncusErr("delete", "--force", inst) })
	if out, err := IncusErr(append([]string{"launch", Image, inst}, launchArgs...)...); err != nil {
		// Under load the daemon's pre-start hook can fail its call back to the daemon
		// (a CI run: "Failed to run: …incusd forkstart…: exit status 1", and in lxc.log
		// "Failed to run lxc.hook.pre-start"). The container exists, stopped: a lab
		// fault, not the test's subject, so it is started once more.
		if !strings.Contains(out, "forkstart") {
			t.Fatalf("incus launch %s %s: %v\n%s", Image, inst, err, out)
		}
		t.Logf("%s did not start at launch (%v); starting it once more", inst, strings.TrimSpace(out))
		Incus(t, "start", inst)
	}
	port := freePort(t)
	Incus(t, "config", "device", "add", inst, "ssh", "proxy",
		fmt.Sprintf("listen=tcp:127.0.0.1:%d", port), "connect=tcp:127.0.0.1:22", "bind=host")
	waitSystemd(t, inst)
	Incus(t, "file", "push", "--mode", "0600", KeyFile()+".pub", inst+"/root/.ssh/authorized_keys")
	// The image's first boot makes the host keys; under load that may still be under way
	// (CI once read an empty key): make any that are missing, then read the public key
	// until it is whole (bounded: 20 tries a second apart).
	// lab/host-key-whole.sh says why a key may be missing its .pub.
	whole, err := os.ReadFile(filepath.Join(RepoRoot(t), "lab", "host-key-whole.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var key []string
	for i := 0; i < 20 && len(key) < 2; i++ {
		if i > 0 {
			time.Sleep(time.Second)
		}
		out, _ := IncusErr("exec", inst, "--", "/bin/sh", "-c", string(whole)+"\ncat /etc/ssh/ssh_host_ed25519_key.pub")
		key = strings.Fields(out)
	}
	if len(key) < 2 {
		t.Fatalf("%s: no ed25519 host key after 20 tries", inst)
	}
	Incus(t, "exec", inst, "--", "/usr/bin/systemctl", "restart", "ssh")
	return Node{Name: inst, Instance: inst, Project: "default", SSHHost: "127.0.0.1", SSHPort: port, HostKey: key[0] + " " + key[1]}
}

// waitSystemd waits until the instance's systemd says running. A fresh instance that
// boots degraded has a failed unit every verdict on it would name (a lab fault, such as
// the kernel key quota lab/lab.sh raises): it is booted once more, and a second degraded
// boot fails the test with the failed units' names.
func waitSystemd(t testing.TB, inst string) {
	t.Helper()
	for boot := 1; ; boot++ {
		state := systemState(inst)
		if state == "running" {
			return
		}
		if state != "degraded" {
			t.Fatalf("%s: systemd says %q after 60 s", inst, state)
		}
		failed, _ := IncusErr("exec", inst, "--", "/usr/bin/systemctl", "--failed", "--no-legend", "--plain")
		if boot == 2 {
			t.Fatalf("%s booted degraded twice; failed units:\n%s(a unit that failed 'at step KEYRING' means the kernel key quota is too small: see raise_limits in lab/lab.sh)", inst, failed)
		}
		t.Logf("%s booted degraded (failed: %s): restarting it once", inst, strings.Join(strings.Fields(failed), " "))
		Incus(t, "restart", "--force", inst)
	}
}

// systemState is what `systemctl is-system-running` says once it is past starting
// (bounded: 60 s).
func systemState(inst string) string {
	var last string
	for i := 0; i < 60; i++ {
		out, _ := IncusErr("exec", inst, "--", "/usr/bin/systemctl", "is-system-running")
		last = strings.TrimSpace(out)
		if last == "running" || last == "degraded" {
			return last
		}
		time.Sleep(time.Second)
	}
	return last
}

// FreePort is a loopback TCP port free at the time of the call (for a proxy device).
func FreePort(t testing.TB) int { return freePort(t) }

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatalf("free port: %v", err)
	}
	return port
}

// RepoRoot finds the repository root (the directory with go.mod) from the test's
// working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("labtest: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// WaitSwitchRunning waits (bounded: 600 polls of 0.2 s) until a detached switch runs
// on the instance: systemd lists an active fediversity-switch-* unit. The polls run on
// the node, in one exec: an exec per poll (incusd forks a helper that enters the
// container for each, and the test waits for it and reads its output in calls of their
// own) cost the machine more than the systemctl it ran, five times a second for as long
// as an apply takes to reach its switch. What is polled and how often are what they
// were, so the caller still acts only once the switch runs, and no later. An exec that
// fails (incusd under load) is run again until the bound is spent.
func WaitSwitchRunning(t testing.TB, node Node) {
	t.Helper()
	const polls = 600
	left := polls
	for left > 0 {
		script := fmt.Sprintf(`i=0
while [ "$i" -lt %d ]; do
	out=$(/usr/bin/systemctl list-units --no-legend --plain --state=active 'fediversity-switch-*')
	case $out in *fediversity-switch-*) echo "$out"; exit 0 ;; esac
	i=$((i + 1))
	sleep 0.2
done
exit 1`, left)
		start := time.Now()
		out, err := IncusErr("exec", node.Instance, "--", "/bin/sh", "-c", script)
		if err == nil && strings.Contains(out, "fediversity-switch-") {
			return
		}
		// The polls this exec may have run: its time over the period, at least one.
		left -= max(1, int(time.Since(start)/(200*time.Millisecond)))
		if err != nil && left > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Fatalf("no switch ever ran on %s", node.Instance)
}

// NewInstanceWithDataVolume is NewInstance with a custom storage volume of its own on
// the lab pool, attached at /var/lib/fediversity (where modules/tf-incus mounts a
// node's data); it returns the node and the volume's name. The volume is deleted after
// the instance (cleanups run last first): Incus refuses to delete a volume an instance
// still uses.
func NewInstanceWithDataVolume(t testing.TB, name string) (Node, string) {
	t.Helper()
	Require(t)
	vol := Prefix() + "-t-" + name + "-data"
	// A run killed before its cleanups (a CI job cut off, a developer's Ctrl-C) leaves
	// the instance and its volume behind, the volume still attached: Incus refuses to
	// delete a volume an instance uses, so the instance goes first.
	_, _ = IncusErr("delete", "--force", Prefix()+"-t-"+name)
	if out, err := IncusErr("storage", "volume", "delete", "lab", vol); err != nil && !strings.Contains(out, "not found") {
		t.Fatalf("deleting the volume %s left by an earlier run: %v\n%s", vol, err, out)
	}
	// No size: a size would turn on btrfs quotas for the whole shared lab pool.
	Incus(t, "storage", "volume", "create", "lab", vol)
	t.Cleanup(func() { _, _ = IncusErr("storage", "volume", "delete", "lab", vol) })
	node := NewInstance(t, name)
	Incus(t, "config", "device", "add", node.Instance, "data", "disk", "pool=lab", "source="+vol, "path=/var/lib/fediversity")
	return node, vol
}
