package kit

import (
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// The values of the `deploy` attribute, which fediversity_node_switch and
// fediversity_k8s_rollout share (and the group modules' `deploy` variable passes on):
// the same words mean the same thing in every method, as in `fediversity rollback --to
// last-good`.
const (
	// DeployConfigured deploys what the configuration gives (the default, also when
	// unset).
	DeployConfigured = "configured"
	// DeployLastGood deploys the node's last good system (a NixOS node: the toplevel of
	// its last clean verdict; a k8s node: the last pod template seen ready) instead.
	DeployLastGood = "last-good"
)

// DeployValidators accept the values of `deploy`.
var DeployValidators = []validator.String{stringvalidator.OneOf(DeployConfigured, DeployLastGood)}
