package deploybody

import (
	"reflect"
	"strings"
	"testing"
)

// A unit marked restartIfChanged = false that changed keeps running its old code after
// a real switch (switch-to-configuration says "NOT restarting the following changed
// units: …"): the verdict and the summary of changes say "changed, not restarted
// (restartIfChanged = false)", the verdict still passes, and the unit is not listed as
// if its change took.
func TestNotRestartedUnitIsSaidSo(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}, "db.service": {b: runs}})
	s.addOwnedUnitFile("web.service", plainService+"X-RestartIfChanged=false\n")
	s.node.notRestarting = []string{"web.service"}
	s.node.unitDigests = map[string]string{"web.service": digest("old web unit"), "db.service": digest(plainService)}
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	want := []string{"web.service: changed, not restarted (restartIfChanged = false)"}
	if !reflect.DeepEqual(res.Verdict.NotRestarted, want) || !res.Verdict.OK {
		t.Fatalf("verdict not restarted = %q (ok %v), want %q", res.Verdict.NotRestarted, res.Verdict.OK, want)
	}
	if !reflect.DeepEqual(res.Changes.UnitsNotRestarted, want) || !reflect.DeepEqual(res.Changes.UnitsChanged, []string{"web.service"}) {
		t.Fatalf("changes: not restarted %q, changed %q", res.Changes.UnitsNotRestarted, res.Changes.UnitsChanged)
	}
	for _, line := range []string{"not restarted:", "units not restarted:"} {
		if !strings.Contains(res.Report, line+" ") || !strings.Contains(res.Report, want[0]) {
			t.Fatalf("report lacks %q %q:\n%s", line, want[0], res.Report)
		}
	}
}

// After a reboot every unit runs its new file: nothing is "not restarted".
func TestNotRestartedNotAfterAReboot(t *testing.T) {
	s := newScenario(t, map[string]unitSpec{"web.service": {b: runs}})
	s.addOwnedUnitFile("web.service", plainService+"X-RestartIfChanged=false\n")
	s.node.notRestarting = []string{"web.service"} // what a switch would have said
	s.opts.Activation = ActivationReboot
	res, err := s.deploy()
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if len(res.Verdict.NotRestarted) != 0 || len(res.Changes.UnitsNotRestarted) != 0 || strings.Contains(res.Report, "not restarted") {
		t.Fatalf("a rebooted node has no unit left running: %q %q\n%s", res.Verdict.NotRestarted, res.Changes.UnitsNotRestarted, res.Report)
	}
}

// Why switch-to-configuration does not restart a changed unit, read as it reads it
// (parse_unit, parse_systemd_bool): the file and its drop-ins in order, an empty
// assignment clearing what came before, the last value deciding, and only "1", "yes",
// "true", "on" true.
func TestNoRestartReason(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		unit  string
		want  string
	}{
		{"plain", map[string]string{"a.service": plainService}, "a.service", ""},
		{"restartIfChanged = false", map[string]string{"a.service": plainService + "X-RestartIfChanged=false\n"}, "a.service", "restartIfChanged = false"},
		{"in [Unit] it means nothing", map[string]string{"a.service": "[Unit]\nX-RestartIfChanged=false\n[Service]\nExecStart=/bin/true\n"}, "a.service", ""},
		{"set by a drop-in", map[string]string{"a.service": plainService, "a.service.d/overrides.conf": "[Service]\nX-RestartIfChanged=false\n"}, "a.service", "restartIfChanged = false"},
		{"a later drop-in sets it back", map[string]string{"a.service": plainService + "X-RestartIfChanged=false\n",
			"a.service.d/10-a.conf": "[Service]\nX-RestartIfChanged=yes\n"}, "a.service", ""},
		{"an empty assignment clears it", map[string]string{"a.service": plainService + "X-RestartIfChanged=false\n",
			"a.service.d/overrides.conf": "[Service]\nX-RestartIfChanged=\n"}, "a.service", ""},
		{"True is not true", map[string]string{"a.service": plainService + "X-RestartIfChanged=True\n"}, "a.service", "restartIfChanged = false"},
		{"RefuseManualStop", map[string]string{"a.service": "[Unit]\nRefuseManualStop=yes\n[Service]\nExecStart=/bin/true\n"}, "a.service", "RefuseManualStop = true"},
		{"X-OnlyManualStart", map[string]string{"a.service": "[Unit]\nX-OnlyManualStart=true\n"}, "a.service", "X-OnlyManualStart = true"},
		{"an instance reads its template and both drop-ins", map[string]string{"a@.service": plainService,
			"a@x.service.d/overrides.conf": "[Service]\nX-RestartIfChanged=0\n"}, "a@x.service", "restartIfChanged = false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeClosure(t, root, testToplevel, closureSpec{units: tc.files})
			if got := noRestartReason(localTree{root: root}, testToplevel, tc.unit); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The switch's own line, as switch-to-configuration-ng prints it.
func TestNotRestartedBySwitch(t *testing.T) {
	sr := SwitchResult{Stderr: "stopping the following units: x.service\nNOT restarting the following changed units: b.service, a@x.service, not a unit\nactivating the configuration...\n"}
	if got := notRestartedBySwitch(sr); !reflect.DeepEqual(got, []string{"a@x.service", "b.service"}) {
		t.Fatalf("got %q", got)
	}
	if got := notRestartedBySwitch(SwitchResult{Stderr: "would NOT stop the following changed units: a.service\n"}); len(got) != 0 {
		t.Fatalf("a dry activation's line is not a switch's: %q", got)
	}
}
