//go:build generate

// Package tools pins the documentation generator. `make generate` runs it.
package tools

import (
	_ "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs"
)

// Format the examples, then generate docs/ from the provider's schema, templates/ and examples/.
//go:generate terraform fmt -recursive ../examples/
//go:generate go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate --provider-dir .. --provider-name fediversity
