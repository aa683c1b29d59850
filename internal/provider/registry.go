package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/resource"
)

// The objects this provider serves. Each object lives in its own file
// (resource_<name>.go, data_source_<name>.go) with its tests beside it.
func init() {
	dataSources = []func() datasource.DataSource{
		NewSubmissionDataSource,
		NewSpireTrustBundleDataSource,
	}
	resources = []func() resource.Resource{
		NewNodeSwitchResource,
		NewVerdictResource,
		NewImageResource, NewK8sNamespaceResource, NewK8sRolloutResource,
		NewIncusNodeResource,
		NewSpireHandoffResource, NewSpireRegistrationResource,
	}
}
