package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/records"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// The `ssh` method end to end: the real binary deploys three real lab nodes (sshd,
// systemd, nix) in parallel from a submission, with a strict failed unit on one.
func TestLabCLIDeployGroup(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	// The command's own evaluation cache, and its nix-instantiate runs counted.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	evaluations := labtest.CountNixInstantiate(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	failedTop := labtest.BuildClosure(t, labtest.ClosureFailedUnit)
	nodes := []labtest.Node{
		labtest.NewInstance(t, "cli-a"), labtest.NewInstance(t, "cli-b"), labtest.NewInstance(t, "cli-c"),
	}
	dir := t.TempDir()
	closures := closuresCopy(t) // evaluated through the cache: see closuresCopy
	roster := map[string]any{
		"build":   map[string]any{"file": closures, "attribute": labtest.ClosureGood},
		"timings": map[string]string{"settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"checks":  []map[string]any{{"name": "web-active", "argv": []string{"systemctl", "is-active", "fedi-web.service"}, "timeout": "10s"}},
		"nodes":   map[string]any{},
	}
	rn := roster["nodes"].(map[string]any)
	for _, n := range nodes {
		rn[n.Name] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey}
	}
	broken := nodes[2].Name
	rn[broken].(map[string]any)["build"] = map[string]any{"file": closures, "attribute": labtest.ClosureFailedUnit}
	// A node the submission leaves without an application: it must not be touched
	// (its address answers nothing, so any attempt would fail the run).
	rn["idle"] = map[string]any{"host": "127.0.0.1", "port": 9, "host_key": nodes[0].HostKey}
	rosterFile := writeFileJSON(t, dir, "roster.json", roster)

	baked := map[string]any{
		"nodes": map[string]any{
			nodes[0].Name: map[string]any{"applications": []string{"mastodon"}},
			nodes[1].Name: map[string]any{"applications": []string{"pixelfed"}},
			nodes[2].Name: map[string]any{"applications": []string{"peertube"}},
			"idle":        map[string]any{"applications": []string{"lemmy"}},
		},
		"applications": map[string]any{
			"mastodon": map[string]any{"enable": false}, "pixelfed": map[string]any{"enable": false},
			"peertube": map[string]any{"enable": false}, "lemmy": map[string]any{"enable": false},
		},
	}
	sub := map[string]any{"ssh": map[string]any{"applications": map[string]any{
		"mastodon": map[string]any{"enable": true}, "pixelfed": map[string]any{"enable": true},
		"peertube": map[string]any{"enable": true},
	}}}
	bakedFile := writeFileJSON(t, dir, "baked.json", baked)
	subFile := writeFileJSON(t, dir, "submission.json", sub)
	args := []string{"--roster", rosterFile, "--submission", subFile, "--baked", bakedFile, "--parallel", "3"}

	t.Run("strict failed unit on one node: exit 1, the others deployed", func(t *testing.T) {
		stdout, stderr, code := runCLI(t, bin, append([]string{"deploy", "--json"}, args...)...)
		if code != exitFailed {
			t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailed, stdout, stderr)
		}
		for _, key := range []string{`"failed_units"`, `"system_state"`, `"paths_copied"`, `"phases"`} {
			if !strings.Contains(stdout, key) {
				t.Errorf("--json output lacks %s", key)
			}
		}
		var out jsonSummary
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("--json output is not JSON: %v\n%s", err, stdout)
		}
		if strings.Join(out.OK, ",") != nodes[0].Name+","+nodes[1].Name || strings.Join(out.Failed, ",") != broken ||
			strings.Join(out.Disabled, ",") != "idle" {
			t.Fatalf("ok=%v failed=%v disabled=%v", out.OK, out.Failed, out.Disabled)
		}
		for _, n := range out.Nodes {
			switch n.Node {
			case nodes[0].Name, nodes[1].Name:
				if n.Toplevel != good || n.Generation < 1 {
					t.Errorf("%s: toplevel %q generation %d, want %s", n.Node, n.Toplevel, n.Generation, good)
				}
				if running := readlink(t, n.Node, "/run/current-system"); running != good {
					t.Errorf("%s runs %s, want %s", n.Node, running, good)
				}
				if len(n.Checks) != 1 || n.Checks[0].Name != "web-active" || !n.Checks[0].OK {
					t.Errorf("%s: checks %+v, want web-active passed", n.Node, n.Checks)
				}
				if n.Changes == nil || n.Changes.PathsCopied == 0 {
					t.Errorf("%s: changes %+v, want the paths a first deploy copies", n.Node, n.Changes)
				}
			case broken:
				if n.Verdict == nil || !strings.Contains(strings.Join(n.Verdict.Reasons, " "), "fedi-broken.service") {
					t.Errorf("%s: verdict reasons do not name fedi-broken.service: %+v", n.Node, n.Verdict)
				}
			}
		}
		for _, want := range []string{nodes[0].Name + ": ", "switch", "done: ok", broken + ": ", "done: FAILED"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("progress on a pipe lacks %q:\n%s", want, stderr)
			}
		}
		if key := labtest.KeyFile(); strings.Contains(stdout+stderr, key) {
			t.Errorf("the output names the key file %s", key)
		}
		if n := evaluations(); n != 3 {
			t.Errorf("a cold cache ran nix-instantiate %d times for 3 nodes, want 3", n)
		}
	})

	t.Run("table, lenient: exit 0", func(t *testing.T) {
		before := evaluations()
		stdout, stderr, code := runCLI(t, bin, append([]string{"deploy", "--lenient"}, args...)...)
		if code != exitOK {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if n := evaluations() - before; n != 0 {
			t.Errorf("a second run with nothing changed ran nix-instantiate %d times, want 0 (the evaluation cache)", n)
		}
		for _, want := range []string{"NODE", "RESULT", nodes[0].Name + ": 0 paths copied", "ok (warnings)", "fedi-broken.service", "idle", "disabled", "3 ok, 0 failed, 1 disabled"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("table lacks %q:\n%s", want, stdout)
			}
		}
	})

	t.Run("verdict pass", func(t *testing.T) {
		stdout, stderr, code := runCLI(t, bin, "verdict", "--roster", rosterFile, "--submission", subFile, "--baked", bakedFile, "--lenient")
		if code != exitOK || !strings.Contains(stdout, nodes[0].Name) {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})

	// The user asks to judge one system while the node runs another: a lenient pass
	// judges what runs, and the command must say so, in the table and in --json.
	t.Run("lenient verdict of another system than asked: ok, and the warning shown", func(t *testing.T) {
		other := map[string]any{"timings": roster["timings"], "nodes": map[string]any{nodes[0].Name: map[string]any{
			"host": nodes[0].SSHHost, "port": nodes[0].SSHPort, "host_key": nodes[0].HostKey, "toplevel": failedTop}}}
		otherFile := writeFileJSON(t, dir, "other-roster.json", other)
		stdout, stderr, code := runCLI(t, bin, "verdict", "--roster", otherFile, "--lenient")
		want := nodes[0].Name + ": warning: node " + nodes[0].Name + " runs "
		if code != exitOK || !strings.Contains(stdout, want) || !strings.Contains(stdout, "not the toplevel "+failedTop) ||
			!strings.Contains(stdout, "ok (warnings)") {
			t.Fatalf("exit %d, want 0 with the table saying %q … not the toplevel %s\nstdout:\n%s\nstderr:\n%s", code, want, failedTop, stdout, stderr)
		}
		stdout, _, _ = runCLI(t, bin, "verdict", "--roster", otherFile, "--lenient", "--json")
		var out jsonSummary
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Nodes) != 1 ||
			!strings.Contains(strings.Join(out.Nodes[0].Warnings, "\n"), "not the toplevel "+failedTop) {
			t.Fatalf("--json warnings do not say which system was judged (%v):\n%s", err, stdout)
		}
	})

	t.Run("bad roster: exit 2 naming the node and field, nothing done", func(t *testing.T) {
		bad := map[string]any{"nodes": map[string]any{nodes[0].Name: map[string]any{"host": nodes[0].SSHHost, "port": nodes[0].SSHPort}}}
		badFile := writeFileJSON(t, dir, "bad-roster.json", bad)
		before := readlink(t, nodes[0].Name, "/nix/var/nix/profiles/system")
		_, stderr, code := runCLI(t, bin, "deploy", "--roster", badFile)
		if code != exitBadInput || !strings.Contains(stderr, `node "`+nodes[0].Name+`": host_key`) {
			t.Fatalf("exit %d, want 2 naming host_key of %s:\n%s", code, nodes[0].Name, stderr)
		}
		if after := readlink(t, nodes[0].Name, "/nix/var/nix/profiles/system"); after != before {
			t.Errorf("profile changed %s -> %s on bad input", before, after)
		}
	})
}

func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fediversity")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func runCLI(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SSH_PRIVATE_KEY_FILE="+labtest.KeyFile(), "SSH_AUTH_SOCK=")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	return o.String(), e.String(), 0
}

func writeFileJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func readlink(t *testing.T, instance, p string) string {
	t.Helper()
	return strings.TrimSpace(labtest.Incus(t, "exec", instance, "--", "readlink", "-f", p))
}

// A second Ctrl-C ends the command at once, whatever the runs are waiting for, and
// says what each unfinished run may have left on its node. The real binary deploys
// the slow-switch closure (its activation takes 15 s) to a throwaway lab node through
// a loopback proxy; once the switch runs on the node the proxy stops passing bytes
// (the node goes silent, as behind a dropped network), so the run's wind-down after
// the first SIGINT waits on the node (its lock release alone is bounded by 20 s). The
// second SIGINT, 1 s later, must end it within seconds, exit 130, name the switch phase
// and what may be left; and what it says is left is there: the node lock is still held.
func TestLabCLISecondInterruptQuitsAtOnce(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	slow := labtest.BuildClosure(t, labtest.ClosureSlowSwitch)
	node := labtest.NewInstance(t, "cli-sigint")
	proxy := newFreezingProxy(t, fmt.Sprintf("%s:%d", node.SSHHost, node.SSHPort))
	dir := t.TempDir()
	roster := writeFileJSON(t, dir, "roster.json", map[string]any{
		"timings": map[string]string{"settle": "1s", "watch": "2s", "sample_interval": "1s"},
		"nodes": map[string]any{node.Name: map[string]any{
			"host": "127.0.0.1", "port": proxy.port(), "host_key": node.HostKey, "toplevel": slow,
		}},
	})
	cmd := exec.Command(bin, "deploy", "--roster", roster)
	cmd.Env = append(os.Environ(), "SSH_PRIVATE_KEY_FILE="+labtest.KeyFile(), "SSH_AUTH_SOCK=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	lines := make(chan string, 100)
	var all strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(what string, limit time.Duration, match func(string) bool) {
		t.Helper()
		deadline := time.After(limit)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the command ended before %s:\n%s", what, all.String())
				}
				all.WriteString(l + "\n")
				if match(l) {
					return
				}
			case <-deadline:
				t.Fatalf("no %s within %s:\n%s", what, limit, all.String())
			}
		}
	}
	waitLine("switch phase", 3*time.Minute, func(l string) bool { return strings.HasSuffix(l, " switch") })
	labtest.WaitSwitchRunning(t, node)
	proxy.freeze()

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitLine("word of the first interrupt", 10*time.Second, func(l string) bool { return strings.Contains(l, "Interrupt again to quit at once") })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the command ended 1 s after the first interrupt (%v): the wind-down this test needs did not happen:\n%s", err, all.String())
	case <-time.After(time.Second):
	}
	second := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("the second interrupt did not end the command within 5 s:\n%s", all.String())
	}
	took := time.Since(second)
	for l := range lines {
		all.WriteString(l + "\n")
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit %v, want %d:\n%s", waitErr, exitInterrupted, all.String())
	}
	for _, want := range []string{node.Name + " (in switch): ", "a switch may be running", "a revert may be armed", "the node lock may be held"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, all.String())
		}
	}
	t.Logf("second SIGINT ended the command in %s:\n%s", took.Round(time.Millisecond), all.String())
	// What it said may be left is there.
	if _, err := labtest.IncusErr("exec", node.Instance, "--", "test", "-e", records.LockFile); err != nil {
		t.Errorf("the node lock is not on the node after the quit: %v", err)
	}
}

// freezingProxy forwards TCP connections on 127.0.0.1 to a target until freeze: from
// then on it passes no byte either way and holds new connections unanswered, as a
// network that dropped the node would. Test cleanup closes everything.
type freezingProxy struct {
	l      net.Listener
	target string
	frozen chan struct{}
	once   sync.Once
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezingProxy(t *testing.T, target string) *freezingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{l: l, target: target, frozen: make(chan struct{})}
	t.Cleanup(p.close)
	go p.accept()
	return p
}

func (p *freezingProxy) port() int { return p.l.Addr().(*net.TCPAddr).Port }

func (p *freezingProxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

func (p *freezingProxy) isFrozen() bool {
	select {
	case <-p.frozen:
		return true
	default:
		return false
	}
}

func (p *freezingProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *freezingProxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *freezingProxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.track(in)
		if p.isFrozen() {
			continue // held: never answered
		}
		out, err := net.DialTimeout("tcp", p.target, 10*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.track(out)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst until src ends, or forever once frozen (the bytes read after
// the freeze are never written).
func (p *freezingProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.isFrozen() {
			return // drop what came in: the connection stays open and silent
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
