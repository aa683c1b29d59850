package node

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// A node's transport and build blocks redeploy it when a value in them changes, and
// only then: the same values in new framework values (the plan's, the state's) are the
// same block; a null and an empty string, an unknown and a known value, one more build
// argument, or a changed jump host are not.
func TestSameBlock(t *testing.T) {
	ssh := func(edit func(*kit.SSHBlockModel)) *kit.SSHBlockModel {
		m := &kit.SSHBlockModel{Host: types.StringValue("10.0.0.5"), Port: types.Int64Value(22), User: types.StringNull(),
			HostKey: types.StringValue(specTestKey), KnownHostsFile: types.StringNull(), InsecureIgnoreHostKey: types.BoolNull(),
			Keepalive: types.StringNull(), RevertOnLockout: types.BoolNull(), Sudo: types.BoolValue(false),
			Jump: &kit.JumpHostModel{Host: types.StringValue("bastion"), Port: types.Int64Null(), User: types.StringNull(),
				HostKey: types.StringValue(specTestKey), KnownHostsFile: types.StringNull()}}
		if edit != nil {
			edit(m)
		}
		return m
	}
	args := func(kv ...string) types.Map {
		m := map[string]attr.Value{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = types.StringValue(kv[i+1])
		}
		return types.MapValueMust(types.StringType, m)
	}
	build := func(a types.Map) *kit.BuildModel {
		return &kit.BuildModel{Flake: types.StringNull(), Installable: types.StringNull(), File: types.StringValue("nodes.nix"),
			Attribute: types.StringValue("web01"), Expression: types.StringNull(), Args: a}
	}
	incus := func(project types.String) *kit.IncusBlockModel {
		return &kit.IncusBlockModel{Instance: types.StringValue("web01"), Project: project, Remote: types.StringNull()}
	}
	for _, c := range []struct {
		name string
		same bool
		got  bool
	}{
		{"both absent", true, sameBlock[kit.SSHBlockModel](nil, nil)},
		{"one absent", false, sameBlock(nil, ssh(nil))},
		{"the same values", true, sameBlock(ssh(nil), ssh(nil))},
		{"another jump host", false, sameBlock(ssh(nil), ssh(func(m *kit.SSHBlockModel) { m.Jump.Host = types.StringValue("bastion2") }))},
		{"the jump host removed", false, sameBlock(ssh(nil), ssh(func(m *kit.SSHBlockModel) { m.Jump = nil }))},
		{"a null user and an empty one", false, sameBlock(ssh(nil), ssh(func(m *kit.SSHBlockModel) { m.User = types.StringValue("") }))},
		{"a port known only at apply", false, sameBlock(ssh(nil), ssh(func(m *kit.SSHBlockModel) { m.Port = types.Int64Unknown() }))},
		{"sudo turned on", false, sameBlock(ssh(nil), ssh(func(m *kit.SSHBlockModel) { m.Sudo = types.BoolValue(true) }))},
		{"the same build arguments", true, sameBlock(build(args("a", "1", "b", "2")), build(args("b", "2", "a", "1")))},
		{"one more build argument", false, sameBlock(build(args("a", "1")), build(args("a", "1", "b", "2")))},
		{"no build arguments and an empty map", false, sameBlock(build(types.MapNull(types.StringType)), build(args()))},
		{"the same instance", true, sameBlock(incus(types.StringValue("tenants")), incus(types.StringValue("tenants")))},
		{"another project", false, sameBlock(incus(types.StringValue("tenants")), incus(types.StringNull()))},
	} {
		if c.got != c.same {
			t.Errorf("%s: sameBlock = %v, want %v", c.name, c.got, c.same)
		}
	}
}
