package main

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/labtest"
)

// The command with --activation reboot-if-needed on a group of three real lab nodes,
// from the real binary. Every node first boots kernel-a (--activation reboot: a lab
// node first boots its base system, whose kernel is not kernel-a's). Then two nodes get kernel-b (a new kernel) and one
// kernel-a-v2 (the same kernel, other units): before anything is copied the command
// says which nodes it will reboot and why, in the plan's words; the two reboot into
// kernel-b (booted and running it) with an ok verdict that says why and how long the
// boot took; the third switches without a reboot (it still runs the boot it had).
func TestLabCLIActivationRebootIfNeeded(t *testing.T) {
	labtest.Require(t)
	bin := buildCLI(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	kernelA := labtest.BuildClosure(t, "kernel-a")
	kernelAv2 := labtest.BuildClosure(t, "kernel-a-v2")
	kernelB := labtest.BuildClosure(t, "kernel-b")
	var nodes []labtest.Node
	for _, n := range []string{"rin-a", "rin-b", "rin-c"} {
		nodes = append(nodes, labtest.NewInstance(t, n))
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	rebooted, same := []string{nodes[0].Name, nodes[1].Name}, nodes[2].Name

	dir := t.TempDir()
	rn := map[string]any{}
	roster := map[string]any{
		"timings": map[string]string{"node_wait": "150s", "settle": "1s", "watch": "3s", "sample_interval": "1s"},
		"nodes":   rn,
	}
	byName := map[string]labtest.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	setToplevel := func(node, toplevel string) {
		n := byName[node]
		rn[node] = map[string]any{"host": n.SSHHost, "port": n.SSHPort, "host_key": n.HostKey, "toplevel": toplevel}
	}
	deploy := func(args ...string) (jsonSummary, string) {
		t.Helper()
		rosterFile := writeFileJSON(t, dir, "roster.json", roster)
		stdout, stderr, code := runCLI(t, bin, append([]string{"deploy", "--output", "json", "--roster", rosterFile}, args...)...)
		var out jsonSummary
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != exitOK {
			t.Fatalf("exit %d (%v), want 0:\n%s\nstderr:\n%s", code, err, stdout, stderr)
		}
		return out, stderr
	}
	for _, n := range nodes {
		setToplevel(n.Name, kernelA)
	}
	deploy("--activation", "reboot")

	for _, n := range rebooted {
		setToplevel(n, kernelB)
	}
	setToplevel(same, kernelAv2)
	out, stderr := deploy("--activation", "reboot-if-needed")
	t.Logf("stderr:\n%s", stderr)
	why := labtest.KernelTriggerWhy(t, kernelA, kernelB)
	activation := map[string]string{}
	for _, n := range out.Nodes {
		if n.Verdict != nil {
			activation[n.Node] = n.Verdict.Activation
		}
	}
	for _, n := range rebooted {
		if want := "node " + n + " will reboot: " + why + "\n"; !strings.Contains(stderr, want) {
			t.Errorf("the command did not say %q before deploying", want)
		}
		if re := regexp.MustCompile(`^rebooted \(` + regexp.QuoteMeta(why) + `\); boot took \d`); !re.MatchString(activation[n]) {
			t.Errorf("%s: verdict activation %q, want %s", n, activation[n], re)
		}
		for _, link := range []string{"/run/booted-system", "/run/current-system"} {
			if got := readlink(t, n, link); got != kernelB {
				t.Errorf("%s: %s = %s, want kernel-b %s", n, link, got, kernelB)
			}
		}
	}
	if strings.Contains(stderr, "node "+same+" will reboot") {
		t.Errorf("the command says %s will reboot; its kernel did not change", same)
	}
	if activation[same] != "switched" {
		t.Errorf("%s: verdict activation %q, want switched", same, activation[same])
	}
	if got := readlink(t, same, "/run/current-system"); got != kernelAv2 {
		t.Errorf("%s runs %s, want kernel-a-v2 %s", same, got, kernelAv2)
	}
	if got := readlink(t, same, "/run/booted-system"); got != kernelA {
		t.Errorf("%s booted %s, want still kernel-a %s (no reboot)", same, got, kernelA)
	}
}
