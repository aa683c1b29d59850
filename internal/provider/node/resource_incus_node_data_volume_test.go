package node_test

// Acceptance tests of fediversity_incus_node's data_volume on the real incusd of the
// lab: the container is created with a custom volume at /var/lib/fediversity, a deploy
// with snapshot {} takes a set that includes the volume, the size changes in place,
// destroy keeps the volume with the node's data and a container of the same name takes
// it back (refused while another instance attaches it), delete_on_destroy deletes it, removing the block detaches the volume and keeps
// it, and adding the block to an existing container is refused. Bad input is refused at
// plan time.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func incusNodeDataVolumeConfig(name, dataVolume, toplevel string) string {
	sw := ""
	if toplevel != "" {
		sw = fmt.Sprintf(`
resource "fediversity_node_switch" "n" {
  node     = "web01"
  toplevel = %q
  incus {
    instance = fediversity_incus_node.n.instance
    project  = fediversity_incus_node.n.project
  }
  snapshot {
    keep = 2
  }
%s
}
`, toplevel, accTimings)
	}
	return acctest.Config(fmt.Sprintf(`
provider "fediversity" {}

resource "fediversity_incus_node" "n" {
  name      = %q
  image     = %q
  node_wait = "60s"

  data_volume {
%s
  }
}
%s`, name, labtest.Image, dataVolume, sw))
}

func TestAccIncusNodeDataVolume(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	pool := labDefaultPool(t, c)
	name := labtest.Prefix() + "-t-accdata"
	vol := name + "-data"
	other := labtest.Prefix() + "-t-accdata-other"
	cleanup := func() {
		_, _ = labtest.IncusErr("delete", "--force", other)
		_, _ = labtest.IncusErr("delete", "--force", name)
		_, _ = labtest.IncusErr("storage", "volume", "delete", pool, vol)
	}
	cleanup()
	t.Cleanup(cleanup)
	const res = "fediversity_incus_node.n"
	volumeSize := func(want string) error {
		v, err := c.GetVolume(ctx, pool, vol)
		if err != nil {
			return fmt.Errorf("data volume %s/%s: %w", pool, vol, err)
		}
		if v.Config["size"] != want {
			return fmt.Errorf("data volume %s/%s has size %q, want %q", pool, vol, v.Config["size"], want)
		}
		return nil
	}
	var firstUUID string

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy: func(*terraform.State) error {
			if _, err := c.GetInstance(ctx, name); !incusapi.IsNotFound(err) {
				return fmt.Errorf("after destroy, container %s should be gone; the daemon says %v", name, err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				// Made with the container, mounted at the default path; the deploy's set
				// takes it with the root disk.
				Config: incusNodeDataVolumeConfig(name, `    size = "256MiB"`, good),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(res, plancheck.ResourceActionCreate),
					plancheck.ExpectKnownValue(res, tfjsonpath.New("data_volume").AtMapKey("volume"), knownvalue.StringExact(vol)),
					plancheck.ExpectKnownValue(res, tfjsonpath.New("data_volume").AtMapKey("path"), knownvalue.StringExact("/var/lib/fediversity")),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("data_volume").AtMapKey("pool"), knownvalue.StringExact(pool)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("data_volume").AtMapKey("size"), knownvalue.StringExact("256MiB")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("data_volume").AtMapKey("delete_on_destroy"), knownvalue.Bool(false)),
					// The reserved device is reported in data_volume, not among the devices.
					statecheck.ExpectKnownValue(res, tfjsonpath.New("device"), knownvalue.ListSizeExact(0)),
					verdictBool("ok", true),
				},
				Check: func(*terraform.State) error {
					if err := volumeSize("256MiB"); err != nil {
						return err
					}
					inst, err := c.GetInstanceConfig(ctx, name)
					if err != nil {
						return err
					}
					firstUUID = inst.Config["volatile.uuid"]
					d := inst.Devices["fediversity-data"]
					if d["pool"] != pool || d["source"] != vol || d["path"] != "/var/lib/fediversity" {
						return fmt.Errorf("container %s attaches the data volume as %v", name, d)
					}
					// The node's data path is the volume's mount, and data written there stays.
					out, err := c.Exec(ctx, name, incusapi.ExecRequest{Command: []string{"sh", "-c",
						"printf kept > /var/lib/fediversity/marker && sync && findmnt -n -o TARGET --target /var/lib/fediversity/marker"}})
					if err != nil || out.ExitCode != 0 || strings.TrimSpace(string(out.Stdout)) != "/var/lib/fediversity" {
						return fmt.Errorf("writing on the data volume: %v, exit %d, %q %q", err, out.ExitCode, out.Stdout, out.Stderr)
					}
					return setIncludesVolume(ctx, c, name, pool, vol)
				},
			},
			{
				// The quota grows in place: the same container, the volume resized.
				Config: incusNodeDataVolumeConfig(name, `    size = "512MiB"`, good),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					if err := volumeSize("512MiB"); err != nil {
						return err
					}
					inst, err := c.GetInstanceConfig(ctx, name)
					if err != nil {
						return err
					}
					if inst.Config["volatile.uuid"] != firstUUID || !inst.Running() {
						return fmt.Errorf("the resize replaced or stopped the container (uuid %s → %s, status %s)", firstUUID, inst.Config["volatile.uuid"], inst.Status)
					}
					return nil
				},
			},
			{
				// Destroy keeps the volume (the default)…
				Config:  incusNodeDataVolumeConfig(name, `    size = "512MiB"`, good),
				Destroy: true,
			},
			{
				// …but not while another instance attaches it: the create is refused,
				// naming the volume and that instance, and nothing is made.
				PreConfig: func() {
					if _, err := c.GetInstance(ctx, name); !incusapi.IsNotFound(err) {
						t.Fatalf("after destroy, container %s should be gone; the daemon says %v", name, err)
					}
					if err := volumeSize("512MiB"); err != nil {
						t.Fatalf("destroy should keep the data volume: %v", err)
					}
					labtest.Incus(t, "init", labtest.Image, other)
					labtest.Incus(t, "storage", "volume", "attach", pool, vol, other, "kept", "/mnt/kept")
				},
				Config: incusNodeDataVolumeConfig(name, "    size = \"512MiB\"\n    delete_on_destroy = true", ""),
				ExpectError: regexp.MustCompile(`(?s)` + regexp.QuoteMeta(vol) + `.*already\s+exists\s+and\s+is\s+attached\s+elsewhere.*` +
					regexp.QuoteMeta("/1.0/instances/"+other) + `.*Nothing\s+was\s+created`),
			},
			{
				// Detached there, a container made again under the same name takes it
				// back, data and all.
				PreConfig: func() {
					if _, err := c.GetInstance(ctx, name); !incusapi.IsNotFound(err) {
						t.Fatalf("the refused create made container %s; the daemon says %v", name, err)
					}
					if err := volumeSize("512MiB"); err != nil {
						t.Fatalf("the refused create should leave the kept volume as it was: %v", err)
					}
					labtest.Incus(t, "delete", "--force", other)
				},
				Config: incusNodeDataVolumeConfig(name, "    size = \"512MiB\"\n    delete_on_destroy = true", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(res, plancheck.ResourceActionCreate),
				}},
				Check: func(*terraform.State) error {
					out, err := c.Exec(ctx, name, incusapi.ExecRequest{Command: []string{"cat", "/var/lib/fediversity/marker"}})
					if err != nil || string(out.Stdout) != "kept" {
						return fmt.Errorf("the new container should see the kept marker: %v, %q %q", err, out.Stdout, out.Stderr)
					}
					return nil
				},
			},
			{
				// delete_on_destroy: the volume goes with the container.
				Config:  incusNodeDataVolumeConfig(name, "    size = \"512MiB\"\n    delete_on_destroy = true", ""),
				Destroy: true,
			},
			{
				// Removing the block detaches the volume in place and keeps it.
				PreConfig: func() {
					if _, err := c.GetVolume(ctx, pool, vol); !incusapi.IsNotFound(err) {
						t.Fatalf("after destroy with delete_on_destroy, volume %s/%s should be gone; the daemon says %v", pool, vol, err)
					}
				},
				Config: incusNodeDataVolumeConfig(name, "", ""),
				Check: func(*terraform.State) error {
					inst, err := c.GetInstanceConfig(ctx, name)
					if err != nil {
						return err
					}
					firstUUID = inst.Config["volatile.uuid"]
					return volumeSize("")
				},
			},
			{
				Config: strings.Replace(incusNodeDataVolumeConfig(name, "", ""), "data_volume {", "dynamic \"data_volume\" {\n    for_each = []\n    content {}", 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					inst, err := c.GetInstanceConfig(ctx, name)
					if err != nil {
						return err
					}
					if _, ok := inst.Devices["fediversity-data"]; ok || inst.Config["volatile.uuid"] != firstUUID {
						return fmt.Errorf("want the same container without the data volume device, got uuid %s, devices %v", inst.Config["volatile.uuid"], inst.Devices)
					}
					return volumeSize("")
				},
			},
			{
				// Adding it back to the existing container is refused at plan time.
				Config:      incusNodeDataVolumeConfig(name, "", ""),
				ExpectError: regexp.MustCompile(`(?s)data_volume cannot be added to an existing container.*` + regexp.QuoteMeta(name) + `.*Nothing was changed`),
			},
		},
	})
}

// setIncludesVolume: the set manifest on the instance lists the data volume, and the
// volume has the set's snapshot.
func setIncludesVolume(ctx context.Context, c *incusapi.Client, name, pool, vol string) error {
	inst, err := c.GetInstanceConfig(ctx, name)
	if err != nil {
		return err
	}
	var sets []string
	for k, v := range inst.Config {
		set, ok := strings.CutPrefix(k, "user.fediversity.set.")
		if !ok {
			continue
		}
		var m struct {
			Volumes []struct {
				Pool   string `json:"pool"`
				Volume string `json:"volume"`
			} `json:"volumes"`
		}
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return fmt.Errorf("manifest %s: %v: %s", k, err, v)
		}
		if len(m.Volumes) != 1 || m.Volumes[0].Volume != vol || m.Volumes[0].Pool != pool {
			return fmt.Errorf("manifest %s lists volumes %+v, want %s/%s", k, m.Volumes, pool, vol)
		}
		sets = append(sets, set)
	}
	if len(sets) == 0 {
		return fmt.Errorf("no set manifest on %s after a deploy with snapshot {}; config: %v", name, inst.Config)
	}
	snaps, err := c.ListVolumeSnapshots(ctx, pool, vol)
	if err != nil {
		return err
	}
	for _, s := range snaps {
		for _, set := range sets {
			if s == set {
				return nil
			}
		}
	}
	return fmt.Errorf("volume %s/%s has snapshots %v, none of the sets %v", pool, vol, snaps, sets)
}

func labDefaultPool(t *testing.T, c *incusapi.Client) string {
	t.Helper()
	devs, err := c.ProfileDevices(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d["type"] == "disk" && d["path"] == "/" && d["pool"] != "" {
			return d["pool"]
		}
	}
	t.Fatalf("the lab's default profile has no root disk with a pool: %v", devs)
	return ""
}

// TestAccIncusNodeDataVolumeRejectsBadInput: a bad size, path or pool, and a device on
// the reserved name or at the volume's path, are refused at plan time, naming the field.
func TestAccIncusNodeDataVolumeRejectsBadInput(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	node := func(dv, extra string) string {
		return acctest.Config(fmt.Sprintf(`
provider "fediversity" {}
resource "fediversity_incus_node" "n" {
  name  = "web01"
  image = %q
  data_volume {
%s
  }
%s
}
`, labtest.Image, dv, extra))
	}
	disk := func(name, props string) string {
		return fmt.Sprintf("  device {\n    name = %q\n    type = \"disk\"\n    properties = { %s }\n  }\n", name, props)
	}
	steps := []struct{ config, want string }{
		{node(`size = "10 gigs"`, ""), `(?s)data_volume.size "10 gigs" is not a size`},
		{node(`size = "-1GiB"`, ""), `(?s)data_volume.size "-1GiB" is not a size`},
		{node(`path = "var/lib/fediversity"`, ""), `(?s)data_volume.path "var/lib/fediversity" must be absolute`},
		{node(`path = "/"`, ""), `(?s)data_volume.path must not be /`},
		{node(`path = "/var/lib/../fediversity/"`, ""), `(?s)is not clean.*"/var/fediversity"`},
		{node(`pool = "a/b"`, ""), `(?s)data_volume.pool "a/b" is not a storage pool name`},
		{node("", disk("fediversity-data", `source = "/srv", path = "/srv"`)), `(?s)device "fediversity-data" is the name of the disk that attaches data_volume`},
		{node("", disk("data", `source = "/srv/fediversity/web01", path = "/var/lib/fediversity"`)), `(?s)device "data" mounts at /var/lib/fediversity, where data_volume is attached`},
	}
	var ts []resource.TestStep
	for _, s := range steps {
		ts = append(ts, resource.TestStep{Config: s.config, PlanOnly: true, ExpectError: regexp.MustCompile(s.want)})
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps:                    ts,
	})
}
