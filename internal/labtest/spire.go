package labtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SpireNode is the lab's spire node as lab/spire/up.sh describes it in spire.json.
type SpireNode struct {
	Name        string `json:"name"`
	SSHHost     string `json:"ssh_host"`
	SSHPort     int    `json:"ssh_port"`
	HostKey     string `json:"host_key"`
	ServerPort  int    `json:"server_port"`
	TrustDomain string `json:"trust_domain"`
	APIServer   string `json:"api_server"`
}

// SpireEnabled reports whether SPIRE lab tests should run (lab/test.sh sets it after
// lab/spire/up.sh).
func SpireEnabled() bool { return os.Getenv("FEDIVERSITY_SPIRE") == "1" }

// Spire skips t unless FEDIVERSITY_SPIRE=1, and fails it when SPIRE is asked for but the
// spire node is not up: a silent skip would hide a broken SPIRE lab in CI.
func Spire(t testing.TB) SpireNode {
	t.Helper()
	if !SpireEnabled() {
		t.Skip("SPIRE lab test: set FEDIVERSITY_SPIRE=1 after `bash lab/spire/up.sh` to run it")
	}
	b, err := os.ReadFile(filepath.Join(StateDir(), "spire.json"))
	if err != nil {
		t.Fatalf("FEDIVERSITY_SPIRE=1 but the spire node is not up (%v): run `bash lab/spire/up.sh`", err)
	}
	var n SpireNode
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatalf("spire.json: %v", err)
	}
	if out, err := IncusErr("exec", n.Name, "--", "spire-server", "healthcheck"); err != nil {
		t.Fatalf("FEDIVERSITY_SPIRE=1 but spire-server on %s is not healthy: %v: %s", n.Name, err, out)
	}
	return n
}

// SpireServer runs the spire-server CLI on the spire node (test setup and checks only;
// the product goes over SSH).
func (n SpireNode) SpireServer(t testing.TB, args ...string) string {
	t.Helper()
	return Incus(t, append([]string{"exec", n.Name, "--", "spire-server"}, args...)...)
}

// SpireAgentBinary is the cached spire-agent of lab/spire/build.sh (a no-op when cached).
func SpireAgentBinary(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(RepoRoot(t), "lab", "spire", "build.sh")).Output()
	if err != nil {
		t.Fatalf("lab/spire/build.sh: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if p, ok := strings.CutPrefix(line, "spire-agent="); ok {
			return p
		}
	}
	t.Fatalf("lab/spire/build.sh printed no spire-agent path: %s", out)
	return ""
}
