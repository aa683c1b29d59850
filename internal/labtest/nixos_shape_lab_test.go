package labtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// nixosLoginPath is a NixOS login's PATH for root (nixos/modules/config/system-environment.nix,
// nixos/modules/programs/environment.nix).
const nixosLoginPath = "/run/wrappers/bin:/root/.nix-profile/bin:/nix/profile/bin:/root/.local/state/nix/profile/bin:/etc/profiles/per-user/root/bin:/nix/var/nix/profiles/default/bin:/run/current-system/sw/bin"

// A lab node gives a command what a NixOS node gives it: a unit gets systemd's bin
// directory alone as PATH (no mv), a login NixOS's PATH without Debian's /usr/bin, incusd's
// exec its own PATH with the system's sw/bin appended for /etc/NIXOS, and the running
// system's sw/bin holds NixOS's default commands and no others.
func TestLabNodeIsShapedLikeNixOS(t *testing.T) {
	node := Nodes(t)[0]

	t.Run("unit PATH is systemd's bin only", func(t *testing.T) {
		out, err := IncusErr("exec", node.Instance, "--", "/usr/bin/systemd-run", "--wait", "--pipe", "--quiet",
			"/bin/sh", "-c", `echo "$PATH"; command -v mv || echo "no mv"`)
		if err != nil {
			t.Fatalf("systemd-run: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "/nix/store/") || !strings.HasSuffix(lines[0], "-systemd-252/bin/") || lines[1] != "no mv" {
			t.Fatalf("a unit's PATH and mv: %q, want <systemd>/bin/ and no mv", out)
		}
		sys := strings.TrimSpace(Incus(t, "exec", node.Instance, "--", "/usr/bin/readlink", "-f", "/run/current-system/systemd"))
		if lines[0] != sys+"/bin/" {
			t.Errorf("a unit's PATH %s is not the running system's systemd (%s)", lines[0], sys)
		}
	})

	t.Run("login PATH over SSH", func(t *testing.T) {
		out := labSSH(t, node, `echo "$PATH"; for c in mv flock systemctl nix-store sudo apt-get dpkg; do command -v $c || echo "no $c"; done; test -x /bin/sh && test -x /usr/bin/env && test -f /etc/NIXOS && echo fhs-ok`)
		want := nixosLoginPath + "\n/run/current-system/sw/bin/mv\n/run/current-system/sw/bin/flock\n" +
			"/run/current-system/sw/bin/systemctl\n/run/current-system/sw/bin/nix-store\n/run/wrappers/bin/sudo\n" +
			"no apt-get\nno dpkg\nfhs-ok\n"
		if out != want {
			t.Fatalf("over SSH:\n%s\nwant:\n%s", out, want)
		}
	})

	t.Run("incus exec PATH is incusd's", func(t *testing.T) {
		out := Incus(t, "exec", node.Instance, "--", "/bin/sh", "-c", `echo "$PATH"`)
		if want := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/current-system/sw/bin\n"; out != want {
			t.Fatalf("incus exec PATH %q, want incusd's own with the system's sw/bin (/etc/NIXOS) %q", out, want)
		}
	})

	// A node no test deployed to yet: its first system.
	fresh := NewInstance(t, "nixos-shape")

	t.Run("sw/bin holds the default commands only", func(t *testing.T) {
		want := defaultCommands(t)
		out := Incus(t, "exec", fresh.Instance, "--", "/bin/sh", "-c",
			`cd /nix/var/nix/profiles/system/sw/bin && for f in *; do [ -e "$f" ] || echo "dangling $f"; echo "$f"; done`)
		got := strings.Fields(out)
		for _, f := range got {
			if f == "dangling" {
				t.Fatalf("a default command does not resolve on the node:\n%s", out)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("the first system's sw/bin:\n%v\nwant lab/nixos/default-commands:\n%v", got, want)
		}
	})

	t.Run("the first system is generation 1 and booted", func(t *testing.T) {
		out := Incus(t, "exec", fresh.Instance, "--", "/bin/sh", "-c",
			`readlink -f /nix/var/nix/profiles/system; readlink -f /nix/var/nix/profiles/system-1-link; readlink -f /run/current-system; readlink -f /run/booted-system`)
		l := strings.Fields(out)
		if len(l) != 4 || !strings.HasSuffix(l[0], "-nixos-system-fedi-base-1") || l[1] != l[0] || l[2] != l[0] || l[3] != l[0] {
			t.Fatalf("profile, generation 1, current and booted system: %v, want one nixos-base", l)
		}
	})
}

// defaultCommands reads lab/nixos/default-commands, sorted.
func defaultCommands(t testing.TB) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(RepoRoot(t), "lab", "nixos", "default-commands"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			cmds = append(cmds, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(cmds)
	return cmds
}

// labSSH runs a command on a lab node over SSH as root with the lab key (a login, as a
// deployer's), and returns its output.
func labSSH(t testing.TB, n Node, command string) string {
	t.Helper()
	cmd := exec.Command("ssh", "-i", KeyFile(), "-o", "UserKnownHostsFile="+KnownHostsFile(), "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-p", fmt.Sprint(n.SSHPort), "root@"+n.SSHHost, command)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ssh %s %q: %v\n%s", n.Name, command, err, out)
	}
	return string(out)
}
