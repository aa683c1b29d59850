package ssh

import (
	"fmt"
	"sync"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// Transport is the SSH deploybody.Transport of one node.
type Transport struct {
	*remote.Transport
	client *Client
}

var _ deploybody.Transport = (*Transport)(nil)

// New returns the transport of node over SSH. Nothing is dialled until the first call.
// log (may be nil) receives progress: dials, copy sizes, switch polling; never secrets.
func New(node string, cfg Config, log remote.Logger) (*Transport, error) {
	c, err := NewClient(cfg, log)
	if err != nil {
		return nil, err
	}
	return newTransport(node, c, cfg, log), nil
}

func newTransport(node string, c *Client, cfg Config, log remote.Logger) *Transport {
	rt := remote.NewTransport(node, c, log)
	rt.Sudo = cfg.Sudo
	return &Transport{Transport: rt, client: c}
}

// Client is the node's connection (a remote.Runner).
func (t *Transport) Client() *Client { return t.client }

// Dials counts the connections the node's client has made (remote.Redials).
func (t *Transport) Dials() uint64 { return t.client.Dials() }

// Pool hands out one Client per target (user, host, port, jump chain), so every
// resource of one node shares its connection. The zero value is ready to use.
type Pool struct {
	mu      sync.Mutex
	clients map[string]*Client
}

// Transport returns a transport for node whose connection is shared with every other
// transport the pool gave out for the same target. Close the pool, not the transports.
func (p *Pool) Transport(node string, cfg Config, log remote.Logger) (deploybody.Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key := poolKey(cfg)
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.clients[key]
	if c == nil {
		var err error
		if c, err = NewClient(cfg, log); err != nil {
			return nil, err
		}
		if p.clients == nil {
			p.clients = map[string]*Client{}
		}
		p.clients[key] = c
	} else {
		c.SetLogger(log)
	}
	return pooled{newTransport(node, c, cfg, log)}, nil
}

// Close closes every connection of the pool.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, c := range p.clients {
		_ = c.Close()
		delete(p.clients, k)
	}
	return nil
}

// pooled leaves the shared connection open on Close: the pool owns it.
type pooled struct{ *Transport }

func (pooled) Close() error { return nil }

// poolKey is everything that decides which connection is made and how it is trusted:
// two configs that differ in host key or credentials never share a connection.
func poolKey(c Config) string {
	k := fmt.Sprintf("%s|%q|%q|%v|%q|%q|%d|%d", c, c.HostKey, c.KnownHostsFile, c.InsecureIgnoreHostKey,
		c.PrivateKeyFile, c.AgentSocket, c.Keepalive, c.ConnectTimeout)
	if c.Jump != nil {
		k += " jump{" + poolKey(*c.Jump) + "}"
	}
	return k
}
