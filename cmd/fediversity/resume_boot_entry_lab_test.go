package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// A staged rollout resumes only a node that runs and boots its system with an ok
// verdict on record: the drift decision the provider's Read makes
// (deploybody.JudgeDrift). Here a rollout deploys the good system to a real lab node,
// then the node's system profile is set back to the generation it had, as a run cut off
// between its verdict record and its boot entry leaves it: the node runs the good
// system with an ok verdict on record, but boots the old one. The same command again
// must not take it as done (a verdict-only pass would leave the boot entry on the old
// system): it deploys it again, not resumed, says why in the words the provider's
// refresh gives the same node (an unfinished switch), and the boot entry then names the
// good system.
func TestLabCLIResumeDeploysANodeThatDoesNotBootItsSystem(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	good := labtest.BuildClosure(t, labtest.ClosureGood)
	n := labtest.NewInstance(t, "cli-resume-boot")
	exec := func(script string) string {
		return strings.TrimSpace(labtest.Incus(t, "exec", n.Instance, "--project", n.Project, "--", "sh", "-c", script))
	}
	link := exec("readlink /nix/var/nix/profiles/system")
	var gen int
	if _, err := fmt.Sscanf(link, "system-%d-link", &gen); err != nil {
		t.Fatalf("system profile points at %q: %v", link, err)
	}
	roster := writeFileJSON(t, t.TempDir(), "roster.json", map[string]any{
		"timings": map[string]string{"settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"rollout": map[string]any{"canary": 1, "failure_budget": 0},
		"nodes":   map[string]any{n.Name: map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey, "toplevel": good}},
	})
	deploy := func() jsonNode {
		t.Helper()
		stdout, stderr, code := runCLI(t, bin, "deploy", "--output", "json", "--roster", roster)
		var out jsonSummary
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != 0 || len(out.Nodes) != 1 {
			t.Fatalf("exit %d (%v):\n%s\nstderr:\n%s", code, err, stdout, stderr)
		}
		return out.Nodes[0]
	}

	if got := deploy(); !got.OK || got.Resumed || switchSkipped(got) {
		t.Fatalf("first rollout: ok %v resumed %v switch skipped %v, want a deploy", got.OK, got.Resumed, switchSkipped(got))
	}
	if running, boots := readlink(t, n.Instance, "/run/current-system"), readlink(t, n.Instance, "/nix/var/nix/profiles/system"); running != good || boots != good {
		t.Fatalf("after the first rollout the node runs %s and boots %s, want %s", running, boots, good)
	}
	exec(fmt.Sprintf("nix-env --profile /nix/var/nix/profiles/system --switch-generation %d", gen))
	boots := readlink(t, n.Instance, "/nix/var/nix/profiles/system")
	if boots == good {
		t.Fatalf("the profile still points at %s after switching to generation %d", good, gen)
	}
	// What a provider whose state named the old system reads of this node.
	refresh := deploybody.JudgeDrift(deploybody.DriftQuestion{Node: n.Name, Known: boots}, deploybody.NodeSystem{Running: good, Profile: boots})
	if refresh.Decision != deploybody.DriftUnfinishedSwitch {
		t.Fatalf("the provider's refresh decides %s of the node, want %s", refresh.Decision, deploybody.DriftUnfinishedSwitch)
	}
	why := "not resumed: " + refresh.Fact + " It is deployed again."

	got := deploy()
	if !got.OK || got.Resumed || switchSkipped(got) {
		t.Errorf("second rollout: ok %v resumed %v switch skipped %v; want the node deployed again, not resumed (warnings %q)", got.OK, got.Resumed, switchSkipped(got), got.Warnings)
	}
	if len(got.Warnings) == 0 || got.Warnings[0] != why {
		t.Errorf("second rollout: warnings %q, want first %q", got.Warnings, why)
	}
	if boots := readlink(t, n.Instance, "/nix/var/nix/profiles/system"); boots != good {
		t.Errorf("after the second rollout the node boots %s, want %s", boots, good)
	}
}
