package acctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// accFlake is a flake with two node systems reached as nixosConfigurations are: a's
// module is a.nix in the flake, b's is b.nix in the `path:` input lib. Each is the lab's
// stand-in closure (the node family's testdata/node.nix, copied into the flake), its seed read from the
// module, handed the node plan through the fediversity-node-plan input.
const accFlake = `{
  inputs.fediversity-node-plan = { url = "path:./no-node-plan"; flake = false; };
  inputs.lib = { url = "path:LIB"; flake = false; };
  outputs = { self, fediversity-node-plan, lib }:
    let
      node = module: {
        config.system.build.toplevel = import ./node.nix {
          planFile = "${fediversity-node-plan}/node-plan.json";
          seed = "SEED " + import module;
          system = "x86_64-linux";
        };
      };
    in {
      nixosConfigurations.a = node ./a.nix;
      nixosConfigurations.b = node "${lib}/b.nix";
    };
}
`

// WriteFlake lays out accFlake in dir with its input in lib (the node and the image
// acceptance tests build from it).
func WriteFlake(t *testing.T, dir, lib, seed string) {
	t.Helper()
	node, err := os.ReadFile(filepath.Join(labtest.RepoRoot(t), "internal", "provider", "node", "testdata", "node.nix"))
	if err != nil {
		t.Fatal(err)
	}
	for file, content := range map[string]string{
		filepath.Join(dir, "flake.nix"):                      strings.NewReplacer("LIB", lib, "SEED", seed).Replace(accFlake),
		filepath.Join(dir, "node.nix"):                       string(node),
		filepath.Join(dir, "no-node-plan", "node-plan.json"): "null",
		filepath.Join(dir, "a.nix"):                          `"a-v1"`,
		filepath.Join(lib, "b.nix"):                          `"b-v1"`,
	} {
		WriteFile(t, file, content)
	}
}

// WriteFile writes content to file, making its directory.
func WriteFile(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
