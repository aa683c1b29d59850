package spire

import (
	"context"
	"fmt"
	"strings"
)

// Registration of an Incus node of a tf-incus-operator group.
//
// Attestor: join_token. The provider already reaches every Incus node through its own
// transport (the Incus API or SSH), so it can hand the node a one-time credential
// without any other trust anchor: a token is made on the spire node, read into memory,
// and written to the node through stdin (never an argument, never the state). The token
// is single use and dies after its TTL (default 10 minutes), so a leaked copy after the
// first attestation is worthless. After that the agent keeps its identity by renewing its
// own SVID from its data directory; an agent that lost that directory, or was off for
// longer than its SVID lives, is registered again by replacing the registration (taint
// or `-replace`), which makes and delivers a fresh token. x509pop or sshpop would let an
// agent attest again on its own, but need a CA of node certificates whose key would have
// to live somewhere the deployer reaches; that is a larger change than this lane needs.

// IncusAliasID is the stable node alias of an Incus node: its host entry is parented to
// it, so the host entry does not change when a new token is delivered.
func IncusAliasID(group, node string) string {
	return fmt.Sprintf("spiffe://%s/incus/%s/node-%s", TrustDomain, group, node)
}

// IncusEntryPrefix is the entry ID prefix of one registered Incus node.
func IncusEntryPrefix(group, node string) string {
	return "fediversity.incus." + group + "." + node + "."
}

// JoinTokenAgentID is the agent ID a join token attests as.
func JoinTokenAgentID(token string) string {
	return "spiffe://" + TrustDomain + "/spire/agent/join_token/" + token
}

// IncusEntries are the entries of one Incus node attested with the token: the alias,
// parented to the token's agent ID, and the host entry parented to the alias.
func IncusEntries(group, node, token string) []Entry {
	p := IncusEntryPrefix(group, node)
	agent := JoinTokenAgentID(token)
	return []Entry{
		{ID: p + "alias", SpiffeID: IncusAliasID(group, node), ParentID: agent, Selectors: []string{"spiffe_id:" + agent}},
		{ID: p + "host", SpiffeID: HostID(group, node), ParentID: IncusAliasID(group, node), Selectors: []string{HostSelector}},
	}
}

// RegisterIncusNode makes a join token and the node's entries, and returns the token for
// delivery to the node. The caller must not keep or print it.
func (s *Server) RegisterIncusNode(ctx context.Context, group, node string, ttlSeconds int) (string, error) {
	tok, err := s.JoinToken(ctx, ttlSeconds)
	if err != nil {
		return "", err
	}
	if _, err := s.Reconcile(ctx, IncusEntryPrefix(group, node), IncusEntries(group, node, tok)); err != nil {
		return "", err
	}
	return tok, nil
}

// IncusRegistration is what the server holds for one Incus node.
type IncusRegistration struct {
	AliasPresent, HostPresent bool
	// Agent is the agent the alias maps (the token's agent ID). Not a secret once the
	// token was used, but still not for state: it names the token.
	agent string
}

// ReadIncusNode reads the node's entries.
func (s *Server) ReadIncusNode(ctx context.Context, group, node string) (IncusRegistration, error) {
	es, err := s.OwnedEntries(ctx, IncusEntryPrefix(group, node))
	if err != nil {
		return IncusRegistration{}, err
	}
	var r IncusRegistration
	for _, e := range es {
		switch {
		case strings.HasSuffix(e.ID, ".alias") && e.SpiffeID == IncusAliasID(group, node):
			r.AliasPresent, r.agent = true, e.ParentID
		case strings.HasSuffix(e.ID, ".host") && e.SpiffeID == HostID(group, node) && e.ParentID == IncusAliasID(group, node):
			r.HostPresent = true
		}
	}
	return r, nil
}

// RetireIncusNode evicts the node's agent and deletes its entries.
func (s *Server) RetireIncusNode(ctx context.Context, group, node string) error {
	r, err := s.ReadIncusNode(ctx, group, node)
	if err != nil {
		return err
	}
	if r.agent != "" {
		if err := s.EvictAgent(ctx, r.agent); err != nil {
			return err
		}
	}
	_, err = s.Reconcile(ctx, IncusEntryPrefix(group, node), nil)
	return err
}
