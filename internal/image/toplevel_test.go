package image

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/nixstore"
)

// layerEntries lists the layer's tar entries (uncompressed).
func layerEntries(t *testing.T, toplevel string) map[string]*tar.Header {
	t.Helper()
	img, _, err := ToplevelImage(context.Background(), toplevel)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
}

// Two builds of one toplevel give one layer and one image digest; the layer holds exactly
// the closure nix-store -qR lists, with /sbin/init pointing at the toplevel's init.
func TestToplevelImageReproducibleAndExact(t *testing.T) {
	top := labtest.BuildClosure(t, labtest.ClosureGood)
	ctx := context.Background()
	digests := map[string]bool{}
	layerDigests := map[string]bool{}
	for range 2 {
		img, _, err := ToplevelImage(ctx, top)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		l, _ := img.Layers()
		ld, _ := l[0].Digest()
		digests[d.String()], layerDigests[ld.String()] = true, true
	}
	if len(digests) != 1 || len(layerDigests) != 1 {
		t.Fatalf("two builds of %s gave image digests %v and layer digests %v", top, digests, layerDigests)
	}
	t.Logf("toplevel %s: image %v, layer %v", top, digests, layerDigests)

	closure, err := nixstore.Closure(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	entries := layerEntries(t, top)
	var roots []string
	for name, h := range entries {
		if rest, ok := strings.CutPrefix(name, "/nix/store/"); ok && !strings.Contains(rest, "/") {
			roots = append(roots, name)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(1, 0)) {
			t.Errorf("%s: owner %d:%d (%q:%q) mtime %v, want 0:0, no names, mtime 1", name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
	}
	sort.Strings(roots)
	sort.Strings(closure)
	if strings.Join(roots, "\n") != strings.Join(closure, "\n") {
		t.Fatalf("the layer's store paths:\n%s\nthe closure (nix-store -qR):\n%s", strings.Join(roots, "\n"), strings.Join(closure, "\n"))
	}
	for name := range entries {
		if !strings.HasPrefix(name, "/nix/store/") && name != "/nix" && name != "/nix/store" && name != "/sbin" && name != "/sbin/init" {
			t.Errorf("the layer holds %s, outside the closure", name)
		}
	}
	if h := entries["/sbin/init"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != top+"/init" {
		t.Fatalf("/sbin/init: %+v, want a symlink to %s/init", h, top)
	}
	// The container runtime stops the node with the image's stop signal: systemd as
	// PID 1 shuts down cleanly on SIGRTMIN+3 only.
	img, _, err := ToplevelImage(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config; got.StopSignal != "SIGRTMIN+3" || len(got.Entrypoint) != 0 || strings.Join(got.Cmd, " ") != "/sbin/init" {
		t.Fatalf("image config: stop signal %q, entrypoint %q, command %q; want SIGRTMIN+3, none, /sbin/init", got.StopSignal, got.Entrypoint, got.Cmd)
	}
	// Nothing of the image is at /bin or /usr/bin: commands run in the node are found
	// on NixOS's PATH.
	if got := cfg.Config.Env; len(got) != 1 || got[0] != "PATH="+NodePath {
		t.Fatalf("image config environment %q, want only PATH=%s", got, NodePath)
	}
	tag, err := ToplevelTag(top)
	if err != nil || len(tag) != 32 || !strings.HasPrefix(top, "/nix/store/"+tag+"-") {
		t.Fatalf("tag %q (%v) of %s", tag, err, top)
	}
}

// A second push of the same toplevel uploads no layer (the registry holds it), and a push
// of the same toplevel to another node's repository of the same registry gives the same
// digest.
func TestPushToplevelSkipsHeldLayers(t *testing.T) {
	top := labtest.BuildClosure(t, labtest.ClosureGood)
	reg := serveRegistry(t, "", "", false)
	var uploads atomic.Int64
	counting := &countingTransport{uploads: &uploads}
	tag, _ := ToplevelTag(top)
	tgt := Target{Registry: reg.host, Namespace: "ns", Node: "web01", Tag: tag}
	first, err := PushToplevel(context.Background(), top, tgt, Options{Transport: counting})
	if err != nil {
		t.Fatal(err)
	}
	if uploads.Load() == 0 {
		t.Fatal("the first push uploaded nothing")
	}
	uploads.Store(0)
	second, err := PushToplevel(context.Background(), top, tgt, Options{Transport: counting})
	if err != nil {
		t.Fatal(err)
	}
	if second.Digest != first.Digest || uploads.Load() != 0 {
		t.Fatalf("second push: digest %s (first %s), %d blob uploads; want the same digest and none", second.Digest, first.Digest, uploads.Load())
	}
}

type countingTransport struct{ uploads *atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if (r.Method == "POST" || r.Method == "PATCH" || r.Method == "PUT") && strings.Contains(r.URL.Path, "/blobs/uploads") {
		c.uploads.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// startLabRegistry runs lab/k8s/labregistry (go-containerregistry's registry) as its own
// process, so that the blobs it holds do not count in this process's memory figures.
func startLabRegistry(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "labregistry")
	build := exec.Command("go", "build", "-o", bin, "./lab/k8s/labregistry")
	build.Dir = labtest.RepoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build labregistry: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(addr)
}

// BenchmarkPushToplevelMemory prints the memory a push of a large-ish closure takes
// (figures only). FEDIVERSITY_IMAGE_MIB sets the payload size (default 512 MiB):
//
//	go test -run '^$' -bench PushToplevelMemory -benchtime 1x ./internal/image/
func BenchmarkPushToplevelMemory(t *testing.B) {
	mib := 512
	if v := os.Getenv("FEDIVERSITY_IMAGE_MIB"); v != "" {
		if _, err := fmt.Sscanf(v, "%d", &mib); err != nil {
			t.Fatalf("FEDIVERSITY_IMAGE_MIB=%q is not a number of MiB: %v", v, err)
		}
	}
	if _, err := exec.LookPath(nixstore.NixBuildBin); err != nil {
		t.Fatalf("nix-build is needed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	top, err := nixstore.Build(ctx, nixstore.BuildSpec{File: labtest.RepoRoot(t) + "/lab/closures", Attr: labtest.ClosureGood,
		ArgStr: map[string]string{"payloadKiB": fmt.Sprint(mib * 1024), "seed": fmt.Sprintf("image-memory-%d", mib)}})
	if err != nil {
		t.Fatal(err)
	}
	reg := startLabRegistry(t)
	tag, _ := ToplevelTag(top)
	t.ResetTimer()
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	start := time.Now()
	res, err := PushToplevel(ctx, top, Target{Registry: reg, Namespace: "ns", Node: "big", Tag: tag}, Options{})
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	t.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	t.ReportMetric(float64(ru.Maxrss)/1024, "max-RSS-MiB")
	t.Logf("closure of %s with a %d MiB payload: pushed %s in %s; peak Go heap in use %.1f MiB; max RSS of this process %.1f MiB (the registry runs in its own process)",
		top, mib, res.Digest, time.Since(start).Round(time.Millisecond), float64(peak.Load())/(1<<20), float64(ru.Maxrss)/1024)
}
