package spire_test

// Acceptance test of the SPIRE registration of an Incus node (tf-incus-operator) with the
// real parts: the lab spire node (spire-server over SSH), a throwaway lab container
// reached through the Incus API, and a real spire-agent inside it that attests with the
// join token the provider delivered and fetches the SVID of its host entry. Runs when
// TF_ACC=1, FEDIVERSITY_LAB=1 and FEDIVERSITY_SPIRE=1.

import (
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
	"github.com/fediversity/terraform-provider-fediversity/internal/spire"
)

func TestAccSpireRegistration_incusAgentAttests(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	sn := labtest.Spire(t)
	node := labtest.NewInstance(t, "spire")
	// The node reaches the SPIRE server at 127.0.0.1:8081 of its own loopback.
	labtest.Incus(t, "config", "device", "add", node.Instance, "spire", "proxy", "listen=tcp:127.0.0.1:8081",
		fmt.Sprintf("connect=tcp:127.0.0.1:%d", sn.ServerPort), "bind=instance")
	labtest.Incus(t, "file", "push", "--mode", "0755", labtest.SpireAgentBinary(t), node.Instance+"/usr/local/bin/spire-agent")
	var b [3]byte
	_, _ = rand.Read(b[:])
	group := fmt.Sprintf("acc%x", b)
	spireExec := func(argv ...string) (string, error) {
		return labtest.IncusErr(append([]string{"exec", sn.Name, "--", "spire-server"}, argv...)...)
	}
	nodeExec := func(argv ...string) (string, error) {
		return labtest.IncusErr(append([]string{"exec", node.Instance, "--"}, argv...)...)
	}
	t.Cleanup(func() {
		for _, id := range []string{"alias", "host"} {
			_, _ = spireExec("entry", "delete", "-entryID", spire.IncusEntryPrefix(group, "n1")+id)
		}
	})
	config := acctest.Config(fmt.Sprintf(`provider "fediversity" {
  ssh_private_key_file = %[1]q
}

data "fediversity_spire_trust_bundle" "b" {
  spire_node {
    host     = %[2]q
    port     = %[3]d
    host_key = %[4]q
  }
}

resource "fediversity_spire_registration" "n1" {
  group        = %[5]q
  node         = "n1"
  trust_bundle = data.fediversity_spire_trust_bundle.b.pem
  spire_node {
    host     = %[2]q
    port     = %[3]d
    host_key = %[4]q
  }
  incus {
    instance = %[6]q
  }
}
`, labtest.KeyFile(), sn.SSHHost, sn.SSHPort, sn.HostKey, group, node.Instance))
	host := spire.HostID(group, "n1")
	var token string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		CheckDestroy: func(*terraform.State) error {
			for _, id := range []string{"alias", "host"} {
				if out, err := spireExec("entry", "show", "-entryID", spire.IncusEntryPrefix(group, "n1")+id); err == nil && strings.Contains(out, spire.IncusEntryPrefix(group, "n1")+id) {
					return fmt.Errorf("entry %s left after destroy:\n%s", id, out)
				}
			}
			if list, _ := spireExec("agent", "list"); strings.Contains(list, spire.JoinTokenAgentID(token)) {
				return fmt.Errorf("the node's agent was not evicted:\n%s", list)
			}
			if _, err := nodeExec("test", "-e", "/var/lib/spire/agent/join-token"); err == nil {
				return fmt.Errorf("the join token file is left on the node")
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: config,
				Check: resource.ComposeTestCheckFunc(
					resource.TestCheckResourceAttr("fediversity_spire_registration.n1", "host_id", host),
					func(s *terraform.State) error {
						out, err := nodeExec("sh", "-c", "stat -c %a /var/lib/spire/agent/join-token && cat /var/lib/spire/agent/join-token")
						if err != nil {
							return fmt.Errorf("token on the node: %v %s", err, out)
						}
						lines := strings.Split(strings.TrimSpace(out), "\n")
						if lines[0] != "600" || len(lines) < 2 || len(lines[1]) < 16 {
							return fmt.Errorf("token file: %q", lines)
						}
						token = lines[1]
						for _, r := range s.RootModule().Resources {
							for k, v := range r.Primary.Attributes {
								if strings.Contains(v, token) {
									return fmt.Errorf("the join token is in the state (%s)", k)
								}
							}
						}
						return nil
					},
					func(*terraform.State) error {
						// The node's agent, as a node configuration would run it.
						conf := `agent {
  data_dir = "/var/lib/spire/agent/data"
  log_level = "DEBUG"
  server_address = "127.0.0.1"
  server_port = "8081"
  socket_path = "/run/spire-agent/api.sock"
  trust_bundle_path = "/var/lib/spire/agent/bundle.crt"
  trust_domain = "fediversity"
  join_token_file = "/var/lib/spire/agent/join-token"
}
plugins {
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "disk" {
    plugin_data { directory = "/var/lib/spire/agent/data" }
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`
						if out, err := nodeExec("sh", "-c", "mkdir -p /etc/spire /run/spire-agent && printf '%s' \"$1\" >/etc/spire/agent.conf && "+
							"systemd-run --unit=fedi-spire-agent /usr/local/bin/spire-agent run -config /etc/spire/agent.conf", "sh", conf); err != nil {
							return fmt.Errorf("start the agent: %v %s", err, out)
						}
						var last string
						for i := 0; i < 60; i++ {
							last, _ = nodeExec("spire-agent", "api", "fetch", "x509", "-socketPath", "/run/spire-agent/api.sock")
							if strings.Contains(last, host) {
								break
							}
							time.Sleep(time.Second)
						}
						if !strings.Contains(last, host) {
							journal, _ := nodeExec("journalctl", "-u", "fedi-spire-agent", "--no-pager", "-n", "30")
							return fmt.Errorf("the agent in %s did not get the SVID of %s: %s\n%s", node.Instance, host, last, journal)
						}
						t.Logf("the agent in %s holds the X.509 SVID of %s", node.Instance, host)
						list, err := spireExec("agent", "list")
						if err != nil || !strings.Contains(list, spire.JoinTokenAgentID(token)) || !strings.Contains(list, "join_token") {
							return fmt.Errorf("agent list: %v\n%s", err, list)
						}
						return nil
					},
				),
			},
			{
				Config:           config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}
