package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An unknown --activation is refused before anything runs (exit 2), naming the flag
// and the accepted values.
func TestActivationFlagRefusesUnknownValue(t *testing.T) {
	dir := t.TempDir()
	roster := filepath.Join(dir, "roster.json")
	body := `{"nodes": {"web01": {"host": "127.0.0.1", "port": 9, "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", "toplevel": "/nix/store/00000000000000000000000000000000-x"}}}`
	if err := os.WriteFile(roster, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_PRIVATE_KEY_FILE", filepath.Join(dir, "key"))
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"deploy", "--roster", roster, "--activation", "kexec"}, &stdout, &stderr, newNodePhases())
	if code != exitBadInput || !strings.Contains(stderr.String(), `--activation: "kexec": want switch, boot, reboot-if-needed or reboot`) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 naming --activation", code, stderr.String())
	}
}
