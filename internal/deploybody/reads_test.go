package deploybody

import "testing"

func TestUnreadReason(t *testing.T) {
	if r := unreadReason(RunResult{ExitCode: 1, Stderr: []byte("\nFailed to connect to bus: No such file or directory\n")}); r != "Failed to connect to bus: No such file or directory" {
		t.Fatalf("reason = %q", r)
	}
	if r := unreadReason(RunResult{ExitCode: 1}); r != "systemctl exited 1" {
		t.Fatalf("reason = %q", r)
	}
	if r := unreadReason(RunResult{}); r != "" {
		t.Fatalf("reason = %q", r)
	}
}
