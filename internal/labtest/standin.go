package labtest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Boot loaders of the lab's stand-in firmware (lab/nixos/firmware.sh), one per node.
const (
	// BootLoaderSystemdBoot: entries come from the system profile's generations only, and
	// the default is the generation a switch or boot names (systemd-boot-builder.py). Every
	// lab node starts with it.
	BootLoaderSystemdBoot = "systemd-boot"
	// BootLoaderGRUB: the system a switch or boot names is the default at once, whatever
	// the profile says (install-grub.pl; an Incus NixOS container's /sbin/init link,
	// nixos/modules/virtualisation/lxc-container.nix, does the same).
	BootLoaderGRUB = "grub"
)

// firmware is the stand-in firmware on every lab node (lab/lab.sh puts it in the image).
const firmware = "/usr/lib/fediversity-standin/firmware"

// BootDefault is the system the node's boot loader boots next, a one-shot entry apart:
// for systemd-boot the default entry (bootctl set-default's, else loader.conf's), for
// GRUB its default; "" when the boot loader has no entry.
func BootDefault(t testing.TB, n Node) string {
	t.Helper()
	return strings.TrimSpace(Incus(t, "exec", n.Instance, "--", firmware, "default"))
}

// BootNext is the system the node boots next, a one-shot entry (bootctl set-oneshot)
// included.
func BootNext(t testing.TB, n Node) string {
	t.Helper()
	return strings.TrimSpace(Incus(t, "exec", n.Instance, "--", firmware, "next"))
}

// SetBootLoader makes the node's boot loader loader (BootLoaderSystemdBoot or
// BootLoaderGRUB) and installs it for the system profile's system, as
// `nixos-rebuild boot --install-bootloader` would after a change of boot loader.
func SetBootLoader(t testing.TB, n Node, loader string) {
	t.Helper()
	if loader != BootLoaderSystemdBoot && loader != BootLoaderGRUB {
		t.Fatalf("SetBootLoader: unknown boot loader %q", loader)
	}
	Incus(t, "exec", n.Instance, "--", "/bin/sh", "-c",
		"echo "+loader+" >/boot/fediversity-standin-loader && /nix/var/nix/profiles/system/bin/switch-to-configuration boot")
}

// EnableBootCounting gives the node's new systemd-boot entries tries boot tries
// (nixos-generation-N+<tries>.conf), as boot.loader.systemd-boot's boot counting does.
func EnableBootCounting(t testing.TB, n Node, tries int) {
	t.Helper()
	Incus(t, "exec", n.Instance, "--", "/bin/sh", "-c", "echo "+strconv.Itoa(tries)+" >/boot/fediversity-standin-boot-counting")
}

// CopyClosure copies the closure of path from this machine's store into the node's
// (nix-store --export into nix-store --import over an Incus exec): test set-up, not the
// product's copy.
func CopyClosure(t testing.TB, n Node, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	req, err := exec.CommandContext(ctx, "nix-store", "--query", "--requisites", path).Output()
	if err != nil {
		t.Fatalf("nix-store --query --requisites %s: %v", path, err)
	}
	export := exec.CommandContext(ctx, "nix-store", append([]string{"--export"}, strings.Fields(string(req))...)...)
	args := []string{"exec", n.Instance}
	if n.Project != "" {
		args = append(args, "--project", n.Project)
	}
	imp := exec.CommandContext(ctx, "incus", append(args, "--", "/usr/bin/nix-store", "--import")...)
	pipe, err := export.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	imp.Stdin = pipe
	var out bytes.Buffer
	imp.Stdout, imp.Stderr = &out, &out
	if err := export.Start(); err != nil {
		t.Fatal(err)
	}
	if err := imp.Run(); err != nil {
		t.Fatalf("copying %s to %s: %v\n%s", path, n.Instance, err, out.String())
	}
	if err := export.Wait(); err != nil {
		t.Fatalf("nix-store --export %s: %v", path, err)
	}
}

// SetProfile makes toplevel the next generation of the node's system profile.
func SetProfile(t testing.TB, n Node, toplevel string) {
	t.Helper()
	Incus(t, "exec", n.Instance, "--", "/usr/bin/nix-env", "-p", "/nix/var/nix/profiles/system", "--set", toplevel)
}

// SwitchResult is what a switch-to-configuration run left: its exit status and its
// output (stdout then stderr).
type SwitchResult struct {
	Exit   int
	Output string
}

// Switch runs toplevel's switch-to-configuration with action on the node as
// nixos-rebuild runs it: by absolute path in a transient unit (systemd-run --pipe), so
// with a unit's PATH; env are NAME=VALUE pairs for it (NIXOS_NO_CHECK=1).
func Switch(t testing.TB, n Node, toplevel, action string, env ...string) SwitchResult {
	t.Helper()
	argv := []string{"exec", n.Instance, "--", "/usr/bin/systemd-run", "--collect", "--no-ask-password", "--pipe",
		"--quiet", "--wait", "--service-type=exec", "--unit=fediversity-labtest-switch-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	for _, e := range env {
		argv = append(argv, "--setenv="+e)
	}
	argv = append(argv, toplevel+"/bin/switch-to-configuration", action)
	out, err := IncusErr(argv...)
	res := SwitchResult{Output: out}
	if err != nil {
		code, convErr := strconv.Atoi(strings.TrimPrefix(err.Error(), "exit status "))
		if convErr != nil {
			t.Fatalf("switch-to-configuration %s of %s on %s: %v\n%s", action, toplevel, n.Instance, err, out)
		}
		res.Exit = code
	}
	return res
}

// Readlink is `readlink -f path` on the node.
func Readlink(t testing.TB, n Node, path string) string {
	t.Helper()
	return strings.TrimSpace(Incus(t, "exec", n.Instance, "--", "/usr/bin/readlink", "-f", path))
}

// UnitProperty is one property of a unit on the node (systemctl show -p NAME --value).
func UnitProperty(t testing.TB, n Node, unit, property string) string {
	t.Helper()
	return strings.TrimSpace(Incus(t, "exec", n.Instance, "--", "/usr/bin/systemctl", "show", "-p", property, "--value", unit))
}

// String shows a switch's exit and output in a failure.
func (r SwitchResult) String() string { return fmt.Sprintf("exit %d\n%s", r.Exit, r.Output) }

// MissingOnNode is how many paths of toplevel's closure (in this machine's store) the
// node's store lacks: what a first copy must send, now that every lab node's base
// system already holds the paths the stand-in systems share with it (their systemd and
// default commands).
func MissingOnNode(t testing.TB, n Node, toplevel string) int {
	t.Helper()
	req, err := exec.Command("nix-store", "--query", "--requisites", toplevel).Output()
	if err != nil {
		t.Fatalf("nix-store --query --requisites %s: %v", toplevel, err)
	}
	args := []string{"exec", n.Instance}
	if n.Project != "" {
		args = append(args, "--project", n.Project)
	}
	script := `for p in "$@"; do /usr/bin/nix-store --check-validity "$p" 2>/dev/null || echo "$p"; done`
	out := Incus(t, append(append(args, "--", "/bin/sh", "-c", script, "sh"), strings.Fields(string(req))...)...)
	return len(strings.Fields(out))
}
