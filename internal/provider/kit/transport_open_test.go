package kit

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

func TestResolveTarget(t *testing.T) {
	cfg := &Config{IncusSocket: "/var/lib/incus/unix.socket", IncusProject: "tenants"}
	sshB := &SSHBlockModel{Host: types.StringValue("127.0.0.1"), HostKey: types.StringValue("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD")}

	got, diags := ResolveTarget(TransportBlocks{SSH: sshB}, cfg)
	if diags.HasError() {
		t.Fatalf("ssh: %v", diags)
	}
	if got.Port != 22 || got.User != "root" || got.Keepalive != DefaultKeepalive {
		t.Fatalf("ssh defaults: %+v", got)
	}

	got, diags = ResolveTarget(TransportBlocks{Incus: &IncusBlockModel{Instance: types.StringValue("c1")}}, cfg)
	if diags.HasError() || got.Project != "tenants" || got.Remote != "local" {
		t.Fatalf("incus defaults: %+v %v", got, diags)
	}

	bad := []struct {
		name  string
		ssh   *SSHBlockModel
		incus *IncusBlockModel
		want  string
	}{
		{"neither", nil, nil, "Exactly one transport block"},
		{"both", sshB, &IncusBlockModel{Instance: types.StringValue("c1")}, "Exactly one transport block"},
		{"unpinned", &SSHBlockModel{Host: types.StringValue("h")}, nil, "No pinned host key"},
		{"no host", &SSHBlockModel{HostKey: types.StringValue("k")}, nil, "Missing SSH host"},
		{"bad keepalive", &SSHBlockModel{Host: types.StringValue("h"), HostKey: types.StringValue("k"), Keepalive: types.StringValue("soon")}, nil, "Invalid duration"},
		{"no instance", nil, &IncusBlockModel{}, "Missing Incus instance"},
		{"foreign remote", nil, &IncusBlockModel{Instance: types.StringValue("c1"), Remote: types.StringValue("https://10.1.1.1:8443")}, "does not match"},
	}
	for _, b := range bad {
		_, diags := ResolveTarget(TransportBlocks{SSH: b.ssh, Incus: b.incus}, cfg)
		if !diags.HasError() || !strings.Contains(SummarizeDiags(diags), b.want) {
			t.Errorf("%s: diags %v, want an error containing %q", b.name, diags, b.want)
		}
	}

	// The insecure switch is explicit and accepted.
	if _, diags := ResolveTarget(TransportBlocks{SSH: &SSHBlockModel{Host: types.StringValue("h"), InsecureIgnoreHostKey: types.BoolValue(true)}}, cfg); diags.HasError() {
		t.Fatalf("insecure_ignore_host_key: %v", diags)
	}
	// A jump host inherits user and known_hosts.
	j, diags := ResolveTarget(TransportBlocks{SSH: &SSHBlockModel{Host: types.StringValue("h"), User: types.StringValue("ops"), KnownHostsFile: types.StringValue("/kh"),
		Jump: &JumpHostModel{Host: types.StringValue("bastion")}}}, cfg)
	if diags.HasError() || j.Jump == nil || j.Jump.User != "ops" || j.Jump.KnownHostsFile != "/kh" || j.Jump.Port != 22 {
		t.Fatalf("jump: %+v %v", j.Jump, diags)
	}
	// A remote that names the provider's daemon is accepted.
	https := &Config{IncusAddress: "https://127.0.0.1:8443"}
	if _, diags := ResolveTarget(TransportBlocks{Incus: &IncusBlockModel{Instance: types.StringValue("c1"), Remote: types.StringValue("127.0.0.1:8443")}}, https); diags.HasError() {
		t.Fatalf("matching remote: %v", diags)
	}
}
