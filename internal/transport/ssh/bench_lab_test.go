package ssh

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// TestBenchSSHTransport compares, on a fresh lab node and equal closures, this
// transport's copy + switch + systemctl show with the hand-run way (nix copy over
// ssh://, ssh systemd-run --wait switch-to-configuration, ssh systemctl show). It prints
// figures and asserts nothing about speed (the machine is shared). Run it with
// lab/bench-ssh.sh (FEDIVERSITY_LAB=1 FEDIVERSITY_BENCH=1).
func TestBenchSSHTransport(t *testing.T) {
	labtest.Require(t)
	if os.Getenv("FEDIVERSITY_BENCH") != "1" {
		t.Skip("benchmark: set FEDIVERSITY_BENCH=1 (lab/bench-ssh.sh does)")
	}
	payloadKiB := os.Getenv("BENCH_PAYLOAD_KIB")
	if payloadKiB == "" {
		payloadKiB = "16384"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	stamp := fmt.Sprint(time.Now().UnixNano())
	build := func(seed string) string {
		p, err := nixstore.Build(ctx, nixstore.BuildSpec{
			File:   filepath.Join(labtest.RepoRoot(t), "lab", "closures", "default.nix"),
			Attr:   "good",
			ArgStr: map[string]string{"seed": seed, "payloadKiB": payloadKiB},
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ours, hand := build("bench-ours-"+stamp), build("bench-hand-"+stamp)
	n := labtest.NewInstance(t, "ssh-bench")
	proxy := newCountingProxy(t, fmt.Sprintf("%s:%d", n.SSHHost, n.SSHPort))
	units := []string{"fedi-web.service", "fedi-setup.service"}
	showArgv := append([]string{"systemctl", "show", "-p", "ActiveState,SubState,Result,NRestarts,ExecMainStatus,InvocationID"}, units...)

	type row struct {
		phase     string
		dur       time.Duration
		wireBytes int64
		note      string
	}
	var rows []row
	measure := func(phase string, f func() string) {
		t.Helper()
		proxy.reset()
		start := time.Now()
		note := f()
		rows = append(rows, row{phase, time.Since(start), proxy.total(), note})
	}

	// Ours: one connection for everything, through the counting proxy.
	cfg := labConfig(n)
	cfg.Port = proxy.port()
	tr, err := New(n.Name, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The first copy's stream bytes: both closures are the same size (the same payload,
	// another seed), so the hand-run copy moves as many, and both throughputs use them.
	var firstExportBytes int64
	apply := func(label string) {
		var st deploybody.CopyStats
		measure(label+" copy", func() string {
			var err error
			if st, err = tr.CopyClosure(ctx, ours); err != nil {
				t.Fatal(err)
			}
			if firstExportBytes == 0 {
				firstExportBytes = st.BytesSent
			}
			return fmt.Sprintf("%d/%d paths, %d stream bytes", st.PathsMissing, st.PathsTotal, st.BytesSent)
		})
		measure(label+" switch", func() string {
			res, err := tr.Switch(ctx, ours, "switch", 5*time.Minute)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("switch: %+v %v", res, err)
			}
			return "exit 0"
		})
		measure(label+" show", func() string {
			res, err := tr.Run(ctx, showArgv, deploybody.RunOptions{})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("show: %v", err)
			}
			return fmt.Sprintf("%d bytes of properties", len(res.Stdout))
		})
	}
	apply("ours first")
	apply("ours re-apply")
	mustClose(t, tr)
	var self syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)

	// Hand-run: each step its own ssh process, as an operator's script would.
	sshOpts := []string{"-i", labtest.KeyFile(), "-o", "UserKnownHostsFile=" + labtest.KnownHostsFile(),
		"-o", fmt.Sprintf("HostKeyAlias=[%s]:%d", n.SSHHost, n.SSHPort), "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes", "-p", fmt.Sprint(proxy.port())}
	// The throwaway node's key is not in the lab known_hosts: add it for this run only.
	kh := filepath.Join(t.TempDir(), "known_hosts")
	_ = os.WriteFile(kh, []byte(fmt.Sprintf("[%s]:%d %s\n", n.SSHHost, n.SSHPort, n.HostKey)), 0o600)
	sshOpts[3] = "UserKnownHostsFile=" + kh
	runCmd := func(name string, args []string, env ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ssh := func(remote ...string) string {
		return runCmd("ssh", append(append(append([]string{}, sshOpts...), "root@127.0.0.1", "--"), remote...))
	}
	handApply := func(label string) {
		measure(label+" copy", func() string {
			runCmd("nix", []string{"copy", "--extra-experimental-features", "nix-command", "--to", "ssh://root@127.0.0.1", hand},
				"NIX_SSHOPTS="+strings.Join(sshOpts, " "))
			return "nix copy"
		})
		measure(label+" switch", func() string {
			ssh("systemd-run", "--collect", "--pipe", "--quiet", "--wait", "--service-type=exec",
				"--unit=bench-switch-"+fmt.Sprint(time.Now().UnixNano()), hand+"/bin/switch-to-configuration", "switch")
			return "exit 0"
		})
		measure(label+" show", func() string {
			return fmt.Sprintf("%d bytes of properties", len(ssh(showArgv...)))
		})
	}
	handApply("hand first")
	handApply("hand re-apply")
	var children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)

	var b strings.Builder
	fmt.Fprintf(&b, "\nSSH transport benchmark, node %s, closure = toplevel + tools + %s KiB payload\n", n.Name, payloadKiB)
	fmt.Fprintf(&b, "%-22s %10s %12s  %s\n", "phase", "seconds", "wire bytes", "")
	sums := map[string]time.Duration{}
	for _, r := range rows {
		fmt.Fprintf(&b, "%-22s %10.3f %12d  %s\n", r.phase, r.dur.Seconds(), r.wireBytes, r.note)
		sums[strings.Join(strings.Fields(r.phase)[:2], " ")] += r.dur
	}
	for _, k := range []string{"ours first", "hand first", "ours re-apply", "hand re-apply"} {
		fmt.Fprintf(&b, "total %-16s %10.3f\n", k, sums[k].Seconds())
	}
	copyOf := func(phase string) time.Duration {
		for _, r := range rows {
			if r.phase == phase {
				return r.dur
			}
		}
		return 0
	}
	oursMBs := float64(firstExportBytes) / 1e6 / copyOf("ours first copy").Seconds()
	handMBs := float64(firstExportBytes) / 1e6 / copyOf("hand first copy").Seconds()
	fmt.Fprintf(&b, "first copy throughput (%d stream bytes, MB = 10^6 B): ours %.1f MB/s, nix copy --to ssh:// %.1f MB/s, ours / nix copy %.2f\n",
		firstExportBytes, oursMBs, handMBs, oursMBs/handMBs)
	fmt.Fprintf(&b, "peak RSS: this process (transport + test harness) %d KiB; largest hand-run child (nix/ssh) %d KiB\n",
		self.Maxrss, children.Maxrss)
	t.Log(b.String())
}

// countingProxy forwards loopback TCP to the node's SSH port and counts bytes both ways.
type countingProxy struct {
	l net.Listener
	n atomic.Int64
}

func newCountingProxy(t *testing.T, target string) *countingProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{l: l}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		closeQuietly(l)
		mu.Lock()
		for _, c := range open {
			closeQuietly(c)
		}
		mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				closeQuietly(c)
				continue
			}
			mu.Lock()
			open = append(open, c, u)
			mu.Unlock()
			wg.Add(2)
			cp := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(countTo{dst, &p.n}, src)
				closeQuietly(dst)
				closeQuietly(src)
			}
			go cp(u, c)
			go cp(c, u)
		}
	}()
	return p
}

func (p *countingProxy) port() int    { return p.l.Addr().(*net.TCPAddr).Port }
func (p *countingProxy) reset()       { p.n.Store(0) }
func (p *countingProxy) total() int64 { return p.n.Load() }

// countTo counts bytes as they pass, so a phase on a long-lived connection is measured.
type countTo struct {
	w net.Conn
	n *atomic.Int64
}

func (c countTo) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}
