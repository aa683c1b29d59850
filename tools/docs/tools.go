//go:build generate

// Package docs pins the documentation generator. `make generate` runs it. A module of
// its own, beside tools/release (goreleaser), so the generator's dependencies never
// reach the provider's go.mod.
package docs

import (
	_ "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs"
)

// Format the examples, then generate docs/ from the provider's schema, templates/ and examples/.
//go:generate terraform fmt -recursive ../../examples/
//go:generate go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate --provider-dir ../.. --provider-name fediversity
