package provider

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

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

const labImage = "lab/debian" // IMAGE_ALIAS of lab/lab.sh

func incusNodeConfig(name string, port int, nodeKey, limits string) string {
	return testAccConfig(fmt.Sprintf(`
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
`, name, labImage, nodeKey, limits, port))
}

func TestAccIncusNode(t *testing.T) {
	accLab(t)
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	img, err := c.ResolveImage(ctx, labImage)
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
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
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
		return testAccConfig(fmt.Sprintf(`
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
		{node("9web", labImage, ""), `(?s)name.*must be an Incus instance name`},
		{node("web01", "images:debian/12", ""), `(?s)image.*without a .remote:. prefix`},
		{node("web01", labImage, `config = { "limits.cpu" = "2" }`), `(?s)Limits go in .limits.`},
		{node("web01", labImage, `config = { "volatile.uuid" = "x" }`), `belongs to the Incus daemon`},
		{node("web01", labImage, `limits = { "limits.cpu" = "2" }`), `without its "limits\." prefix`},
		{node("web01", labImage, `node_wait = "soon"`), `(?s)node_wait = "soon" is not a positive Go duration`},
		{node("web01", labImage, proxy("ssh", `listen = "tcp:127.0.0.1:2299"`)), `(?s)device "ssh": a proxy needs .connect.`},
		{node("web01", labImage, proxy("ssh", `listen = "127.0.0.1:2299", connect = "tcp:127.0.0.1:22"`)), `(?s)listen "127.0.0.1:2299": unknown protocol`},
		{node("web01", labImage, proxy("ssh", `listen = "tcp:127.0.0.1:1", connect = "tcp:127.0.0.1:22"`)+
			proxy("ssh", `listen = "tcp:127.0.0.1:2", connect = "tcp:127.0.0.1:22"`)), `Two device blocks are named "ssh"`},
		{node("web01", labImage, "  device {\n    name = \"data\"\n    type = \"disk\"\n    properties = { source = \"/srv\" }\n  }\n"),
			`(?s)device "data": a disk needs .path.`},
		{node("web01", labImage, "  device {\n    name = \"gpu\"\n    type = \"gpu\"\n    properties = {}\n  }\n"),
			`(?s)value must be one of.*"disk".*"proxy"`},
	}
	var ts []resource.TestStep
	for _, s := range steps {
		ts = append(ts, resource.TestStep{Config: s.config, PlanOnly: true, ExpectError: regexp.MustCompile(s.want)})
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
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

// readIncusNode runs the resource's Read on a state naming container name in project,
// against the real daemon, and returns the response. It calls Read directly (not
// through a binary) because terraform-plugin-testing cannot assert a warning.
func readIncusNode(t *testing.T, name, project string) *fwresource.ReadResponse {
	t.Helper()
	ctx := context.Background()
	cfg := &Config{IncusSocket: envOr("INCUS_SOCKET", incusapi.DefaultSocket), IncusProject: "default"}
	cfg.clients = newProviderClients(cfg)
	r := &incusNodeResource{cfg: cfg}
	var sr fwresource.SchemaResponse
	r.Schema(ctx, fwresource.SchemaRequest{}, &sr)
	st := tfsdk.State{Schema: sr.Schema}
	m := incusNodeModel{
		ID: types.StringValue("incus://local/" + project + "/" + name), Name: types.StringValue(name), Image: types.StringValue(labImage),
		Project: types.StringValue(project), NodeWait: types.StringNull(),
		Instance: types.StringValue(name), ImageFingerprint: types.StringNull(), Status: types.StringValue("Running"),
		Profiles: types.ListNull(types.StringType), Config: types.MapNull(types.StringType), Limits: types.MapNull(types.StringType),
		Timeouts: timeouts.Value{Object: types.ObjectNull(incusNodeTimeoutsAttrTypes)},
	}
	if diags := st.Set(ctx, m); diags.HasError() {
		t.Fatalf("state: %v", diags)
	}
	resp := &fwresource.ReadResponse{State: st}
	r.Read(ctx, fwresource.ReadRequest{State: st}, resp)
	return resp
}

// TestLabIncusNodeReadGone: a container deleted out of band is removed from state with
// a warning that names it and carries the daemon's answer; so is one whose project is
// gone (Incus deletes only empty projects). A stopped one is kept, with a warning. No
// container is booted.
func TestLabIncusNodeReadGone(t *testing.T) {
	labtest.Require(t)
	name := labtest.Prefix() + "-t-readgone"
	_, _ = labtest.IncusErr("delete", "--force", name)
	for _, tc := range []struct{ project, daemonSays string }{
		{"default", "Instance not found"},
		{labtest.Prefix() + "-t-no-such-project", "Project not found"},
	} {
		resp := readIncusNode(t, name, tc.project)
		if !resp.State.Raw.IsNull() {
			t.Fatalf("project %s: Read of a missing container must remove it from state", tc.project)
		}
		if resp.Diagnostics.HasError() || resp.Diagnostics.WarningsCount() != 1 {
			t.Fatalf("project %s: want exactly one warning, got %v", tc.project, resp.Diagnostics)
		}
		w := resp.Diagnostics.Warnings()[0].Detail()
		if !strings.Contains(w, name+" (project "+tc.project+") was deleted outside Terraform") || !strings.Contains(w, tc.daemonSays) {
			t.Fatalf("project %s: the warning must name the container and carry %q: %s", tc.project, tc.daemonSays, w)
		}
		t.Logf("warning: %s", w)
	}

	// A stopped container stays in state, with a warning that says how to start it.
	labtest.Incus(t, "init", "--empty", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })
	resp := readIncusNode(t, name, "default")
	if resp.State.Raw.IsNull() || resp.Diagnostics.HasError() || resp.Diagnostics.WarningsCount() != 1 ||
		!strings.Contains(resp.Diagnostics.Warnings()[0].Detail(), "incus start --project default "+name) {
		t.Fatalf("stopped container: want it kept with one warning saying how to start it, got %v", resp.Diagnostics)
	}
}

// TestAccIncusNodeDaemonRefusals: what only the daemon can refuse fails the apply with
// the daemon's own text. A missing image and a device it refuses at create leave nothing
// behind; a
// container it creates but cannot start (its proxy's port is taken) is kept in state as
// tainted, so the next plan replaces it, and destroy removes it. No container boots.
// (Incus words the failed listen differently from run to run, "address already in use"
// or "Failed to receive fd from listener process"; its prefix is stable.)
func TestAccIncusNodeDaemonRefusals(t *testing.T) {
	accLab(t)
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
		return testAccConfig(fmt.Sprintf(`
provider "fediversity" {}
resource "fediversity_incus_node" "n" {
  name      = %q
  image     = %q
  node_wait = "20s"
  %s
}
`, name, labImage, device))
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
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
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
				Config:      strings.Replace(config(""), labImage, labtest.Prefix()+"-t-no-such-image", 1),
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
	accLab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	c, err := incusapi.NewFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	name := labtest.Prefix() + "-t-accgraph"
	_, _ = labtest.IncusErr("delete", "--force", name)
	t.Cleanup(func() { _, _ = labtest.IncusErr("delete", "--force", name) })
	config := testAccConfig(fmt.Sprintf(`
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
`, name, labImage, good, accTimings))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
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
