package provider

import "testing"

func TestPerRunReason(t *testing.T) {
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
	} {
		if got := perRunReason(v, cfg) != ""; got != perRun {
			t.Errorf("perRunReason(%q) per-run = %v, want %v", v, got, perRun)
		}
	}
}
