package spire

// Lab tests of the engine against the real spire node of lab/spire/up.sh (spire-server
// v1.13.3 in a lab container), reached over the real SSH transport. They run when
// FEDIVERSITY_SPIRE=1 and fail when it is set but the spire node is not up.

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	sshtransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

func labServer(t *testing.T) (*Server, labtest.SpireNode) {
	t.Helper()
	sn := labtest.Spire(t)
	tr, err := sshtransport.New("spire", sshtransport.Config{Host: sn.SSHHost, Port: sn.SSHPort, HostKey: sn.HostKey, PrivateKeyFile: labtest.KeyFile()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return &Server{Runner: tr, Node: sn.Name}, sn
}

func labName(prefix string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%x", prefix, b)
}

// TestLabHandOffOnRealServer: the entries are made, kept and deleted through the real
// CLI; the generated k8s_psat clusters are accepted by the real server on reload.
func TestLabHandOffOnRealServer(t *testing.T) {
	s, sn := labServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := labName("lab")
	t.Cleanup(func() { _, _ = s.RetireHandOff(context.Background(), ns) })
	if err := s.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Second).UTC().Format("2006-01-02 15:04:05")
	ch, err := s.ApplyHandOff(ctx, HandOff{Namespace: ns, Nodes: []string{"a", "b"}}, []byte("apiVersion: v1\nkind: Config\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Created) != 4 {
		t.Fatalf("created %v", ch.Created)
	}
	st, err := s.ReadHandOff(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.RegisteredNodes(ns); strings.Join(got, ",") != "a,b" || !st.KubeConfig {
		t.Fatalf("registered %v, state %+v", got, st)
	}
	// Again: nothing changes (idempotent by entry ID).
	if ch, err = s.ApplyHandOff(ctx, HandOff{Namespace: ns, Nodes: []string{"a", "b"}}, []byte("apiVersion: v1\nkind: Config\n")); err != nil ||
		len(ch.Created)+len(ch.Updated)+len(ch.Deleted) != 0 {
		t.Fatalf("second apply: %+v %v", ch, err)
	}
	// Node a leaves: its entries and drop-file go.
	if ch, err = s.ApplyHandOff(ctx, HandOff{Namespace: ns, Nodes: []string{"b"}}, []byte("apiVersion: v1\nkind: Config\n")); err != nil || len(ch.Deleted) != 2 {
		t.Fatalf("removing a: %+v %v", ch, err)
	}
	// The server took the generated clusters: it reconfigured the attestor, without error.
	var journal string
	for i := 0; i < 20; i++ {
		journal, _ = labtest.IncusErr("exec", sn.Name, "--", "journalctl", "-u", "spire-server", "--no-pager", "--since", since)
		if strings.Contains(journal, "Plugin reconfigured") || strings.Contains(journal, "Failed to reconfigure") {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !strings.Contains(journal, "Plugin reconfigured") {
		t.Fatalf("spire-server did not reconfigure k8s_psat after the hand-off:\n%s", journal)
	}
	for _, line := range strings.Split(journal, "\n") {
		if strings.Contains(line, "Failed to reconfigure") {
			t.Fatalf("spire-server refused the generated clusters: %s", line)
		}
	}
	if _, err := s.RetireHandOff(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if st, err = s.ReadHandOff(ctx, ns); err != nil || st.KubeConfig || len(st.Nodes)+len(st.Entries) != 0 {
		t.Fatalf("after retire: %+v %v", st, err)
	}
}

func TestLabBundleMachineIDAndToken(t *testing.T) {
	s, _ := labServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := s.Bundle(ctx)
	if err != nil || !strings.HasPrefix(b, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("bundle %q %v", b, err)
	}
	id, err := s.MachineID(ctx)
	if err != nil || len(id) != 32 {
		t.Fatalf("machine id %q %v", id, err)
	}
	group := labName("g")
	tok, err := s.RegisterIncusNode(ctx, group, "n1", 60)
	if err != nil || len(tok) < 16 {
		t.Fatalf("register: %v", err)
	}
	reg, err := s.ReadIncusNode(ctx, group, "n1")
	if err != nil || !reg.AliasPresent || !reg.HostPresent || reg.agent != JoinTokenAgentID(tok) {
		t.Fatalf("read: %+v %v", reg, err)
	}
	if err := s.RetireIncusNode(ctx, group, "n1"); err != nil {
		t.Fatal(err)
	}
	if reg, err = s.ReadIncusNode(ctx, group, "n1"); err != nil || reg.AliasPresent || reg.HostPresent {
		t.Fatalf("after retire: %+v %v", reg, err)
	}
}
