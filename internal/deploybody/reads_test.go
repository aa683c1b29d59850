package deploybody

import (
	"slices"
	"testing"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

func TestUnreadReason(t *testing.T) {
	if r := unreadReason(RunResult{ExitCode: 1, Stderr: []byte("\nFailed to connect to bus: No such file or directory\n")}); r != "Failed to connect to bus: No such file or directory" {
		t.Fatalf("reason = %q", r)
	}
	if r := unreadReason(RunResult{ExitCode: 1}); r != "systemctl exited 1" {
		t.Fatalf("reason = %q", r)
	}
	if r := unreadReason(RunResult{}); r != "" {
		t.Fatalf("reason = %q", r)
	}
}

func TestParseManagerState(t *testing.T) {
	m, unread := parseManagerState(RunResult{Stdout: []byte("NFailedUnits=2\nNJobs=0\nSystemState=degraded\n")})
	if unread != "" || m != (managerState{state: "degraded", failed: 2}) {
		t.Fatalf("got %+v, unread %q", m, unread)
	}
	// Never "none" for an answer that does not say so.
	for name, res := range map[string]RunResult{
		"systemd did not answer": {ExitCode: 1, Stderr: []byte("Failed to connect to bus: No such file or directory\n")},
		"a property missing":     {Stdout: []byte("NFailedUnits=0\nSystemState=running\n")},
		"a count that is none":   {Stdout: []byte("NFailedUnits=x\nNJobs=0\nSystemState=running\n")},
		"a negative count":       {Stdout: []byte("NFailedUnits=0\nNJobs=-1\nSystemState=running\n")},
		"no state":               {Stdout: []byte("NFailedUnits=0\nNJobs=0\nSystemState=\n")},
		"nothing":                {},
	} {
		if m, unread := parseManagerState(res); unread == "" {
			t.Errorf("%s: read as %+v", name, m)
		}
	}
}

// A sample of a node with nothing failed and no job asks systemd twice (its own state
// and counts, the units' states); the failed units and the jobs are listed in a second
// round trip only while systemd counts some, and what they list is judged.
func TestWatchListsFailedUnitsAndJobsOnlyWhenSystemdCountsThem(t *testing.T) {
	listsInWatch := func(s *scenario) (failedLists, jobLists, samples int) {
		watching := false
		for _, c := range s.node.calls {
			if c.what != "run" || len(c.argv) < 2 || c.argv[0] != "systemctl" {
				continue
			}
			switch {
			case slices.Equal(c.argv, cmdManagerState):
				watching = true
				samples++
			case watching && slices.Equal(c.argv, cmdListFailed):
				failedLists++
			case watching && slices.Equal(c.argv, cmdListJobs):
				jobLists++
			}
		}
		return
	}
	healthy := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	if _, err := healthy.deploy(); err != nil {
		t.Fatal(err)
	}
	if f, j, n := listsInWatch(healthy); n == 0 || f != 0 || j != 0 {
		t.Fatalf("healthy node: %d samples listed the failed units %d times and the jobs %d times; want samples and no lists", n, f, j)
	}
	broken := newScenario(t, map[string]unitSpec{"web.service": {b: fails}, "slow.service": {b: stuck}})
	res, err := broken.deploy()
	if err == nil || res.Verdict == nil || !slices.ContainsFunc(res.Verdict.Failed, func(f judge.FailedUnit) bool { return f.Unit == "web.service" }) {
		t.Fatalf("failed = %v, err %v; want web.service failed", res.Verdict.Failed, err)
	}
	if f, j, n := listsInWatch(broken); f != n || j != n {
		t.Fatalf("a failed unit and a start job: %d samples listed the failed units %d times and the jobs %d times; want every sample to list both", n, f, j)
	}
}
