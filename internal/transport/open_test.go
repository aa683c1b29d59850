package transport

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// Open gives each target kind its own transport, dials nothing, and says what is
// wrong with a target it cannot open.
func TestOpen(t *testing.T) {
	// A socket file that is never dialled: opening a transport connects nothing.
	socket := filepath.Join(t.TempDir(), "incus.socket")
	if err := os.WriteFile(socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := &ssh.Pool{}
	defer func() { _ = pool.Close() }()
	logged := map[string]string{}
	c := &Connections{
		SSH:         pool,
		Credentials: nodespec.Credentials{AgentSocket: "/nonexistent/agent.sock"},
		Incus:       func() (*incusapi.Client, error) { return incusapi.NewUnix(socket) },
		Log: func(node, kind string) remote.Logger {
			logged[node] = kind
			return nil
		},
	}
	sshTarget := nodespec.Spec{SSH: &nodespec.SSH{Host: "127.0.0.1", Port: 2201, InsecureIgnoreHostKey: true}}.Target()
	tr, err := c.Open("n1", sshTarget)
	if err != nil {
		t.Fatalf("ssh target: %v", err)
	}
	if tr.Node() != "n1" || logged["n1"] != KindSSH {
		t.Fatalf("ssh transport of node %q, logged %v", tr.Node(), logged)
	}
	if _, ok := tr.(interface{ Client() *ssh.Client }); !ok {
		t.Fatalf("ssh target opened %T, want the SSH transport", tr)
	}
	tr, err = c.Open("n2", nodespec.Spec{Incus: &nodespec.Incus{Instance: "fedi-n2"}}.Target())
	if err != nil {
		t.Fatalf("incus target: %v", err)
	}
	if _, ok := tr.(*incus.Transport); !ok || tr.Node() != "n2" {
		t.Fatalf("incus target opened %T of node %q, want the Incus transport of n2", tr, tr.Node())
	}

	refused := errors.New("connect to the local Incus daemon (INCUS_SOCKET): refused")
	c.Incus = func() (*incusapi.Client, error) { return nil, refused }
	if tr, err := c.Open("n3", nodespec.Spec{Incus: &nodespec.Incus{Instance: "fedi-n3"}}.Target()); !errors.Is(err, refused) || tr != nil {
		t.Fatalf("an Incus client that cannot be made: transport %v, err %v; want no transport and the front end's error", tr, err)
	}
	if _, err := c.Open("n4", nodespec.Target{Kind: "carrier-pigeon"}); err == nil || !strings.Contains(err.Error(), `unknown transport "carrier-pigeon"`) || !strings.Contains(err.Error(), "n4") {
		t.Fatalf("unknown kind: err = %v, want one naming the node and the kind", err)
	}
}
