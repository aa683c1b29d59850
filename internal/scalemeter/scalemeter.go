// Package scalemeter measures what a run of many nodes costs the process that runs it:
// CPU time, peak resident memory, and at their peak the goroutines and the open files.
// The scale benchmarks of the engine and of the command (BenchmarkScale) report with
// it, per node, so that how the cost grows with the number of nodes can be read off
// one table (lab/bench-scale.sh).
package scalemeter

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Figures are one measured run.
type Figures struct {
	CPU        time.Duration // user + system time of the whole process during the run
	Wall       time.Duration
	PeakRSS    int64 // bytes: the process's VmHWM, reset just before the run
	Goroutines int   // at their peak, less those that ran before the run
	OpenFiles  int   // at their peak, less those open before the run
}

// sampleEvery is how often the goroutines and the open files are counted during a run.
const sampleEvery = 2 * time.Millisecond

// Measure runs fn and measures it. The heap is collected and handed back to the system
// first, and the peak RSS reset (/proc/self/clear_refs), so that each run's peak is its
// own and not an earlier, larger run's.
func Measure(fn func()) Figures {
	runtime.GC()
	debug.FreeOSMemory()
	resetPeakRSS()
	idleG, idleF := runtime.NumGoroutine(), openFiles()
	var mu sync.Mutex
	peakG, peakF := idleG, idleF
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			g, f := runtime.NumGoroutine(), openFiles()
			mu.Lock()
			peakG, peakF = max(peakG, g), max(peakF, f)
			mu.Unlock()
		}
	}()
	before, start := cpuTime(), time.Now()
	fn()
	wall, cpu := time.Since(start), cpuTime()-before
	close(stop)
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	return Figures{CPU: cpu, Wall: wall, PeakRSS: peakRSS(),
		// The sampler itself is one goroutine and, while it counts, one open directory.
		Goroutines: max(0, peakG-idleG-1), OpenFiles: max(0, peakF-idleF-1)}
}

// Report reports f, a run of n nodes, on b: per node, and the peak RSS both whole and
// as its growth per node over base (a run of one node; ignored when n is 1).
func (f Figures) Report(b *testing.B, n int, base Figures) {
	per := float64(n)
	b.ReportMetric(float64(f.CPU.Microseconds())/1000/per, "cpu-ms/node")
	b.ReportMetric(float64(f.Wall.Microseconds())/1000, "wall-ms")
	b.ReportMetric(float64(f.PeakRSS)/(1<<20), "peak-rss-MiB")
	if n > 1 && base.PeakRSS > 0 {
		b.ReportMetric(float64(f.PeakRSS-base.PeakRSS)/1024/float64(n-1), "rss-KiB/added-node")
	}
	b.ReportMetric(float64(f.Goroutines)/per, "goroutines/node")
	b.ReportMetric(float64(f.OpenFiles)/per, "open-files/node")
	// The default metrics (ns/op) are the run's wall time: kept, but the table reads
	// the ones above.
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resetPeakRSS makes the kernel's VmHWM start again from the current RSS (Linux 4.0 and
// later: writing 5 to clear_refs).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS is the process's VmHWM in bytes (0 where /proc cannot tell).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		var kb int64
		if n, _ := fmt.Sscanf(line, "VmHWM: %d kB", &kb); n == 1 {
			return kb << 10
		}
	}
	return 0
}

// openFiles counts the process's open file descriptors.
func openFiles() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(entries)
}
