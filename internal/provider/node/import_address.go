package node

// The import address of fediversity_node_switch and fediversity_verdict.

import (
	"github.com/fediversity/terraform-provider-fediversity/internal/nodespec"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/kit"
)

// importAddress is a parsed import ID.
type importAddress struct {
	Node   string
	Target kit.TransportTarget
}

// parseImportAddress parses an import ID: a node's address in the node spec's schemes
// (nodespec.ParseAddress), one per transport.
func parseImportAddress(id string) (importAddress, error) {
	node, target, err := nodespec.ParseAddress(id)
	if err != nil {
		return importAddress{}, err
	}
	return importAddress{Node: node, Target: target}, nil
}
