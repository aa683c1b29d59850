package fleet

import (
	"fmt"
	"sync"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	incustransport "github.com/fediversity/terraform-provider-fediversity/internal/transport/incus"
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

// open is the transport of node's target (validated by LoadRoster and Plan).
func (c *connections) open(node string, t nodespec.Target, creds Credentials) (deploybody.Transport, error) {
	if t.Kind == "incus" {
		c.incusOnce.Do(func() { c.incus, c.incusErr = incusapi.NewFromEnv() })
		if c.incusErr != nil {
			return nil, fmt.Errorf("connect to the local Incus daemon (INCUS_SOCKET): %w", c.incusErr)
		}
		return incustransport.New(incustransport.Config{Client: c.incus, Instance: t.Instance, Project: t.Project, Node: node})
	}
	return c.ssh.Transport(node, t.SSHConfig(creds), nil)
}

func (c *connections) close() { _ = c.ssh.Close() }
