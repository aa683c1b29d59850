package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider/k8s"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/node"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/spire"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/submission"
)

// The objects this provider serves. Each object lives in its own file
// (resource_<name>.go, data_source_<name>.go) with its tests beside it.
func init() {
	dataSources = []func() datasource.DataSource{
		submission.NewSubmissionDataSource,
		spire.NewSpireTrustBundleDataSource,
		node.NewNodeHealthDataSource,
	}
	resources = []func() resource.Resource{
		node.NewNodeSwitchResource,
		node.NewVerdictResource, node.NewRolloutGateResource,
		k8s.NewImageResource, k8s.NewK8sNamespaceResource, k8s.NewK8sRolloutResource,
		node.NewIncusNodeResource, node.NewIncusImageResource, node.NewIncusTenantResource,
		spire.NewSpireHandoffResource, spire.NewSpireRegistrationResource,
	}
}
