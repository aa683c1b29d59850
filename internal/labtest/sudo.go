package labtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sudoDebDir caches Debian's sudo package for the lab, in the lab's cache
// ($FEDIVERSITY_CACHE, as lab/lab.sh). The lab image has sudo since it is shaped like
// NixOS (security.sudo.enable is on by default there); an instance made from an older
// image, which has none and reaches no package mirror, gets it from here. lab/test.sh
// fills it; SudoDeb fills it too when a test runs alone.
func sudoDebDir() string {
	cache := os.Getenv("FEDIVERSITY_CACHE")
	if cache == "" {
		cache = "/var/cache/fediversity"
	}
	return filepath.Join(cache, "lab-sudo")
}

// SudoDeb returns the cached sudo .deb, downloading it with apt when it is missing.
func SudoDeb(t testing.TB) string {
	t.Helper()
	dir := sudoDebDir()
	if debs, _ := filepath.Glob(filepath.Join(dir, "sudo_*.deb")); len(debs) > 0 {
		return debs[0]
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("apt-get", "download", "sudo")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sudo for the lab: apt-get download sudo: %v\n%s\n(run `bash lab/test.sh setup`)", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "sudo_*.deb"))
	if len(debs) == 0 {
		t.Fatalf("sudo for the lab: apt-get download left no sudo_*.deb in %s", dir)
	}
	return debs[0]
}

// AddUser makes a login user on a throwaway instance with the lab key authorised and,
// when sudoers is not empty, that line in /etc/sudoers.d/<user> (sudo is installed
// from SudoDeb first when the instance lacks it). The lab's own commands name their
// binaries by absolute path: a NixOS login's PATH has no /usr/sbin.
func AddUser(t testing.TB, n Node, user, sudoers string) {
	t.Helper()
	if _, err := IncusErr("exec", n.Instance, "--", "/usr/bin/test", "-x", "/usr/bin/sudo"); err != nil {
		deb := SudoDeb(t)
		Incus(t, "file", "push", deb, n.Instance+"/tmp/sudo.deb")
		Incus(t, "exec", n.Instance, "--", "/usr/bin/dpkg", "-i", "/tmp/sudo.deb")
	}
	Incus(t, "exec", n.Instance, "--", "/usr/sbin/useradd", "--create-home", "--shell", "/bin/sh", user)
	home := "/home/" + user
	Incus(t, "exec", n.Instance, "--", "/usr/bin/mkdir", "-p", home+"/.ssh")
	Incus(t, "file", "push", "--mode", "0600", KeyFile()+".pub", n.Instance+home+"/.ssh/authorized_keys")
	Incus(t, "exec", n.Instance, "--", "/usr/bin/chown", "-R", user+":"+user, home+"/.ssh")
	if sudoers != "" {
		f := filepath.Join(t.TempDir(), user)
		if err := os.WriteFile(f, []byte(strings.TrimSpace(sudoers)+"\n"), 0o440); err != nil {
			t.Fatal(err)
		}
		Incus(t, "file", "push", "--mode", "0440", "--uid", "0", "--gid", "0", f, n.Instance+"/etc/sudoers.d/"+user)
		Incus(t, "exec", n.Instance, "--", "/usr/sbin/visudo", "-c", "-f", "/etc/sudoers.d/"+user)
	}
}
