package spire

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

func TestResolveSpireNodeNamesTheBlock(t *testing.T) {
	cfg := &kit.Config{SSHPrivateKeyFile: "/k"}
	_, diags := resolveSpireNode(nil, cfg)
	if !diags.HasError() || !strings.Contains(diags[0].Detail(), "spire_node.host") {
		t.Fatalf("missing block: %v", diags)
	}
	_, diags = resolveSpireNode(&spireNodeModel{Host: types.StringValue("spire.example.org")}, cfg)
	if !diags.HasError() {
		t.Fatal("an unpinned host key must be refused")
	}
	d, ok := diags[0].(diag.DiagnosticWithPath)
	if !ok || d.Path().String() != "spire_node" || !strings.Contains(d.Detail(), "spire_node.host_key") || strings.Contains(d.Detail(), " ssh.") {
		t.Fatalf("want the error on spire_node naming spire_node.host_key, got %v", diags)
	}
	sn, diags := resolveSpireNode(&spireNodeModel{Host: types.StringValue("spire.example.org"), HostKey: types.StringValue("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3Cj0aK1mO4vVq7bWJm7pS9xXcG2d0dTq0m4Q1fG7kD")}, cfg)
	if diags.HasError() || sn.target.Port != 22 || sn.target.User != "root" {
		t.Fatalf("defaults: %+v %v", sn.target, diags)
	}
}

func TestRosterWithSpiffeProviderNamesTheGroup(t *testing.T) {
	m := spireHandoffModel{Namespace: types.StringValue("shop-prod"), Group: types.StringValue("shop"),
		Roster: map[string][]string{"web01": {"nginx"}, "auth01": {"openbao", "spiffe"}}}
	var diags diag.Diagnostics
	m.checkRoster(&diags)
	if !diags.HasError() || !strings.Contains(diags[0].Summary(), "group shop") || !strings.Contains(diags[0].Detail(), "auth01") {
		t.Fatalf("%v", diags)
	}
	diags = nil
	m.Roster = map[string][]string{"web01": {"nginx"}}
	m.checkRoster(&diags)
	if diags.HasError() {
		t.Fatalf("a roster without spiffe refused: %v", diags)
	}
}
