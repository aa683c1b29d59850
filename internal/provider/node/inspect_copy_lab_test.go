package node_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// inspectCopyConfig is a container with a data volume that goes with it on destroy, and
// a snapshot-guarded deploy of testdata/node.nix with args onto it.
func inspectCopyConfig(name, args string) string {
	return acctest.Config(acctest.LabProvider() + fmt.Sprintf(`
resource "fediversity_incus_node" "c" {
  name      = %q
  image     = %q
  node_wait = "60s"
  data_volume {
    delete_on_destroy = true
  }
}

resource "fediversity_node_switch" "n" {
  node = "web01"
  build {
    file = %q
    args = %s
  }
  incus {
    instance = fediversity_incus_node.c.instance
    project  = fediversity_incus_node.c.project
  }
  snapshot {
    keep = 2
  }
%s
}
`, name, labtest.Image, testdataFile("node.nix"), args, accTimings))
}

// Issue 39, item 8: after a restore, the apply's error gives `fediversity incus
// inspect-copy`, and the command makes a copy for inspection whose data volume is a
// copy of the bricked volume's snapshot: it holds the bricked run's marker while the
// live node's volume keeps its own, nothing of the copy uses the live volume, and a
// destroy with delete_on_destroy = true then succeeds with the copy still there. On the
// current main the error gave `incus copy <instance>/<snapshot> <new>`, whose copy's data
// device was the live volume: started, it mounted the running node's data, and the
// destroy failed with "The storage volume is still in use".
func TestAccIncusNodeInspectCopyOfABrickedState(t *testing.T) {
	acctest.Lab(t)
	name := labtest.Prefix() + "-t-accinspect"
	copyName := name + "-inspect"
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	pool := labDefaultPool(t, c)
	cleanup := func() {
		_, _ = labtest.IncusErr("delete", "--force", copyName)
		_, _ = labtest.IncusErr("storage", "volume", "delete", pool, copyName+"-fediversity-data")
		_, _ = labtest.IncusErr("delete", "--force", name)
		_, _ = labtest.IncusErr("storage", "volume", "delete", pool, name+"-data")
	}
	cleanup()
	t.Cleanup(cleanup)
	cli := filepath.Join(t.TempDir(), "fediversity")
	if out, err := exec.Command("go", "build", "-o", cli, "../../../cmd/fediversity").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fediversity: %v\n%s", err, out)
	}
	node := labtest.Node{Instance: name}
	seed := fmt.Sprintf("acc-inspect-%d", time.Now().UnixNano())
	var bricked string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy: func(*terraform.State) error {
			if _, err := c.GetVolume(t.Context(), pool, name+"-data"); !incusapi.IsNotFound(err) {
				return fmt.Errorf("after destroy the data volume %s/%s-data should be gone: %v", pool, name, err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{Config: inspectCopyConfig(name, `{ seed = "`+seed+`" }`)},
			{
				PreConfig:   func() { nodeExec(t, node, "printf before > /var/lib/fediversity/marker && sync") },
				Config:      inspectCopyConfig(name, `{ seed = "`+seed+`", brick = "1", marker = "after" }`),
				ExpectError: regexp.MustCompile(`(?s)snapshot\s+fediversity-gen-\d+\s+restored.*fediversity\s+incus\s+inspect-copy\s+` + regexp.QuoteMeta(name) + `\s+fediversity-bricked-`),
			},
			{
				PreConfig: func() {
					for _, s := range ourSnapshots(t, node) {
						if strings.HasPrefix(s, "fediversity-bricked-") {
							bricked = s
						}
					}
					if bricked == "" {
						t.Fatal("no bricked state was kept aside")
					}
					var out, errOut bytes.Buffer
					cmd := exec.Command(cli, "incus", "inspect-copy", name, bricked, copyName)
					cmd.Stdout, cmd.Stderr = &out, &errOut
					if err := cmd.Run(); err != nil {
						t.Fatalf("fediversity incus inspect-copy: %v\n%s%s", err, out.String(), errOut.String())
					}
					t.Logf("fediversity incus inspect-copy:\n%s", out.String())
					labtest.Incus(t, "start", copyName)
					copied := labtest.Node{Instance: copyName}
					inCopy := strings.TrimSpace(nodeExec(t, copied, "cat /var/lib/fediversity/marker"))
					live := strings.TrimSpace(nodeExec(t, node, "cat /var/lib/fediversity/marker"))
					dev := strings.TrimSpace(labtest.Incus(t, "config", "device", "get", copyName, "fediversity-data", "source"))
					agree := inCopy == "after" && live == "before" && dev == copyName+"-fediversity-data"
					faultRow(t, "an inspection copy of the bricked state", fmt.Sprintf("copy's marker %q, live marker %q, copy's volume %s", inCopy, live, dev), agree)
					if !agree {
						t.Fatalf("the copy holds marker %q on volume %s, the live node %q: want the bricked \"after\" on a volume of its own, the live \"before\"", inCopy, dev, live)
					}
				},
				// The good system again; the copy stays running through the destroy at
				// the end, which deletes the live volume with the container.
				Config: inspectCopyConfig(name, `{ seed = "`+seed+`" }`),
			},
		},
	})
}
