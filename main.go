// Command terraform-provider-fediversity serves the fediversity provider to OpenTofu
// and Terraform over plugin protocol 6.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/fediversity/terraform-provider-fediversity/internal/provider"
)

// version is set by goreleaser.
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers like delve")
	flag.Parse()
	quietLogsNobodyReads()

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/fediversity/fediversity",
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
