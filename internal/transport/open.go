// Package transport is the one place where a node's target becomes its transport:
// both front ends (the provider and the fediversity command) open every node through
// Connections.Open, so a new transport is added here, once (docs/transports.md#transports).
// Each transport lives in its own package below (ssh, incus) and implements
// deploybody.Transport, mostly through the shared remote.Transport.
package transport

import (
	"fmt"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// Target kinds, as nodespec.Target.Kind names them.
const (
	KindSSH   = "ssh"
	KindIncus = "incus"
)

// Connections are what a front end's transports share (one SSH pool, one Incus
// client) and the per-run credentials, which never come from a node's spec.
type Connections struct {
	// SSH hands out one connection per SSH target; the front end closes it.
	SSH *ssh.Pool
	// Credentials are the per-run SSH key file and agent socket.
	Credentials nodespec.Credentials
	// Incus returns the front end's Incus client, made on its first use; its error
	// says, in the front end's words, how to connect.
	Incus func() (*incusapi.Client, error)
	// Log, if set, gives a node's SSH transport its progress log (dials, copy sizes,
	// switch polling; never secrets).
	Log func(node, kind string) remote.Logger
}

// Open is the transport of node's target (validated by nodespec). The caller closes
// it (a pooled SSH transport leaves the shared connection to the pool).
func (c *Connections) Open(node string, t nodespec.Target) (deploybody.Transport, error) {
	switch t.Kind {
	case KindSSH:
		if c.SSH == nil {
			return nil, fmt.Errorf("node %s: no SSH connection pool; this is a bug", node)
		}
		var log remote.Logger
		if c.Log != nil {
			log = c.Log(node, t.Kind)
		}
		return c.SSH.Transport(node, t.SSHConfig(c.Credentials), log)
	case KindIncus:
		if c.Incus == nil {
			return nil, fmt.Errorf("node %s: no Incus client; this is a bug", node)
		}
		client, err := c.Incus()
		if err != nil {
			return nil, err
		}
		cfg := incus.Config{Client: client, Instance: t.Instance, Project: t.Project, Node: node}
		if c.Log != nil {
			// The same progress lines as an SSH node's (the copy, the switch's polls): an
			// Incus node's deploy was silent in the debug log.
			cfg.Log = c.Log(node, t.Kind)
		}
		tr, err := incus.New(cfg)
		if err != nil {
			return nil, err
		}
		return tr, nil
	}
	return nil, fmt.Errorf("node %s: unknown transport %q", node, t.Kind)
}
