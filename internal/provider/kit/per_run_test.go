package kit

import (
	"testing"
)

func TestPerRunReason(t *testing.T) {
	ciTemp := "/home/runner/work/_temp"
	t.Setenv("TMPDIR", "/build/ci-tmp.x1")
	t.Setenv("RUNNER_TEMP", ciTemp)
	t.Setenv("XDG_RUNTIME_DIR", "")
	cfg := &Config{SSHPrivateKeyFile: "/home/op/.ssh/deploy", RegistryAuthFile: "/etc/fedi/auth.json"}
	for v, perRun := range map[string]bool{
		"/tmp/key":                     true,
		"/tmp":                         true,
		"/var/tmp/x/y":                 true,
		"/run/user/1000/agent.sock":    true,
		"/dev/shm/secret":              true,
		"/home/op/.ssh/deploy":         true, // the provider's key file, wherever it is
		"/home/op/.ssh/../.ssh/deploy": true,
		"/etc/fedi/auth.json":          true,
		"/tmpfoo/bar":                  false,
		"./nodes/web01.nix":            false,
		"web01":                        false,
		"/srv/fedi/plan.json":          false,
		// $TMPDIR and a CI job's temp dir are per-run too.
		"/build/ci-tmp.x1/key":         true,
		ciTemp + "/staged-key":         true,
		"/build/ci-tmp.x10/key":        false, // another directory that shares a prefix
		"/home/runner/work/repo/a.nix": false,
		// Paths inside larger values.
		"--identity=/tmp/k":                  true,
		"-i /var/tmp/k -p 22":                true,
		"PATH=/usr/bin:/tmp/x/bin":           true,
		`{"key": "/dev/shm/k"}`:              true,
		"file:///tmp/x":                      true,
		"--key=/home/op/.ssh/deploy":         true,
		"--key=/home/op/.ssh/deploy.pub":     false, // another file beside the key
		"--config=/srv/fedi/x.json":          false,
		"https://example.org/tmp/x":          false, // a URL's path, not a local one
		"--name=web01 --root=/srv/fedi/tree": false,
		"a/tmp/b":                            false,
		// macOS' temporary directories (issue 39, item 9): /tmp is /private/tmp there,
		// and $TMPDIR is under /var/folders.
		"/private/tmp/key":   true,
		"/private/var/tmp/x": true,
		"/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T/key": true,
		"/private/var/folders/zz/zyxvpxvq6csfxvn_n000/T/k":     true,
		"/private/etc/fedi/plan.json":                          false,
		"/var/foldersx/a":                                      false,
	} {
		if got := perRunReason(v, cfg) != ""; got != perRun {
			t.Errorf("perRunReason(%q) per-run = %v, want %v (%s)", v, got, perRun, perRunReason(v, cfg))
		}
	}
	t.Setenv("TMPDIR", "/")
	if why := perRunReason("/srv/fedi/plan.json", nil); why != "" {
		t.Errorf("TMPDIR=/ refused a stable path: %s", why)
	}
}
