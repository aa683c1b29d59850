package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

func TestParseImportAddress(t *testing.T) {
	cases := []struct {
		id      string
		node    string
		want    kit.TransportTarget
		wantErr string
	}{
		{id: "ssh://root@127.0.0.1:2201/fedi-n1", node: "fedi-n1",
			want: kit.TransportTarget{Kind: "ssh", Host: "127.0.0.1", Port: 2201, User: "root", Keepalive: kit.DefaultKeepalive}},
		{id: "ssh://web.example.org/web01", node: "web01",
			want: kit.TransportTarget{Kind: "ssh", Host: "web.example.org", Port: 22, User: "root", Keepalive: kit.DefaultKeepalive}},
		{id: "ssh://deploy@[::1]:2222/n1", node: "n1",
			want: kit.TransportTarget{Kind: "ssh", Host: "::1", Port: 2222, User: "deploy", Keepalive: kit.DefaultKeepalive}},
		{id: "ssh://root@127.0.0.1:2201/fedi-n1?known_hosts_file=/var/lib/fediversity-lab/known_hosts", node: "fedi-n1",
			want: kit.TransportTarget{Kind: "ssh", Host: "127.0.0.1", Port: 2201, User: "root", Keepalive: kit.DefaultKeepalive, KnownHostsFile: "/var/lib/fediversity-lab/known_hosts"}},
		{id: "ssh://h/n?host_key=ssh-ed25519%20AAAAC3%2B%2F%3D", node: "n",
			want: kit.TransportTarget{Kind: "ssh", Host: "h", Port: 22, User: "root", Keepalive: kit.DefaultKeepalive, HostKey: "ssh-ed25519 AAAAC3+/="}},
		{id: "incus://local/default/fedi-n2", node: "fedi-n2",
			want: kit.TransportTarget{Kind: "incus", Remote: "local", Project: "default", Instance: "fedi-n2"}},
		{id: "incus:///tenants/web-1", node: "web-1",
			want: kit.TransportTarget{Kind: "incus", Remote: "local", Project: "tenants", Instance: "web-1"}},
		{id: "incus://10.0.0.1:8443/default/c1/web01", node: "web01",
			want: kit.TransportTarget{Kind: "incus", Remote: "10.0.0.1:8443", Project: "default", Instance: "c1"}},

		{id: "ssh://root@host:22/", wantErr: "exactly one node name"},
		{id: "ssh://root@host:22/a/b", wantErr: "exactly one node name"},
		{id: "ssh:///n1", wantErr: "names no host"},
		{id: "ssh://root:hunter2@host/n1", wantErr: "carries a password"},
		{id: "ssh://root@host:99999/n1", wantErr: "port"},
		{id: "ssh://root@host/n1?identity_file=/k", wantErr: "unknown parameter"},
		{id: "incus://local/default", wantErr: "project/instance"},
		{id: "incus://local/default/c1?host_key=x", wantErr: "unknown parameter"},
		{id: "incus://u@local/default/c1", wantErr: "carries no user"},
		{id: "incus://local/default/bad;name", wantErr: "not a valid"},
		{id: "http://host/n1", wantErr: "unknown scheme"},
		{id: "fedi-n1", wantErr: "unknown scheme"},
		{id: "ssh://host/n1#frag", wantErr: "fragment"},
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			got, err := parseImportAddress(c.id)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("parseImportAddress(%q) error = %v, want one containing %q", c.id, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseImportAddress(%q): %v", c.id, err)
			}
			if got.Node != c.node || fmt.Sprintf("%+v", got.Target) != fmt.Sprintf("%+v", c.want) {
				t.Fatalf("parseImportAddress(%q) = %q %+v, want %q %+v", c.id, got.Node, got.Target, c.node, c.want)
			}
		})
	}
}

// The address a target prints parses back to the same target.
func TestImportAddressRoundTrip(t *testing.T) {
	for _, tt := range []kit.TransportTarget{
		{Kind: "ssh", Host: "127.0.0.1", Port: 2201, User: "root", Keepalive: kit.DefaultKeepalive},
		{Kind: "ssh", Host: "::1", Port: 22, User: "admin", Keepalive: kit.DefaultKeepalive},
		{Kind: "incus", Remote: "local", Project: "default", Instance: "fedi-n1"},
	} {
		node := "fedi-n1"
		addr := tt.Address(node)
		got, err := parseImportAddress(addr)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if got.Node != node || fmt.Sprintf("%+v", got.Target) != fmt.Sprintf("%+v", tt) {
			t.Fatalf("%s parsed to %q %+v, want %+v", addr, got.Node, got.Target, tt)
		}
	}
}

func FuzzParseImportAddress(f *testing.F) {
	for _, s := range []string{"ssh://root@127.0.0.1:2201/fedi-n1", "incus://local/default/c1", "ssh://h/n?host_key=a%20b", "incus:///p/i/n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		got, err := parseImportAddress(id)
		if err != nil {
			return
		}
		// Whatever parses names a valid node and a complete target.
		if !nodespec.ValidNodeName(got.Node) {
			t.Fatalf("%q gave node %q", id, got.Node)
		}
		switch got.Target.Kind {
		case "ssh":
			if got.Target.Host == "" || got.Target.Port < 1 || got.Target.Port > 65535 || got.Target.User == "" {
				t.Fatalf("%q gave incomplete ssh target %+v", id, got.Target)
			}
		case "incus":
			if !nodespec.ValidNodeName(got.Target.Instance) || !nodespec.ValidNodeName(got.Target.Project) {
				t.Fatalf("%q gave incomplete incus target %+v", id, got.Target)
			}
		default:
			t.Fatalf("%q gave kind %q", id, got.Target.Kind)
		}
	})
}
