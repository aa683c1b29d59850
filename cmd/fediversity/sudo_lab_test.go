package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// A non-root deploy from the command, as the provider's sudo test makes one: a
// throwaway lab node with Debian's real sudo and a user with passwordless sudo; the
// roster names the user and `sudo`, and a node timing the provider offers
// (lock_wait). The real binary deploys through sudo (the lockout revert armed and
// disarmed through it too), root never logs in, and the table's TIME column shows the
// node's real deploy time.
func TestLabCLIDeploySudoUser(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	node := labtest.NewInstance(t, "cli-sudo")
	labtest.AddUser(t, node, "deploy", "deploy ALL=(root) NOPASSWD: ALL")
	roster := map[string]any{
		"timings": map[string]string{"settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"nodes": map[string]any{node.Name: map[string]any{
			"host": node.SSHHost, "port": node.SSHPort, "host_key": node.HostKey,
			"user": "deploy", "sudo": true, "toplevel": good,
			"timings": map[string]string{"lock_wait": "1m"},
		}},
	}
	rosterFile := writeFileJSON(t, t.TempDir(), "roster.json", roster)

	start := time.Now()
	stdout, stderr, code := runCLI(t, bin, "deploy", "--roster", rosterFile)
	took := time.Since(start)
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if running := readlink(t, node.Instance, "/run/current-system"); running != good {
		t.Fatalf("%s runs %s, want %s", node.Name, running, good)
	}
	logins, _ := labtest.IncusErr("exec", node.Instance, "--", "sh", "-c", "journalctl -u ssh --no-pager -o cat | grep 'Accepted publickey for' || true")
	if !strings.Contains(logins, "for deploy ") || strings.Contains(logins, "for root ") {
		t.Fatalf("want SSH logins of deploy only, got:\n%s", logins)
	}
	// NODE RESULT GENERATION TIME REASONS: the node's time, not 0s, and no more than
	// the whole command took.
	var row []string
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == node.Name {
			row = f
		}
	}
	if row == nil {
		t.Fatalf("no table row for %s:\n%s", node.Name, stdout)
	}
	// The column is rounded to a tenth of a second: it may read up to 50 ms more than
	// the node took (CI once saw "7.6s" for a command that took 7.598 s).
	d, err := time.ParseDuration(row[3])
	if err != nil || d < time.Second || d > took+50*time.Millisecond {
		t.Fatalf("TIME column %q: want the node's deploy time (≥ 1s, ≤ the command's %s)\n%s", row[3], took, stdout)
	}
}
