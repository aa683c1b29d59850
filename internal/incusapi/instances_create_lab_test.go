package incusapi

// Lab tests of the instance life cycle on the real incusd: image resolution, create and
// start with a config key, a proxy and a disk device, the systemd wait, a full config
// replace that keeps the daemon's volatile keys, and stop+delete. One container boot.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

func TestLabResolveImage(t *testing.T) {
	c := labClient(t)
	ctx := labCtx(t)
	img, err := c.ResolveImage(ctx, labtest.Image)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Fingerprint) != 64 || img.Type != "container" {
		t.Fatalf("alias %s resolved to %+v", labtest.Image, img)
	}
	if names := img.AliasNames(); len(names) != 1 || names[0] != labtest.Image {
		t.Fatalf("aliases of the lab image = %v", names)
	}
	byPrefix, err := c.ResolveImage(ctx, img.Fingerprint[:12])
	if err != nil || byPrefix.Fingerprint != img.Fingerprint {
		t.Fatalf("fingerprint prefix: %v %+v", err, byPrefix)
	}
	for _, ref := range []string{labtest.Prefix() + "-t-no-such-alias", "0000deadbeef"} {
		_, err = c.ResolveImage(ctx, ref)
		if !IsNotFound(err) || !strings.Contains(err.Error(), ref) {
			t.Fatalf("ResolveImage(%q): want a not-found naming it, got %v", ref, err)
		}
	}
}

func TestLabInstanceLifecycle(t *testing.T) {
	c := labClient(t)
	ctx := labCtx(t)
	name := labtest.Prefix() + "-t-api-life"
	_, _ = labtest.IncusErr("delete", "--force", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })

	img, err := c.ResolveImage(ctx, labtest.Image)
	if err != nil {
		t.Fatal(err)
	}
	port := freeLoopbackPort(t)
	// A host directory the container mounts; mode 0755 so the container's root (an
	// unprivileged uid on the host) can read it.
	shared, err := os.MkdirTemp("", "incusapi-disk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "hello"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// A device the daemon refuses: the error carries its own text and nothing is left.
	err = c.CreateInstance(ctx, InstanceCreate{
		Name: name, Fingerprint: img.Fingerprint,
		Devices: map[string]map[string]string{"bad": {"type": "proxy", "listen": "tcp:127.0.0.1:1"}},
	})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Message == "" || !strings.Contains(err.Error(), name) {
		t.Fatalf("bad device: want the daemon's error naming %s, got %v", name, err)
	}
	t.Logf("bad device refused: %v", err)
	if _, err := c.GetInstance(ctx, name); !IsNotFound(err) {
		t.Fatalf("after a refused create the instance should not exist: %v", err)
	}

	t0 := time.Now()
	err = c.CreateInstance(ctx, InstanceCreate{
		Name: name, Fingerprint: img.Fingerprint, Start: true, Profiles: []string{"default"},
		Config: map[string]string{"user.fediversity.test": "one", "limits.processes": "3000"},
		Devices: map[string]map[string]string{
			"ssh":    {"type": "proxy", "listen": fmt.Sprintf("tcp:127.0.0.1:%d", port), "connect": "tcp:127.0.0.1:22", "bind": "host"},
			"shared": {"type": "disk", "source": shared, "path": "/mnt/shared", "readonly": "true"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	state, err := c.WaitSystemd(ctx, name, time.Minute, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if state != "running" && state != "degraded" {
		t.Fatalf("WaitSystemd returned %q", state)
	}
	t.Logf("created, started and systemd %s in %s", state, time.Since(t0).Round(time.Millisecond))

	// The proxy reaches the container's sshd from the host's loopback.
	if banner := readBanner(t, fmt.Sprintf("127.0.0.1:%d", port)); !strings.HasPrefix(banner, "SSH-2.0-") {
		t.Fatalf("proxy on 127.0.0.1:%d answered %q, want an SSH banner", port, banner)
	}
	// The disk shows the host's file.
	res, err := c.Exec(ctx, name, ExecRequest{Command: []string{"cat", "/mnt/shared/hello"}})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "from the host\n" {
		t.Fatalf("disk device: %v %+v", err, res)
	}

	got, err := c.GetInstanceConfig(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Running() || got.Config["user.fediversity.test"] != "one" || got.Config["limits.processes"] != "3000" ||
		got.Config["volatile.base_image"] != img.Fingerprint || got.Devices["ssh"]["type"] != "proxy" ||
		len(got.Profiles) != 1 || got.Profiles[0] != "default" {
		t.Fatalf("read back: %+v", got)
	}
	if _, ok := got.Devices["root"]; ok {
		t.Fatalf("GetInstanceConfig must give the instance's own devices, not the profile's root: %v", got.Devices)
	}

	// Creating it again: the daemon's refusal is the error text (Incus 6.0 says
	// "UNIQUE constraint failed: instances.project_id, instances.name"; later versions
	// "already exists"), and the running container is untouched.
	err = c.CreateInstance(ctx, InstanceCreate{Name: name, Fingerprint: img.Fingerprint})
	refused := errors.As(err, &ae) && (strings.Contains(ae.Message, "instances.name") || strings.Contains(ae.Message, "already exists"))
	if !refused {
		t.Fatalf("second create: want the daemon's refusal, got %v", err)
	}
	if again, err := c.GetInstanceConfig(ctx, name); err != nil || !again.Running() {
		t.Fatalf("after the refused second create: %v %+v", err, again)
	}

	// Replace the config: a key changes, the limit goes, the disk goes; the daemon's
	// volatile keys are carried over.
	next := *got
	next.Config = map[string]string{"user.fediversity.test": "two"}
	for k, v := range got.Config {
		if strings.HasPrefix(k, "volatile.") || strings.HasPrefix(k, "image.") {
			next.Config[k] = v
		}
	}
	next.Devices = map[string]map[string]string{"ssh": got.Devices["ssh"]}
	if err := c.UpdateInstance(ctx, name, next); err != nil {
		t.Fatal(err)
	}
	after, err := c.GetInstanceConfig(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if after.Config["user.fediversity.test"] != "two" || after.Config["limits.processes"] != "" ||
		after.Config["volatile.base_image"] != img.Fingerprint || len(after.Devices) != 1 || !after.Running() {
		t.Fatalf("after update: %+v", after)
	}
	res, err = c.Exec(ctx, name, ExecRequest{Command: []string{"test", "-e", "/mnt/shared/hello"}})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("the removed disk is still mounted: %v %+v", err, res)
	}

	t0 = time.Now()
	if err := c.RemoveInstance(ctx, name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped and deleted in %s", time.Since(t0).Round(time.Millisecond))
	if _, err := c.GetInstance(ctx, name); !IsNotFound(err) {
		t.Fatalf("after RemoveInstance: want not found, got %v", err)
	}
	if err := c.RemoveInstance(ctx, name, time.Second); err != nil {
		t.Fatalf("removing a missing instance is not an error: %v", err)
	}
}

// TestLabWaitSystemdOnStoppedInstance: a container that never starts is a bounded
// SystemdWaitError with the daemon's last answer, not a hang. No boot: the container is
// created without starting it.
func TestLabWaitSystemdOnStoppedInstance(t *testing.T) {
	c := labClient(t)
	ctx := labCtx(t)
	name := labtest.Prefix() + "-t-api-stopped"
	_, _ = labtest.IncusErr("delete", "--force", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })
	labtest.Incus(t, "init", "--empty", name)
	_, err := c.WaitSystemd(ctx, name, 2*time.Second, 500*time.Millisecond)
	var we *SystemdWaitError
	if !errors.As(err, &we) || we.Instance != name || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("want a SystemdWaitError with the daemon's answer, got %v", err)
	}
	t.Logf("stopped container: %v", err)
	if err := c.RemoveInstance(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func readBanner(t *testing.T, addr string) string {
	t.Helper()
	// sshd may still be starting right after boot: a few bounded tries.
	var last error
	for range 20 {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			line, rerr := bufio.NewReader(conn).ReadString('\n')
			_ = conn.Close()
			if rerr == nil {
				return strings.TrimSpace(line)
			}
			err = rerr
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("no banner from %s: %v", addr, last)
	return ""
}
