package node_test

// Acceptance test of non-root deploys on the lab: a throwaway instance with Debian's
// real sudo, a user with passwordless sudo, and a user whose sudo asks for a password.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
	"github.com/fediversity/terraform-provider-fediversity/internal/provider/acctest"
)

func sudoSSHBlock(n labtest.Node, user string) string {
	return fmt.Sprintf(`
  ssh {
    host     = %q
    port     = %d
    host_key = %q
    user     = %q
    sudo     = true
  }`, n.SSHHost, n.SSHPort, n.HostKey, user)
}

// The sudo user deploys and judges; a user whose sudo wants a password is refused at
// once (sudo -n never prompts), before the copy, naming the refused command, and the
// node keeps its system; the sudo user then upgrades it.
func TestAccNodeSwitchSudoUser(t *testing.T) {
	acctest.Lab(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	goodV2 := labtest.BuildClosure(t, labtest.ClosureGoodV2)
	node := labtest.NewInstance(t, "acc-sudo")
	labtest.AddUser(t, node, "deploy", "deploy ALL=(root) NOPASSWD: ALL")
	labtest.AddUser(t, node, "nopass", "nopass ALL=(ALL) ALL")
	var refusedAt time.Time

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { acctest.PreCheck(t) },
		ProtoV6ProviderFactories: acctest.ProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: switchConfig(node, sudoSSHBlock(node, "deploy"), good, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
					verdictList("failed"),
				},
				Check: func(*terraform.State) error {
					if got := strings.TrimSpace(nodeExec(t, node, "readlink -f /run/current-system")); got != good {
						return fmt.Errorf("node runs %s, want %s", got, good)
					}
					// The deploy's SSH sessions were the deploy user's: root never logged in.
					logins := nodeExec(t, node, "journalctl -u ssh --no-pager -o cat | grep 'Accepted publickey for' || true")
					if !strings.Contains(logins, "for deploy ") || strings.Contains(logins, "for root ") {
						return fmt.Errorf("want SSH logins of deploy only, got:\n%s", logins)
					}
					return nil
				},
			},
			{
				PreConfig: func() { refusedAt = time.Now() },
				Config:    switchConfig(node, sudoSSHBlock(node, "nopass"), goodV2, ""),
				ExpectError: regexp.MustCompile(`(?s)phase wait-for-node.*sudo refused ` + "`" + `/bin/sh -c exit 0` + "`" +
					`.*password is required`),
			},
			{
				// Nothing changed: the node runs good and never received good-v2; the
				// refusal came at once, not after a prompt's or node_wait's time. Then
				// the sudo user upgrades the node (a second deploy: the lockout revert
				// is armed and disarmed through sudo too).
				Config: switchConfig(node, sudoSSHBlock(node, "deploy"), goodV2, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					verdictBool("ok", true),
				},
				Check: func(*terraform.State) error {
					if got := strings.TrimSpace(nodeExec(t, node, "readlink -f /run/current-system")); got != goodV2 {
						return fmt.Errorf("node runs %s, want %s", got, goodV2)
					}
					return nil
				},
				PreConfig: func() {
					if d := time.Since(refusedAt); d > 25*time.Second {
						t.Errorf("the refusal took %s: it must not wait for node_wait (30s) or a prompt", d)
					}
					if got := strings.TrimSpace(nodeExec(t, node, "readlink -f /run/current-system")); got != good {
						t.Errorf("after the refusal the node runs %s, want %s", got, good)
					}
					if out, err := labtest.IncusErr("exec", node.Instance, "--", "nix-store", "--check-validity", goodV2); err == nil {
						t.Errorf("the refused deploy copied %s to the node: %s", goodV2, out)
					}
				},
			},
		},
	})
}
