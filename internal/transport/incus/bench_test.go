package incus

// BenchmarkLabCopySwitchShow times copy + switch + `systemctl show` of one fresh closure
// to one node through this transport, against the hand-run equivalent with the incus CLI
// (`nix-store --export … | incus exec … nix-store --import`, `incus exec … systemd-run
// … switch-to-configuration switch`, `incus exec … systemctl show`), the copies'
// throughput in MB/s (10^6 bytes of the export a second), and reports the bytes an unchanged re-copy sends and peak RSS. Run with
//
//	FEDIVERSITY_LAB=1 go test ./internal/transport/incus -run '^$' -bench LabCopySwitchShow -benchtime 3x
//
// FEDI_BENCH_PAYLOAD_KIB sets the payload size of the closure (default 65536 = 64 MiB).

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

var showProps = []string{"show", "-p", "ActiveState,SubState,Result,NRestarts,ExecMainCode,ExecMainStatus,ExecMainStartTimestampMonotonic,ConditionResult,InvocationID,FragmentPath", "fedi-web.service", "fedi-setup.service"}

func buildBenchClosure(b *testing.B, seed, kib string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p, err := nixstore.Build(ctx, nixstore.BuildSpec{
		File:   filepath.Join(labtest.RepoRoot(b), "lab", "closures", "default.nix"),
		Attr:   labtest.ClosureGood,
		ArgStr: map[string]string{"seed": seed, "payloadKiB": kib},
	})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// vmHWM is this process's peak resident set (kB).
func vmHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

// handRun runs a command like an operator would and returns its peak RSS (kB).
func handRun(b *testing.B, name string, args ...string) int64 {
	b.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}

func BenchmarkLabCopySwitchShow(b *testing.B) {
	labtest.Require(b)
	kib := os.Getenv("FEDI_BENCH_PAYLOAD_KIB")
	if kib == "" {
		kib = "65536"
	}
	node := labtest.NewInstance(b, "incus-bench")
	c, err := New(Config{Client: mustClient(b), Instance: node.Instance, Project: node.Project, Node: node.Name, Log: benchLog(b)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var ours, hand [3]time.Duration // copy, switch, show
	var recopyBytes, sentBytes int64
	var recopyTime time.Duration
	var handRSS int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		seed := freshSeedB(b)
		top := buildBenchClosure(b, seed+"-ours", kib)
		topHand := buildBenchClosure(b, seed+"-hand", kib)
		b.StartTimer()

		// Through the transport.
		t0 := time.Now()
		st, err := c.CopyClosure(ctx, top)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		sw, err := c.Switch(ctx, top, "switch", 5*time.Minute)
		if err != nil || sw.ExitCode != 0 {
			b.Fatalf("switch: %v %+v", err, sw)
		}
		t2 := time.Now()
		res, err := c.Run(ctx, append([]string{"systemctl"}, showProps...), deploybody.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("show: %v %+v", err, res)
		}
		t3 := time.Now()
		ours[0] += t1.Sub(t0)
		ours[1] += t2.Sub(t1)
		ours[2] += t3.Sub(t2)
		sentBytes += st.BytesSent
		r0 := time.Now()
		again, err := c.CopyClosure(ctx, top)
		if err != nil {
			b.Fatal(err)
		}
		recopyTime += time.Since(r0)
		recopyBytes += again.BytesSent

		// By hand with the incus CLI, the same steps (the whole closure is sent: the
		// CLI has no way to ask the node what it lacks).
		b.StopTimer()
		closure, err := nixstore.Closure(ctx, topHand)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		h0 := time.Now()
		// The hand-run pipe, as an operator (and lab/bench-apply.sh) copies a closure.
		handRSS = max(handRSS, handRun(b, "bash", append([]string{"-c",
			`set -o pipefail; nix-store --export "${@:2}" | incus exec "$1" -- nix-store --import >/dev/null`,
			"bash", node.Instance}, closure...)...))
		h1 := time.Now()
		handRSS = max(handRSS, handRun(b, "incus", "exec", node.Instance, "--",
			"systemd-run", "--collect", "--pipe", "--quiet", "--wait", "--service-type=exec",
			"--unit=fedi-bench-"+seed, topHand+"/bin/switch-to-configuration", "switch"))
		h2 := time.Now()
		handRSS = max(handRSS, handRun(b, "incus", append([]string{"exec", node.Instance, "--", "systemctl"}, showProps...)...))
		h3 := time.Now()
		hand[0] += h1.Sub(h0)
		hand[1] += h2.Sub(h1)
		hand[2] += h3.Sub(h2)
	}
	b.StopTimer()
	n := float64(b.N)
	sec := func(d time.Duration) float64 { return d.Seconds() / n }
	b.ReportMetric(sec(ours[0]), "ours-copy-s")
	b.ReportMetric(sec(ours[1]), "ours-switch-s")
	b.ReportMetric(sec(ours[2]), "ours-show-s")
	b.ReportMetric(sec(ours[0]+ours[1]+ours[2]), "ours-total-s")
	b.ReportMetric(sec(hand[0]), "hand-copy-s")
	b.ReportMetric(sec(hand[1]), "hand-switch-s")
	b.ReportMetric(sec(hand[2]), "hand-show-s")
	b.ReportMetric(sec(hand[0]+hand[1]+hand[2]), "hand-total-s")
	b.ReportMetric(float64(sentBytes)/n, "sent-B")
	// Both copies send the whole closure (fresh seeds), of equal size.
	b.ReportMetric(float64(sentBytes)/1e6/ours[0].Seconds(), "ours-copy-MB/s")
	b.ReportMetric(float64(sentBytes)/1e6/hand[0].Seconds(), "hand-copy-MB/s")
	b.ReportMetric(float64(recopyBytes)/n, "recopy-B")
	b.ReportMetric(sec(recopyTime), "recopy-s")
	b.ReportMetric(float64(vmHWM()), "ours-peakRSS-kB")
	b.ReportMetric(float64(handRSS), "hand-incus-cli-peakRSS-kB")
}

func mustClient(b *testing.B) *incusapi.Client {
	b.Helper()
	c, err := incusapi.NewFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func freshSeedB(b *testing.B) string {
	var buf [6]byte
	if _, err := rand.Read(buf[:]); err != nil {
		b.Fatal(err)
	}
	return "bench-" + hex.EncodeToString(buf[:])
}

// benchLog shows the transport's step timings when FEDI_BENCH_VERBOSE=1.
func benchLog(b *testing.B) func(string, ...any) {
	if os.Getenv("FEDI_BENCH_VERBOSE") != "1" {
		return nil
	}
	return b.Logf
}
