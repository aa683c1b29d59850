//go:build tools

// Package release pins goreleaser, which `make release-snapshot` runs.
package release

import _ "github.com/goreleaser/goreleaser/v2"
