// Command terraform-provider-fediversity serves the fediversity provider to OpenTofu
// and Terraform over plugin protocol 6.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"runtime/debug"

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
	lowerGCTarget()

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/fediversity/fediversity",
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}

// lowerGCTarget collects garbage when the heap has grown by half since the last
// collection, not doubled (Go's default, GOGC=100). About 46 MB of the provider's RSS are
// its binary's own pages, so the heap's growth decides whether a group stays under 64
// MiB: `lab/bench-fleet.sh 16` peaked at 66 MiB with the default and at 60 MiB with
// GOGC=50, the extra collections costing little next to the nodes' work. A GOGC the
// operator sets wins.
func lowerGCTarget() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
}
