package fleet

import (
	"fmt"
	"sync"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport"
	sshtransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/ssh"
)

// connections are a group run's connections, shared by its nodes: one SSH pool, and
// one client of the local Incus daemon, made when the first Incus node needs it.
type connections struct {
	ssh *sshtransport.Pool

	incusOnce sync.Once
	incus     *incusapi.Client
	incusErr  error
}

// open is the transport of node's target (validated by LoadRoster and Plan), opened
// where every front end opens its nodes (transport.Connections).
func (c *connections) open(node string, t nodespec.Target, creds Credentials) (deploybody.Transport, error) {
	opener := transport.Connections{SSH: c.ssh, Credentials: creds, Incus: c.incusClient}
	return opener.Open(node, t)
}

// incusClient is the local daemon's client, made on first use.
func (c *connections) incusClient() (*incusapi.Client, error) {
	c.incusOnce.Do(func() { c.incus, c.incusErr = incusapi.NewFromEnv() })
	if c.incusErr != nil {
		return nil, fmt.Errorf("connect to the local Incus daemon (INCUS_SOCKET): %w", c.incusErr)
	}
	return c.incus, nil
}

func (c *connections) close() { _ = c.ssh.Close() }
