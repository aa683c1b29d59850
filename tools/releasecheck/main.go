// Command releasecheck checks a goreleaser dist directory against what the Terraform and
// OpenTofu registries take from a provider release:
//
//   - one zip per platform built, named <project>_<version>_<os>_<arch>.zip, holding
//     exactly one file: the binary <project>_v<version>, executable, built for that
//     platform (ELF or Mach-O of the right machine);
//   - <project>_<version>_SHA256SUMS, listing every zip and the manifest with the sums
//     of the files beside it;
//   - <project>_<version>_manifest.json beside them, equal to the repository's
//     terraform-registry-manifest.json and naming plugin protocol 6.0;
//   - a version the registries accept (semantic, no leading v).
//
// The signature (<project>_<version>_SHA256SUMS.sig) is required only with -signed; a
// snapshot is not signed.
//
//	releasecheck [-signed] [-manifest terraform-registry-manifest.json] dist
//
// It prints one line per file it checked and exits non-zero, naming every problem, when
// the release is not one a registry would take.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	signed := flag.Bool("signed", false, "require the detached signature of the SHA256SUMS file")
	manifest := flag.String("manifest", "terraform-registry-manifest.json", "the repository's registry manifest")
	project := flag.String("project", "terraform-provider-fediversity", "the project (and binary) name")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: releasecheck [-signed] [-manifest FILE] [-project NAME] DIST")
		os.Exit(2)
	}
	report, problems := Check(flag.Arg(0), *project, *manifest, *signed)
	for _, line := range report {
		fmt.Println(line)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "\nthe release in %s is not one a registry takes:\n", flag.Arg(0))
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "  -", p)
		}
		os.Exit(1)
	}
	fmt.Println("release layout ok for the Terraform and OpenTofu registries")
}
