package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
	"github.com/fediversity/terraform-provider-fediversity/internal/noderun"
)

// exportOutcomes are a halted rollout's nodes as the fleet engine returns them: a
// failing node (a failed unit), an ok node, a node the halt left alone, and one the
// submission disables.
func exportOutcomes() []fleet.Outcome {
	return []fleet.Outcome{
		{Node: "web01", Elapsed: 1500 * time.Millisecond, Wave: 1, Outcome: noderun.Outcome{Result: &deploybody.Result{
			Report: "unit broken.service: failed (exit-code)\nsystem state: degraded\n",
			Verdict: &judge.Verdict{SystemState: "degraded", Strict: true,
				Failed:              []judge.FailedUnit{{Unit: "broken.service", Result: "exit-code"}},
				RestartLoops:        []judge.LoopingUnit{{Unit: "flappy.service", NRestarts: 9, Budget: 2, PastBudget: true}},
				NeverSpawnedClosure: []judge.SpawnFault{{Unit: "nobin.service", Status: 203, Reason: "exec"}},
				NeverSpawnedHost:    []judge.SpawnFault{},
				Reasons:             []string{"unit broken.service failed (exit-code)", "unit flappy.service restarted 9 times (budget 2)"}}}}},
		{Node: "web02", Elapsed: 2 * time.Second, Wave: 1, Outcome: noderun.Outcome{Result: &deploybody.Result{
			Verdict: &judge.Verdict{OK: true, SystemState: "running", Failed: []judge.FailedUnit{},
				RestartLoops: []judge.LoopingUnit{}, NeverSpawnedClosure: []judge.SpawnFault{}, NeverSpawnedHost: []judge.SpawnFault{}}}}},
		{Node: "web03", Wave: 2, NotAttempted: "the rollout halted after wave 1 (1 of 3 failed, budget 0)"},
		{Node: "web04", Disabled: true},
	}
}

func TestJUnitExportValidatesAgainstTheSchemaAndFailsTheFailingNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.xml")
	e := &exports{junit: path, command: "deploy", roster: "nodes.json"}
	start := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	if err := e.write(summarize(exportOutcomes(), nil), start, start.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	doc := readJUnit(t, path)
	if len(doc.Suites) != 1 {
		t.Fatalf("want one test suite for the group, got %d", len(doc.Suites))
	}
	suite := doc.Suites[0]
	if suite.Name != "fediversity deploy" || suite.Tests != 4 || suite.Failures != 1 || suite.Skipped != 2 {
		t.Errorf("suite %q: tests %d failures %d skipped %d, want fediversity deploy: 4, 1, 2", suite.Name, suite.Tests, suite.Failures, suite.Skipped)
	}
	cases := map[string]junitTestcase{}
	for _, c := range suite.Cases {
		cases[c.Name] = c
	}
	web01 := cases["web01"]
	if web01.Failure == nil || web01.Skipped != nil {
		t.Fatalf("web01 (a failed unit) is not a failure: %+v", web01)
	}
	if m := web01.Failure.Message; !strings.Contains(m, "unit broken.service failed (exit-code)") || !strings.Contains(m, "flappy.service restarted 9 times") {
		t.Errorf("web01's failure message lacks its reasons: %q", m)
	}
	if !strings.Contains(web01.Failure.Text, "system state: degraded") {
		t.Errorf("web01's failure text lacks its report: %q", web01.Failure.Text)
	}
	if web01.Time != "1.500" {
		t.Errorf("web01's time %q, want 1.500", web01.Time)
	}
	if c := cases["web02"]; c.Failure != nil || c.Skipped != nil {
		t.Errorf("web02 (ok) is not a passed case: %+v", c)
	}
	if c := cases["web03"]; c.Skipped == nil || !strings.Contains(c.Skipped.Message, "not attempted: the rollout halted after wave 1") || c.Failure != nil {
		t.Errorf("web03 (not attempted) is not skipped with the halt's reason: %+v", c)
	}
	if c := cases["web04"]; c.Skipped == nil || !strings.Contains(c.Skipped.Message, "disabled") {
		t.Errorf("web04 (disabled) is not skipped as disabled: %+v", c)
	}
}

// readJUnit validates the JUnit file against the vendored schema with xmllint, then
// parses it.
func readJUnit(t *testing.T, path string) junitTestsuites {
	t.Helper()
	xmllint, err := exec.LookPath("xmllint")
	if err != nil {
		t.Fatal("xmllint is missing: install libxml2-utils (lab/install-host.sh does); the JUnit file is validated with it against testdata/junit-10.xsd")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(xmllint, "--noout", "--schema", "testdata/junit-10.xsd", path).CombinedOutput(); err != nil {
		t.Fatalf("the JUnit file does not validate against junit-10.xsd: %v\n%s\n%s", err, out, b)
	}
	var doc junitTestsuites
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the JUnit file does not parse: %v\n%s", err, b)
	}
	return doc
}

func TestMetricsExportParsesWithThePrometheusParser(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fediversity.prom")
	e := &exports{metrics: path, command: "deploy"}
	end := time.Date(2026, 12, 2, 3, 0, 3, 0, time.UTC)
	if err := e.write(summarize(exportOutcomes(), nil), end.Add(-3*time.Second), end); err != nil {
		t.Fatal(err)
	}
	m := readMetrics(t, path)
	for name, want := range map[string]map[string]float64{
		"fediversity_verdict_ok":            {"web01": 0, "web02": 1, "web03": 0},
		"fediversity_node_attempted":        {"web01": 1, "web02": 1, "web03": 0},
		"fediversity_failed_units":          {"web01": 1, "web02": 0},
		"fediversity_restart_looping_units": {"web01": 1, "web02": 0},
		"fediversity_never_spawned_units":   {"web01": 1, "web02": 0},
		"fediversity_deploy_seconds":        {"web01": 1.5, "web02": 2},
		// Only the node whose verdict was ok in this one-shot run has one.
		"fediversity_last_ok_verdict_timestamp_seconds": {"web02": float64(end.Unix())},
	} {
		if got := m[name]; !equalValues(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	if got := m["fediversity_export_timestamp_seconds"][""]; got != float64(end.Unix()) {
		t.Errorf("fediversity_export_timestamp_seconds: got %v, want %d", got, end.Unix())
	}
}

// Node names reach the label as written, quotes, backslashes and line feeds included
// (expfmt escapes them), and a run in which no node was ok yet still writes a file the
// parser reads: the last-ok family, which has no sample then, is left out.
func TestMetricsExportEscapesNodeNamesAndOmitsEmptyFamilies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fediversity.prom")
	e := &exports{metrics: path, command: "verdict"}
	odd := "web\\01 \"eu\"\nrack 2"
	failing := []fleet.Outcome{{Node: odd, Elapsed: time.Second, Outcome: noderun.Outcome{Result: &deploybody.Result{
		Verdict: &judge.Verdict{Reasons: []string{"unit x.service failed"}, Failed: []judge.FailedUnit{{Unit: "x.service"}}}}}}}
	end := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	if err := e.write(summarize(failing, nil), end.Add(-time.Second), end); err != nil {
		t.Fatal(err)
	}
	m := readMetrics(t, path)
	if got, ok := m["fediversity_verdict_ok"][odd]; !ok || got != 0 {
		t.Errorf("fediversity_verdict_ok of %q: %v (present %v), want 0: %v", odd, got, ok, m["fediversity_verdict_ok"])
	}
	if got := m["fediversity_failed_units"][odd]; got != 1 {
		t.Errorf("fediversity_failed_units of %q: %v, want 1", odd, got)
	}
	if last, ok := m["fediversity_last_ok_verdict_timestamp_seconds"]; ok {
		t.Errorf("no node was ok, yet the file has last ok verdicts: %v", last)
	}
	if got := m["fediversity_export_timestamp_seconds"][""]; got != float64(end.Unix()) {
		t.Errorf("fediversity_export_timestamp_seconds: got %v, want %d", got, end.Unix())
	}
}

// readMetrics parses the file with the Prometheus text-format parser and returns each
// metric's value per node; it fails the test if a metric lacks its HELP or TYPE.
func readMetrics(t *testing.T, path string) map[string]map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(f)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("the metrics file does not parse: %v\n%s", err, b)
	}
	out := map[string]map[string]float64{}
	for name, mf := range families {
		if !strings.HasPrefix(name, "fediversity_") || mf.GetHelp() == "" || mf.GetType().String() != "GAUGE" {
			t.Errorf("metric %s: want the fediversity_ prefix, a HELP line and TYPE gauge: %v", name, mf)
		}
		out[name] = map[string]float64{}
		for _, metric := range mf.GetMetric() {
			node := ""
			for _, l := range metric.GetLabel() {
				if l.GetName() == "node" {
					node = l.GetValue()
				}
			}
			out[name][node] = metric.GetGauge().GetValue()
		}
	}
	return out
}

func equalValues(got, want map[string]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// verdict --every keeps each node's time of its last ok verdict across its passes: a
// node that turns bad keeps the time it was last ok, which is what an alert on "not ok
// for an hour" needs.
func TestLastOKVerdictOutlivesAFailingPass(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fediversity.prom")
	e := &exports{metrics: path, command: "verdict"}
	okPass := exportOutcomes()[1:2]
	first := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	if err := e.write(summarize(okPass, nil), first.Add(-time.Second), first); err != nil {
		t.Fatal(err)
	}
	failing := exportOutcomes()[1:2]
	failing[0].Result = &deploybody.Result{Verdict: &judge.Verdict{Reasons: []string{"unit x.service failed"}}}
	second := first.Add(time.Minute)
	if err := e.write(summarize(failing, nil), second.Add(-time.Second), second); err != nil {
		t.Fatal(err)
	}
	m := readMetrics(t, path)
	if got := m["fediversity_verdict_ok"]["web02"]; got != 0 {
		t.Errorf("web02's verdict_ok after the failing pass: %v, want 0", got)
	}
	if got := m["fediversity_last_ok_verdict_timestamp_seconds"]["web02"]; got != float64(first.Unix()) {
		t.Errorf("web02's last ok verdict: %v, want the first pass's %d", got, first.Unix())
	}
}

// A reader sees the old file or the whole new one: a writer that fails half way
// leaves the old file as it was and no temporary file behind; one that succeeds
// leaves only the file, readable by another user (node_exporter).
func TestExportFilesAreReplacedWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fediversity.prom")
	if err := writeFileAtomically(path, func(w io.Writer) error { _, err := io.WriteString(w, "old\n"); return err }); err != nil {
		t.Fatal(err)
	}
	err := writeFileAtomically(path, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half of the new")
		return errors.New("disk full")
	})
	if err == nil {
		t.Fatal("a failing writer's error was lost")
	}
	if b, _ := os.ReadFile(path); string(b) != "old\n" {
		t.Errorf("a failed write changed the file: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left in the directory: %v", entries)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("the file's mode: %v (%v), want 0644", st.Mode(), err)
	}
}

func TestEveryAndExportFlagsAreCheckedBeforeAnything(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verdict", "--roster", "nodes.json", "--every", "500ms"}, "--every: 500ms: want 2s or more"},
		{[]string{"verdict", "--roster", "nodes.json", "--every", "-1m"}, "--every: -1m0s: want 2s or more"},
		{[]string{"deploy", "--roster", "nodes.json", "--junit", filepath.Join(dir, "no/such/dir/v.xml")}, "--junit: " + filepath.Join(dir, "no/such/dir/v.xml") + ": its directory"},
		{[]string{"rollback", "--roster", "nodes.json", "--junit", "x.out", "--metrics", "x.out"}, "--junit and --metrics: both name x.out"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stdout, &stderr, newNodePhases()); code != exitBadInput || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", c.args, code, stderr.String(), exitBadInput, c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"deploy", "--roster", "nodes.json", "--every", "1m"}, &stdout, &stderr, newNodePhases()); code != exitBadInput {
		t.Errorf("deploy --every: exit %d, want %d (only verdict repeats)", code, exitBadInput)
	}
}

// Issue 39, item 9: a node whose run a Ctrl-C cut short is interrupted, not failed: an
// error of type "interrupted" in JUnit (no failure), fediversity_node_interrupted 1 and
// no verdict_ok sample (it has no verdict) in the metrics, and "interrupted", not
// "failed", in the summary. On the current main it was a failure, verdict_ok 0.
func TestExportsSayInterruptedNotFailed(t *testing.T) {
	outcomes := []fleet.Outcome{
		{Node: "web02", Elapsed: 2 * time.Second, Outcome: noderun.Outcome{Result: &deploybody.Result{Verdict: &judge.Verdict{OK: true}}}},
		{Node: "web05", Elapsed: time.Second, Interrupted: true, Outcome: noderun.Outcome{Result: &deploybody.Result{}, Err: &deploybody.DeployError{Node: "web05", Phase: deploybody.PhaseSettle, Err: context.Canceled}}},
	}
	dir := t.TempDir()
	e := &exports{junit: filepath.Join(dir, "v.xml"), metrics: filepath.Join(dir, "m.prom"), command: "deploy"}
	end := time.Date(2026, 12, 2, 3, 0, 3, 0, time.UTC)
	s := summarize(outcomes, nil)
	if err := e.write(s, end.Add(-3*time.Second), end); err != nil {
		t.Fatal(err)
	}
	if len(s.Failed) != 0 || len(s.Interrupted) != 1 || s.Interrupted[0] != "web05" {
		t.Errorf("summary: failed %v, interrupted %v", s.Failed, s.Interrupted)
	}
	suite := readJUnit(t, e.junit).Suites[0]
	var web05 junitTestcase
	for _, c := range suite.Cases {
		if c.Name == "web05" {
			web05 = c
		}
	}
	if suite.Failures != 0 || suite.Errors != 1 || web05.Failure != nil || web05.Error == nil || web05.Error.Type != "interrupted" {
		t.Errorf("JUnit: failures %d, errors %d, web05 %+v", suite.Failures, suite.Errors, web05)
	}
	m := readMetrics(t, e.metrics)
	if _, ok := m["fediversity_verdict_ok"]["web05"]; ok || m["fediversity_node_interrupted"]["web05"] != 1 || m["fediversity_node_interrupted"]["web02"] != 0 {
		t.Errorf("metrics: verdict_ok %v, interrupted %v", m["fediversity_verdict_ok"], m["fediversity_node_interrupted"])
	}
}
