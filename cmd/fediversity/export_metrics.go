package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
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
// verdict, and now is when the run ended.
func writeMetrics(w io.Writer, s jsonSummary, lastOK map[string]time.Time, now time.Time) error {
	b := bufio.NewWriter(w)
	nodes := make([]jsonNode, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		if !n.Disabled {
			nodes = append(nodes, n)
		}
	}
	for _, m := range nodeMetrics {
		header(b, m.name, m.help)
		for _, n := range nodes {
			if v, ok := m.value(n); ok {
				sample(b, m.name, n.Node, v)
			}
		}
	}
	header(b, "fediversity_last_ok_verdict_timestamp_seconds", lastOKHelp)
	for _, n := range nodes {
		if t, ok := lastOK[n.Node]; ok {
			sample(b, "fediversity_last_ok_verdict_timestamp_seconds", n.Node, float64(t.UnixMilli())/1000)
		}
	}
	header(b, "fediversity_export_timestamp_seconds", exportTimeHelp)
	fmt.Fprintf(b, "fediversity_export_timestamp_seconds %s\n", formatValue(float64(now.UnixMilli())/1000))
	return b.Flush()
}

func header(w io.Writer, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
}

func sample(w io.Writer, name, node string, v float64) {
	fmt.Fprintf(w, "%s{node=\"%s\"} %s\n", name, labelValue(node), formatValue(v))
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

func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// labelValue escapes a label value as the text format wants: backslash, double quote
// and line feed.
var labelValue = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace
