package main

import (
	"bufio"
	"io"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
)

// The metrics export (--metrics): the Prometheus text format, for node_exporter's
// textfile collector (point --metrics at a *.prom file in its directory). One series
// per node (label node), from the summary --json prints. Nodes the submission
// disables have none.

// metricFamily is one metric: its name, help, and the value of each node that has one.
type metricFamily struct {
	name, help string
	value      func(n jsonNode) (float64, bool)
}

var nodeMetrics = []metricFamily{
	{"fediversity_verdict_ok",
		"1 if the node's verdict in the last run was ok, 0 if not (failed, unreachable, not deployed, or not attempted by a halted rollout); absent when an interrupt cut the node's run short (fediversity_node_interrupted).",
		func(n jsonNode) (float64, bool) { return boolValue(n.OK), !n.Interrupted }},
	{"fediversity_node_interrupted",
		"1 if an interrupt (Ctrl-C, SIGTERM) cut the node's run short in the last run, so it has no verdict: neither ok nor a failed deploy; 0 if not.",
		func(n jsonNode) (float64, bool) { return boolValue(n.Interrupted), true }},
	{"fediversity_node_attempted",
		"1 if the last run judged the node, 0 if a halted rollout left it alone (not attempted).",
		func(n jsonNode) (float64, bool) { return boolValue(n.NotAttempted == ""), true }},
	{"fediversity_failed_units",
		"Units the node's last verdict found failed (none when the verdict could not read them).",
		verdictCount(func(v *jsonVerdict) (int, bool) { return len(v.Failed), v.Failed != nil })},
	{"fediversity_restart_looping_units",
		"Units the node's last verdict saw in a restart loop during its watch, within their loop budget or past it.",
		verdictCount(func(v *jsonVerdict) (int, bool) { return len(v.RestartLoops), v.RestartLoops != nil })},
	{"fediversity_never_spawned_units",
		"Units systemd never spawned on the node in its last verdict (the system's own and the host's).",
		verdictCount(func(v *jsonVerdict) (int, bool) {
			return len(v.NeverSpawnedClosure) + len(v.NeverSpawnedHost), v.NeverSpawnedClosure != nil || v.NeverSpawnedHost != nil
		})},
	{"fediversity_deploy_seconds",
		"Seconds the node's last run took: the deploy (fediversity deploy), the switch back (rollback) or the verdict pass (verdict).",
		func(n jsonNode) (float64, bool) { return n.Seconds, n.NotAttempted == "" }},
}

// The time of the last ok verdict is the process's own knowledge, not the node's
// record: the end of this run when its verdict is ok; `verdict --every` keeps it
// across its passes, so a node that turns bad keeps the time it was last ok. A node
// never seen ok by this process has none.
const lastOKHelp = "Unix time of the node's last ok verdict seen by this fediversity process (a one-shot run: this run, when ok; verdict --every: its passes); absent when it saw none."

const exportTimeHelp = "Unix time the fediversity command wrote this file (its run ended): an old value means the runs stopped."

// writeMetrics writes the run's metrics; lastOK holds each node's time of its last ok
// verdict, and now is when the run ended. The families are made as client_model's
// protobuf types and written by expfmt, the Prometheus libraries' own text encoder (it
// escapes label values and formats numbers as the parser reads them); a family without
// a sample (no node has a last ok verdict yet) is left out, as the encoder wants.
func writeMetrics(w io.Writer, s jsonSummary, lastOK map[string]time.Time, now time.Time) error {
	nodes := make([]jsonNode, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		if !n.Disabled {
			nodes = append(nodes, n)
		}
	}
	var families []*dto.MetricFamily
	for _, m := range nodeMetrics {
		f := gaugeFamily(m.name, m.help)
		for _, n := range nodes {
			if v, ok := m.value(n); ok {
				f.Metric = append(f.Metric, nodeGauge(n.Node, v))
			}
		}
		families = append(families, f)
	}
	lastOKFamily := gaugeFamily("fediversity_last_ok_verdict_timestamp_seconds", lastOKHelp)
	for _, n := range nodes {
		if t, ok := lastOK[n.Node]; ok {
			lastOKFamily.Metric = append(lastOKFamily.Metric, nodeGauge(n.Node, float64(t.UnixMilli())/1000))
		}
	}
	exported := gaugeFamily("fediversity_export_timestamp_seconds", exportTimeHelp)
	exported.Metric = []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(float64(now.UnixMilli()) / 1000)}}}
	families = append(families, lastOKFamily, exported)
	b := bufio.NewWriter(w)
	for _, f := range families {
		if len(f.Metric) == 0 {
			continue
		}
		if _, err := expfmt.MetricFamilyToText(b, f); err != nil {
			return err
		}
	}
	return b.Flush()
}

func gaugeFamily(name, help string) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_GAUGE.Enum()}
}

// nodeGauge is one node's sample, labelled node.
func nodeGauge(node string, v float64) *dto.Metric {
	return &dto.Metric{
		Label: []*dto.LabelPair{{Name: proto.String("node"), Value: proto.String(node)}},
		Gauge: &dto.Gauge{Value: proto.Float64(v)},
	}
}

// verdictCount is a count from the node's verdict, when it has one and could read it.
func verdictCount(count func(*jsonVerdict) (int, bool)) func(jsonNode) (float64, bool) {
	return func(n jsonNode) (float64, bool) {
		if n.Verdict == nil || n.Verdict.Unreachable {
			return 0, false
		}
		c, ok := count(n.Verdict)
		return float64(c), ok
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
