package provider

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

func TestParseImportAddress(t *testing.T) {
	cases := []struct {
		id      string
		node    string
		want    transportTarget
		wantErr string
	}{
		{id: "ssh://root@127.0.0.1:2201/fedi-n1", node: "fedi-n1",
			want: transportTarget{Kind: "ssh", Host: "127.0.0.1", Port: 2201, User: "root", Keepalive: defaultKeepalive}},
		{id: "ssh://web.example.org/web01", node: "web01",
			want: transportTarget{Kind: "ssh", Host: "web.example.org", Port: 22, User: "root", Keepalive: defaultKeepalive}},
		{id: "ssh://deploy@[::1]:2222/n1", node: "n1",
			want: transportTarget{Kind: "ssh", Host: "::1", Port: 2222, User: "deploy", Keepalive: defaultKeepalive}},
		{id: "ssh://root@127.0.0.1:2201/fedi-n1?known_hosts_file=/var/lib/fediversity-lab/known_hosts", node: "fedi-n1",
			want: transportTarget{Kind: "ssh", Host: "127.0.0.1", Port: 2201, User: "root", Keepalive: defaultKeepalive, KnownHostsFile: "/var/lib/fediversity-lab/known_hosts"}},
		{id: "ssh://h/n?host_key=ssh-ed25519%20AAAAC3%2B%2F%3D", node: "n",
			want: transportTarget{Kind: "ssh", Host: "h", Port: 22, User: "root", Keepalive: defaultKeepalive, HostKey: "ssh-ed25519 AAAAC3+/="}},
		{id: "incus://local/default/fedi-n2", node: "fedi-n2",
			want: transportTarget{Kind: "incus", Remote: "local", Project: "default", Instance: "fedi-n2"}},
		{id: "incus:///tenants/web-1", node: "web-1",
			want: transportTarget{Kind: "incus", Remote: "local", Project: "tenants", Instance: "web-1"}},
		{id: "incus://10.0.0.1:8443/default/c1/web01", node: "web01",
			want: transportTarget{Kind: "incus", Remote: "10.0.0.1:8443", Project: "default", Instance: "c1"}},

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
	for _, tt := range []transportTarget{
		{Kind: "ssh", Host: "127.0.0.1", Port: 2201, User: "root", Keepalive: defaultKeepalive},
		{Kind: "ssh", Host: "::1", Port: 22, User: "admin", Keepalive: defaultKeepalive},
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
		if !validNodeName(got.Node) {
			t.Fatalf("%q gave node %q", id, got.Node)
		}
		switch got.Target.Kind {
		case "ssh":
			if got.Target.Host == "" || got.Target.Port < 1 || got.Target.Port > 65535 || got.Target.User == "" {
				t.Fatalf("%q gave incomplete ssh target %+v", id, got.Target)
			}
		case "incus":
			if !validNodeName(got.Target.Instance) || !validNodeName(got.Target.Project) {
				t.Fatalf("%q gave incomplete incus target %+v", id, got.Target)
			}
		default:
			t.Fatalf("%q gave kind %q", id, got.Target.Kind)
		}
	})
}

func TestResolveTarget(t *testing.T) {
	cfg := &Config{IncusSocket: "/var/lib/incus/unix.socket", IncusProject: "tenants"}
	sshB := &sshBlockModel{Host: types.StringValue("127.0.0.1"), HostKey: types.StringValue("ssh-ed25519 AAAA")}

	got, diags := resolveTarget(sshB, nil, cfg)
	if diags.HasError() {
		t.Fatalf("ssh: %v", diags)
	}
	if got.Port != 22 || got.User != "root" || got.Keepalive != defaultKeepalive {
		t.Fatalf("ssh defaults: %+v", got)
	}

	got, diags = resolveTarget(nil, &incusBlockModel{Instance: types.StringValue("c1")}, cfg)
	if diags.HasError() || got.Project != "tenants" || got.Remote != "local" {
		t.Fatalf("incus defaults: %+v %v", got, diags)
	}

	bad := []struct {
		name  string
		ssh   *sshBlockModel
		incus *incusBlockModel
		want  string
	}{
		{"neither", nil, nil, "Exactly one transport block"},
		{"both", sshB, &incusBlockModel{Instance: types.StringValue("c1")}, "Exactly one transport block"},
		{"unpinned", &sshBlockModel{Host: types.StringValue("h")}, nil, "No pinned host key"},
		{"no host", &sshBlockModel{HostKey: types.StringValue("k")}, nil, "Missing SSH host"},
		{"bad keepalive", &sshBlockModel{Host: types.StringValue("h"), HostKey: types.StringValue("k"), Keepalive: types.StringValue("soon")}, nil, "Invalid duration"},
		{"no instance", nil, &incusBlockModel{}, "Missing Incus instance"},
		{"foreign remote", nil, &incusBlockModel{Instance: types.StringValue("c1"), Remote: types.StringValue("https://10.1.1.1:8443")}, "does not match"},
	}
	for _, b := range bad {
		_, diags := resolveTarget(b.ssh, b.incus, cfg)
		if !diags.HasError() || !strings.Contains(summarizeDiags(diags), b.want) {
			t.Errorf("%s: diags %v, want an error containing %q", b.name, diags, b.want)
		}
	}

	// The insecure switch is explicit and accepted.
	if _, diags := resolveTarget(&sshBlockModel{Host: types.StringValue("h"), InsecureIgnoreHostKey: types.BoolValue(true)}, nil, cfg); diags.HasError() {
		t.Fatalf("insecure_ignore_host_key: %v", diags)
	}
	// A jump host inherits user and known_hosts.
	j, diags := resolveTarget(&sshBlockModel{Host: types.StringValue("h"), User: types.StringValue("ops"), KnownHostsFile: types.StringValue("/kh"),
		Jump: &jumpHostModel{Host: types.StringValue("bastion")}}, nil, cfg)
	if diags.HasError() || j.Jump == nil || j.Jump.User != "ops" || j.Jump.KnownHostsFile != "/kh" || j.Jump.Port != 22 {
		t.Fatalf("jump: %+v %v", j.Jump, diags)
	}
	// A remote that names the provider's daemon is accepted.
	https := &Config{IncusAddress: "https://127.0.0.1:8443"}
	if _, diags := resolveTarget(nil, &incusBlockModel{Instance: types.StringValue("c1"), Remote: types.StringValue("127.0.0.1:8443")}, https); diags.HasError() {
		t.Fatalf("matching remote: %v", diags)
	}
}

func TestParseGenerationLink(t *testing.T) {
	for in, want := range map[string]int{
		"system-12-link": 12, "/nix/var/nix/profiles/system-3-link": 3, "system": 0,
		"system-x-link": 0, "": 0, "/nix/store/abc-nixos-system": 0, "system--1-link": 0,
	} {
		if got := parseGenerationLink(in); got != want {
			t.Errorf("parseGenerationLink(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestUnreachableAfterSwitch(t *testing.T) {
	switched := []deploybody.PhaseTiming{{Name: deploybody.PhaseWaitForNode}, {Name: deploybody.PhaseSwitch}}
	notSwitched := []deploybody.PhaseTiming{{Name: deploybody.PhaseWaitForNode}}
	unreach := &deploybody.DeployError{Node: "n", Phase: deploybody.PhaseWatch, Err: fmt.Errorf("gone: %w", deploybody.ErrUnreachable)}
	failedUnit := &deploybody.DeployError{Node: "n", Phase: deploybody.PhaseVerdict, Err: errors.New("unit failed")}
	cases := []struct {
		name string
		res  *deploybody.Result
		err  error
		want bool
	}{
		{"unreachable before switch", &deploybody.Result{Phases: notSwitched}, unreach, false},
		{"unreachable after switch", &deploybody.Result{Phases: switched}, unreach, true},
		{"verdict says unreachable", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{Unreachable: true}}, failedUnit, true},
		// FR-004: a failed unit keeps its new boot entry; it is never restored.
		{"failed unit", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{Failed: []deploybody.FailedUnit{{Unit: "a.service"}}}}, failedUnit, false},
		{"success", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{OK: true}}, nil, false},
		{"nil", nil, unreach, false},
	}
	for _, c := range cases {
		if got := unreachableAfterSwitch(c.res, c.err); got != c.want {
			t.Errorf("%s: unreachableAfterSwitch = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTimingsMergeAndDefaults(t *testing.T) {
	cfg := &Config{Timings: Timings{Settle: 3 * time.Second, Watch: 20 * time.Second}}
	own := &timingsModel{Settle: types.StringValue("1s")}
	o, diags := commonBodyOptions(t.Context(), cfg, "n1", types.BoolNull(), types.ListNull(types.StringType), types.MapNull(types.Int64Type), own)
	if diags.HasError() {
		t.Fatal(diags)
	}
	if o.Timings.Settle != time.Second || o.Timings.Watch != 20*time.Second || o.Timings.NodeWait != deploybody.DefaultNodeWait {
		t.Fatalf("resource > provider > default: %+v", o.Timings)
	}
	if !o.Strict {
		t.Fatal("strict must default to true")
	}
	_, diags = commonBodyOptions(t.Context(), cfg, "n1", types.BoolNull(),
		types.ListValueMust(types.StringType, []attr.Value{types.StringValue("ok.service"), types.StringValue("$(rm -rf /)")}),
		types.MapValueMust(types.Int64Type, map[string]attr.Value{"a.service": types.Int64Value(-1)}), nil)
	msg := summarizeDiags(diags)
	if !strings.Contains(msg, "Invalid unit name") || !strings.Contains(msg, "Invalid loop budget") {
		t.Fatalf("bad chain and budget must be refused: %s", msg)
	}
}

// After the switch, any failure except a verdict the node answered is probed for
// reachability; a failed unit never is (FR-004 keeps its new boot entry).
func TestMayBeUnreachable(t *testing.T) {
	switched := []deploybody.PhaseTiming{{Name: deploybody.PhaseSwitch}}
	verdictErr := &deploybody.DeployError{Node: "n", Phase: deploybody.PhaseVerdict, Err: errors.New("unit failed")}
	watchErr := &deploybody.DeployError{Node: "n", Phase: deploybody.PhaseRestartFailedUnits, Err: errors.New("500: Failed to retrieve PID")}
	cases := []struct {
		name string
		res  *deploybody.Result
		err  error
		want bool
	}{
		{"failed unit", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{Failed: []deploybody.FailedUnit{{Unit: "a.service"}}}}, verdictErr, false},
		{"error after the switch", &deploybody.Result{Phases: switched}, watchErr, true},
		{"no error", &deploybody.Result{Phases: switched, Verdict: &deploybody.Verdict{OK: true}}, nil, false},
		{"error before the switch", &deploybody.Result{}, watchErr, false},
		{"skipped switch (verdict-only)", &deploybody.Result{Phases: []deploybody.PhaseTiming{{Name: deploybody.PhaseSwitch, Note: "skipped: verdict-only"}}}, watchErr, false},
	}
	for _, c := range cases {
		if got := mayBeUnreachable(c.res, c.err); got != c.want {
			t.Errorf("%s: mayBeUnreachable = %v, want %v", c.name, got, c.want)
		}
	}
}
