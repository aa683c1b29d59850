package labtest

import (
	"strings"
	"testing"
)

// The tests' exec gives the command's output and exit status, in both argument forms the
// tests use, and never an empty output for a command that prints: the CLI's relay lost it
// under load (see recordedExec).
func TestLabExecOutputStatusAndQuickReads(t *testing.T) {
	Require(t)
	node := Nodes(t)[0]

	out, err := IncusErr("exec", node.Instance, "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3")
	if err == nil || err.Error() != "exit status 3" {
		t.Errorf("exit 3: err = %v, want exit status 3", err)
	}
	if out != "to-stdout\nto-stderr\n" {
		t.Errorf("exit 3: output %q, want stdout then stderr", out)
	}

	project := node.Project
	if project == "" {
		project = "default"
	}
	if got := Incus(t, "exec", node.Instance, "--project", project, "--", "cat", "/etc/hostname"); strings.TrimSpace(got) == "" {
		t.Errorf("--project %s: cat /etc/hostname printed nothing", project)
	}

	for i := range 40 {
		if got := Incus(t, "exec", node.Instance, "--", "readlink", "-f", "/"); got != "/\n" {
			t.Fatalf("read %d: readlink -f / printed %q", i, got)
		}
	}

	if _, err := IncusErr("exec", Prefix()+"-no-such-instance", "--", "true"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing instance: err = %v, want the daemon's 404", err)
	}
}
