package node_test

// Acceptance tests of fediversity_incus_node on the real incusd of the lab: create (a
// config key, a limit and a proxy device on 127.0.0.1), an in-place update, import by
// address and by name, a container deleted out of band, and destroy. One container is
// booted twice per run (create, and again after the out-of-band delete). The plan-time
// checks need no daemon.

import (
	"bufio"
	"context"
	"fmt"
	"net"
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

func incusNodeConfig(name string, port int, nodeKey, limits string) string {
	return acctest.Config(fmt.Sprintf(`
provider "fediversity" {}

resource "fediversity_incus_node" "n" {
  name      = %q
  image     = %q
  config    = { "user.fediversity.node" = %q }
  limits    = { %s }
  node_wait = "60s"

  device {
    name       = "ssh"
    type       = "proxy"
    properties = { listen = "tcp:127.0.0.1:%d", connect = "tcp:127.0.0.1:22", bind = "host" }
  }
}

# What a fediversity_node_switch's incus block takes.
output "incus" {
  value = {
    instance = fediversity_incus_node.n.instance
    project  = fediversity_incus_node.n.project
  }
}
`, name, labtest.Image, nodeKey, limits, port))
}

func TestAccIncusNode(t *testing.T) {
	acctest.Lab(t)
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img, err := c.ResolveImage(ctx, labtest.Image)
	if err != nil {
		t.Fatalf("the lab image: %v", err)
	}
	name := labtest.Prefix() + "-t-accnode"
	_, _ = labtest.IncusErr("delete", "--force", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })
	port := accFreePort(t)
	const res = "fediversity_incus_node.n"
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
				Config: incusNodeConfig(name, port, "web01", `processes = "3000"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(res, plancheck.ResourceActionCreate),
					// Known at plan time, so a node switch in the same plan can use it.
					plancheck.ExpectKnownValue(res, tfjsonpath.New("project"), knownvalue.StringExact("default")),
					plancheck.ExpectKnownValue(res, tfjsonpath.New("instance"), knownvalue.StringExact(name)),
					// The image is resolved at plan time; create uses exactly this one.
					plancheck.ExpectKnownValue(res, tfjsonpath.New("image_fingerprint"), knownvalue.StringExact(img.Fingerprint)),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("id"), knownvalue.StringExact("incus://local/default/"+name)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("instance"), knownvalue.StringExact(name)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("image_fingerprint"), knownvalue.StringExact(img.Fingerprint)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("status"), knownvalue.StringExact("Running")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("profiles"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("default")})),
					statecheck.ExpectKnownOutputValue("incus", knownvalue.ObjectExact(map[string]knownvalue.Check{
						"instance": knownvalue.StringExact(name), "project": knownvalue.StringExact("default"),
					})),
				},
				Check: func(*terraform.State) error {
					inst, err := c.GetInstanceConfig(ctx, name)
					if err != nil {
						return err
					}
					if inst.Config["user.fediversity.node"] != "web01" || inst.Config["limits.processes"] != "3000" {
						return fmt.Errorf("container config on the daemon: %v", inst.Config)
					}
					firstUUID = inst.Config["volatile.uuid"]
					// Create returned only once systemd answered: it must answer now.
					out, err := c.Exec(ctx, name, incusapi.ExecRequest{Command: []string{"systemctl", "is-system-running"}})
					if err != nil {
						return err
					}
					if st := strings.TrimSpace(string(out.Stdout)); st != "running" && st != "degraded" {
						return fmt.Errorf("systemd in %s after create says %q", name, st)
					}
					// The proxy device forwards the host's loopback port to the container's sshd.
					if banner, err := sshBanner(fmt.Sprintf("127.0.0.1:%d", port)); err != nil || !strings.HasPrefix(banner, "SSH-2.0-") {
						return fmt.Errorf("proxy on 127.0.0.1:%d: banner %q, %v", port, banner, err)
					}
					return nil
				},
			},
			{
				// A config value changes and the limit goes: the same container, updated.
				Config: incusNodeConfig(name, port, "web02", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					inst, err := c.GetInstanceConfig(ctx, name)
					if err != nil {
						return err
					}
					if inst.Config["user.fediversity.node"] != "web02" || inst.Config["limits.processes"] != "" {
						return fmt.Errorf("after the update the daemon has %v", inst.Config)
					}
					if inst.Config["volatile.uuid"] != firstUUID || !inst.Running() {
						return fmt.Errorf("the update replaced or stopped the container (uuid %s → %s, status %s)", firstUUID, inst.Config["volatile.uuid"], inst.Status)
					}
					return nil
				},
			},
			{
				ResourceName:            res,
				ImportState:             true,
				ImportStateId:           "incus://local/default/" + name,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"node_wait", "timeouts"},
			},
			{
				ResourceName:            res,
				ImportState:             true,
				ImportStateId:           name,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"node_wait", "timeouts"},
			},
			{
				// Deleted outside Terraform: Read drops it from state (with a warning) and the
				// apply creates it again.
				PreConfig: func() { labtest.Incus(t, "delete", "--force", name) },
				Config:    incusNodeConfig(name, port, "web02", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(res, plancheck.ResourceActionCreate),
				}},
				Check: func(*terraform.State) error {
					inst, err := c.GetInstanceConfig(ctx, name)
					if err != nil {
						return err
					}
					if inst.Config["volatile.uuid"] == firstUUID || !inst.Running() {
						return fmt.Errorf("want a new running container, got uuid %s status %s", inst.Config["volatile.uuid"], inst.Status)
					}
					return nil
				},
			},
		},
	})
}

// TestAccIncusNodeRejectsBadInput: mistakes that need no daemon are refused at plan
// time, naming the field and what to do.
func TestAccIncusNodeRejectsBadInput(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	node := func(name, image, extra string) string {
		return acctest.Config(fmt.Sprintf(`
provider "fediversity" {}
resource "fediversity_incus_node" "n" {
  name  = %q
  image = %q
%s
}
`, name, image, extra))
	}
	proxy := func(name, props string) string {
		return fmt.Sprintf("  device {\n    name = %q\n    type = \"proxy\"\n    properties = { %s }\n  }\n", name, props)
	}
	steps := []struct{ config, want string }{
		{node("9web", labtest.Image, ""), `(?s)name.*must be an Incus instance name`},
		{node("web01", "images:debian/12", ""), `(?s)image.*without a .remote:. prefix`},
		{node("web01", labtest.Image, `config = { "limits.cpu" = "2" }`), `(?s)Limits go in .limits.`},
		{node("web01", labtest.Image, `config = { "volatile.uuid" = "x" }`), `belongs to the Incus daemon`},
		{node("web01", labtest.Image, `limits = { "limits.cpu" = "2" }`), `without its "limits\." prefix`},
		{node("web01", labtest.Image, `node_wait = "soon"`), `(?s)node_wait = "soon" is not a positive Go duration`},
		{node("web01", labtest.Image, proxy("ssh", `listen = "tcp:127.0.0.1:2299"`)), `(?s)device "ssh": a proxy needs .connect.`},
		{node("web01", labtest.Image, proxy("ssh", `listen = "127.0.0.1:2299", connect = "tcp:127.0.0.1:22"`)), `(?s)listen "127.0.0.1:2299": unknown protocol`},
		{node("web01", labtest.Image, proxy("ssh", `listen = "tcp:127.0.0.1:1", connect = "tcp:127.0.0.1:22"`)+
			proxy("ssh", `listen = "tcp:127.0.0.1:2", connect = "tcp:127.0.0.1:22"`)), `Two device blocks are named "ssh"`},
		{node("web01", labtest.Image, "  device {\n    name = \"data\"\n    type = \"disk\"\n    properties = { source = \"/srv\" }\n  }\n"),
			`(?s)device "data": a disk needs .path.`},
		{node("web01", labtest.Image, "  device {\n    name = \"gpu\"\n    type = \"gpu\"\n    properties = {}\n  }\n"),
			`(?s)value must be one of.*"disk".*"proxy"`},
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

func accFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// sshBanner reads the first line a TCP server sends, with a few bounded tries while
// sshd starts.
func sshBanner(addr string) (string, error) {
	var last error
	for range 20 {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			line, rerr := bufio.NewReader(conn).ReadString('\n')
			_ = conn.Close()
			if rerr == nil {
				return strings.TrimSpace(line), nil
			}
			err = rerr
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	return "", last
}

// TestAccIncusNodeDaemonRefusals: what only the daemon can refuse fails the apply with
// the daemon's own text. A missing image and a device it refuses at create leave nothing
// behind; a
// container it creates but cannot start (its proxy's port is taken) is kept in state as
// tainted, so the next plan replaces it, and destroy removes it. No container boots.
// (Incus words the failed listen differently from run to run, "address already in use"
// or "Failed to receive fd from listener process"; its prefix is stable.)
func TestAccIncusNodeDaemonRefusals(t *testing.T) {
	acctest.Lab(t)
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	name := labtest.Prefix() + "-t-accrefuse"
	_, _ = labtest.IncusErr("delete", "--force", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	missing := t.TempDir() + "/missing"
	config := func(device string) string {
		return acctest.Config(fmt.Sprintf(`
provider "fediversity" {}
resource "fediversity_incus_node" "n" {
  name      = %q
  image     = %q
  node_wait = "20s"
  %s
}
`, name, labtest.Image, device))
	}
	disk := fmt.Sprintf(`device {
    name       = "data"
    type       = "disk"
    properties = { source = %q, path = "/mnt/data" }
  }`, missing)
	proxy := fmt.Sprintf(`device {
    name       = "ssh"
    type       = "proxy"
    properties = { listen = "tcp:%s", connect = "tcp:127.0.0.1:22", bind = "host" }
  }`, taken.Addr())
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy: func(*terraform.State) error {
			if _, err := c.GetInstance(context.Background(), name); !incusapi.IsNotFound(err) {
				return fmt.Errorf("after destroy, container %s should be gone; the daemon says %v", name, err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				// An image the daemon does not have: planned with a warning (another resource
				// might import it first), refused at create.
				Config:      strings.Replace(config(""), labtest.Image, labtest.Prefix()+"-t-no-such-image", 1),
				ExpectError: regexp.MustCompile(`(?s)no\s+image\s+alias\s+"` + labtest.Prefix() + `-t-no-such-image".*Import\s+the\s+image`),
			},
			{
				Config:      config(disk),
				ExpectError: regexp.MustCompile(`(?s)Missing\s+source\s+path.*Nothing\s+was\s+created`),
			},
			{
				Config:      config(proxy),
				ExpectError: regexp.MustCompile(`(?s)phase\s+start:.*Error\s+occurred\s+when\s+starting\s+proxy\s+device.*created\s+but\s+did\s+not\s+start.*tainted`),
			},
			{
				Config:             config(proxy),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("fediversity_incus_node.n", plancheck.ResourceActionDestroyBeforeCreate),
				}},
			},
		},
	})
}

// TestAccIncusNodeThenNodeSwitch: a tf-incus node in one graph. The container is made
// and the node deployed to it through the Incus API in the same apply, with a clean
// verdict; destroy removes both (the container is gone).
func TestAccIncusNodeThenNodeSwitch(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	name := labtest.Prefix() + "-t-accgraph"
	_, _ = labtest.IncusErr("delete", "--force", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })
	config := acctest.Config(fmt.Sprintf(`
provider "fediversity" {}

resource "fediversity_incus_node" "n" {
  name      = %q
  image     = %q
  node_wait = "60s"
}

resource "fediversity_node_switch" "n" {
  node     = "web01"
  toplevel = %q
  incus {
    instance = fediversity_incus_node.n.instance
    project  = fediversity_incus_node.n.project
  }
%s
}
`, name, labtest.Image, good, accTimings))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy: func(*terraform.State) error {
			if _, err := c.GetInstance(context.Background(), name); !incusapi.IsNotFound(err) {
				return fmt.Errorf("after destroy, container %s should be gone; the daemon says %v", name, err)
			}
			return nil
		},
		Steps: []resource.TestStep{{
			Config: config,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("toplevel"), knownvalue.StringExact(good)),
				verdictBool("ok", true),
			},
			Check: func(*terraform.State) error {
				res, err := c.Exec(context.Background(), name, incusapi.ExecRequest{Command: []string{"readlink", "/run/current-system"}})
				if err != nil {
					return err
				}
				if got := strings.TrimSpace(string(res.Stdout)); got != good {
					return fmt.Errorf("container %s runs %q, want %s", name, got, good)
				}
				return nil
			},
		}},
	})
}
