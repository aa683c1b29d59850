package node_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

// nodeNixOutput is the toplevel testdata/node.nix gives with args (what the provider's
// build block makes of them), without building it.
func nodeNixOutput(t *testing.T, args map[string]string) string {
	t.Helper()
	argv := []string{testdataFile("node.nix")}
	for k, v := range args {
		argv = append(argv, "--argstr", k, v)
	}
	drv, err := exec.Command("nix-instantiate", argv...).Output()
	if err != nil {
		t.Fatalf("nix-instantiate %v: %v", argv, err)
	}
	out, err := exec.Command("nix-store", "-q", "--outputs", strings.TrimSpace(string(drv))).Output()
	if err != nil {
		t.Fatalf("nix-store -q --outputs %s: %v", drv, err)
	}
	return strings.TrimSpace(string(out))
}

// inNodeStore says whether the node's nix store holds path (valid, not just a
// directory).
func inNodeStore(t *testing.T, n labtest.Node, path string) bool {
	t.Helper()
	return strings.TrimSpace(nodeExec(t, n, "nix-store --check-validity "+path+" 2>/dev/null && echo valid || echo absent")) == "valid"
}

// The hardware address gate on the NixOS-shaped node, through the binary. A system whose
// network link file matches, with PermanentMACAddress=, an address the node does not
// have is refused before the copy: the error names the node, the link file, the
// address and what the node has, and the node's store never receives the system. An
// address the node has only as one the kernel made up at random (a veth's) is no
// permanent address, and is refused too. A system whose address the node has deploys.
//
// What stands in for what: an Incus container of this lab has no network but lo, and no
// interface of a container has a permanent address (the kernel sets one only for a
// driver that reads it from the hardware). The test adds a veth pair inside the node
// with a fixed address on one end (fedilan0; `ip link add … address …` marks it as set,
// addr_assign_type 3), and the gate counts a set address, since `ip` prints no
// permanent address when it equals the current one (docs/design.md#phases). The other
// end (fedilan1) keeps the random address the kernel gave it. A real NIC's permanent
// address that differs from its current one (a bond's port) is read from `ip -o link`'s
// permaddr, proven by the deploy body's unit tests.
func TestAccNodeSwitchHardwareAddressGate(t *testing.T) {
	acctest.Lab(t)
	node := labtest.NewInstance(t, "acc-mac-gate")
	const lanMAC, absentMAC = "52:54:00:fe:d1:01", "52:54:00:fe:d1:02"
	// Lab setup, not the product: Debian's ip by absolute path.
	nodeExec(t, node, "/usr/sbin/ip link add fedilan0 address "+lanMAC+" type veth peer name fedilan1")
	randomMAC := strings.TrimSpace(nodeExec(t, node, "cat /sys/class/net/fedilan1/address"))
	if assign := strings.TrimSpace(nodeExec(t, node, "cat /sys/class/net/fedilan1/addr_assign_type")); assign != "1" {
		t.Fatalf("fedilan1's address %s has addr_assign_type %s, want 1 (random)", randomMAC, assign)
	}
	seed := fmt.Sprintf("acc-mac-gate-%d", time.Now().UnixNano()) // systems no node holds
	args := map[string]map[string]string{
		"absent": {"seed": seed + "-absent", "linkMAC": absentMAC},
		"random": {"seed": seed + "-random", "linkMAC": randomMAC},
		"lan":    {"seed": seed + "-lan", "linkMAC": lanMAC},
	}
	config := func(which string) string {
		a := args[which]
		return nixosConfig(node, fmt.Sprintf(`{ seed = %q, linkMAC = %q }`, a["seed"], a["linkMAC"]), "")
	}
	refused := func(mac string) *regexp.Regexp {
		return regexp.MustCompile(`(?s)refusing\s+the\s+closure\s+before\s+the\s+copy:\s+link\s+file\s+/nix/store/[0-9a-z]{32}-nixos-system-fedi-acc/etc/systemd/network/10-fedi-lan\.link\s+` +
			`matches\s+PermanentMACAddress=` + regexp.QuoteMeta(mac) + `,\s+which\s+node\s+` + regexp.QuoteMeta(node.Name) + `\s+does\s+not\s+have\s+` +
			`\(it\s+has\s+` + regexp.QuoteMeta(lanMAC) + `\s+\(fedilan0\)\)`)
	}
	notSent := func(which string) func() {
		return func() {
			if top := nodeNixOutput(t, args[which]); inNodeStore(t, node, top) {
				t.Errorf("the refused system %s (link file for %s) reached the node's store", top, args[which]["linkMAC"])
			}
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config("absent"), ExpectError: refused(absentMAC)},
			{PreConfig: notSent("absent"), Config: config("random"), ExpectError: refused(randomMAC)},
			{
				PreConfig: notSent("random"),
				Config:    config("lan"),
				Check: func(s *terraform.State) error {
					top := s.RootModule().Resources[addr].Primary.Attributes["toplevel"]
					if top != nodeNixOutput(t, args["lan"]) {
						return fmt.Errorf("deployed %s, want the system whose link file names %s", top, lanMAC)
					}
					if link := nodeExec(t, node, "cat /run/current-system/etc/systemd/network/10-fedi-lan.link"); !strings.Contains(link, "PermanentMACAddress="+lanMAC) {
						return fmt.Errorf("the running system's link file: %q", link)
					}
					return nodeAgreesWithState(t, node, s, top)
				},
			},
		},
	})
}
