package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
	"github.com/fediversity/terraform-provider-fediversity/internal/fleet"
)

// writeTable prints one line per node, then the full report of every node that is not
// ok, so the reason is on screen without --json.
func writeTable(w io.Writer, outcomes []fleet.Outcome) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRESULT\tGENERATION\tTIME\tREASONS")
	for _, o := range outcomes {
		gen := "-"
		if o.Result != nil && o.Result.Generation > 0 {
			gen = fmt.Sprint(o.Result.Generation)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.Node, resultWord(o), gen, elapsed(o), strings.Join(reasons(o), "; "))
	}
	_ = tw.Flush()
	for _, o := range outcomes {
		if o.Result != nil && o.Result.Changes != nil {
			fmt.Fprintf(w, "%s: %s\n", o.Node, changesLine(o.Result.Changes))
		}
	}
	for _, o := range outcomes {
		for _, warning := range o.Warnings() {
			fmt.Fprintf(w, "%s: warning: %s\n", o.Node, warning)
		}
	}
	for _, o := range outcomes {
		if o.OK() || o.Disabled || o.NotAttempted != "" {
			continue
		}
		fmt.Fprintf(w, "\n--- %s\n", o.Node)
		if o.Err != nil {
			fmt.Fprintln(w, o.Err)
		}
		if o.Result != nil && o.Result.Report != "" {
			fmt.Fprintln(w, strings.TrimRight(o.Result.Report, "\n"))
		}
	}
	ok, failed, disabled, notAttempted, interrupted := counts(outcomes)
	fmt.Fprintf(w, "\n%d ok, %d failed, %d disabled by the submission", ok, failed, disabled)
	if notAttempted > 0 {
		fmt.Fprintf(w, ", %d not attempted", notAttempted)
	}
	if interrupted > 0 {
		fmt.Fprintf(w, ", %d interrupted", interrupted)
	}
	fmt.Fprintln(w)
}

func resultWord(o fleet.Outcome) string {
	switch {
	case o.Disabled:
		return "disabled"
	case o.NotAttempted != "":
		return "not attempted"
	case o.Interrupted:
		return "interrupted"
	case o.Result != nil && o.Result.Verdict != nil && o.Result.Verdict.Unreachable:
		return "unreachable"
	case o.OK() && o.Resumed:
		return "ok (resumed)"
	case o.OK():
		if len(o.Warnings()) > 0 || (o.Result.Verdict != nil && len(o.Result.Verdict.Reasons) > 0) {
			return "ok (warnings)"
		}
		return "ok"
	default:
		return "FAILED"
	}
}

func reasons(o fleet.Outcome) []string {
	if o.NotAttempted != "" {
		return []string{o.NotAttempted}
	}
	if o.Interrupted && o.Err != nil {
		return []string{"interrupted: " + firstLine(o.Err.Error())}
	}
	if o.Result != nil && o.Result.Verdict != nil && len(o.Result.Verdict.Reasons) > 0 {
		return o.Result.Verdict.Reasons
	}
	if o.Err != nil {
		return []string{firstLine(o.Err.Error())}
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func elapsed(o fleet.Outcome) string {
	if o.Disabled || o.NotAttempted != "" {
		return "-"
	}
	return o.Elapsed.Round(100 * time.Millisecond).String()
}

func counts(outcomes []fleet.Outcome) (ok, failed, disabled, notAttempted, interrupted int) {
	for _, o := range outcomes {
		switch {
		case o.Disabled:
			disabled++
		case o.NotAttempted != "":
			notAttempted++
		case o.Interrupted:
			interrupted++
		case o.OK():
			ok++
		default:
			failed++
		}
	}
	return
}

// jsonNode is one node in --json output. Field names are stable.
type jsonNode struct {
	Node     string `json:"node"`
	OK       bool   `json:"ok"`
	Disabled bool   `json:"disabled,omitempty"`
	// Wave is the node's wave in the rollout (from 1; the canary is wave 1).
	Wave int `json:"wave,omitempty"`
	// NotAttempted says why the rollout left the node alone (it halted before its turn).
	NotAttempted string `json:"not_attempted,omitempty"`
	// Interrupted: the run was interrupted while the node's run was under way, and it
	// ended with no verdict (Error says where). Not a failed deploy.
	Interrupted bool `json:"interrupted,omitempty"`
	// Resumed: the node already ran this system with an ok verdict from an earlier
	// run; it was judged again, not switched.
	Resumed    bool         `json:"resumed,omitempty"`
	Error      string       `json:"error,omitempty"`
	Phase      string       `json:"failed_phase,omitempty"`
	Toplevel   string       `json:"toplevel,omitempty"`
	Generation int          `json:"generation,omitempty"`
	Running    string       `json:"running_system,omitempty"`
	Copied     *jsonCopy    `json:"copied,omitempty"`
	Seconds    float64      `json:"seconds"`
	Verdict    *jsonVerdict `json:"verdict,omitempty"`
	Report     string       `json:"report,omitempty"`
	Checks     []jsonCheck  `json:"checks,omitempty"`
	Changes    *jsonChanges `json:"changes,omitempty"`
	Phases     []jsonPhase  `json:"phases,omitempty"`
	// Warnings are every warning of the node's run (empty when none).
	Warnings []string `json:"warnings"`
	// reasons are the table's: why the node failed or was not attempted (the
	// exports' failure messages; not in --json, where the verdict and error say it).
	reasons []string
}

// jsonVerdict is the verdict with stable snake_case names (the attribute names of the
// provider's `verdict`). A list that could not be read is null, never empty.
type jsonVerdict struct {
	OK                  bool              `json:"ok"`
	Strict              bool              `json:"strict"`
	VerdictOnly         bool              `json:"verdict_only"`
	SystemState         string            `json:"system_state"`
	Unreachable         bool              `json:"unreachable"`
	Unread              []string          `json:"unread"`
	Samples             int               `json:"samples"`
	Answered            int               `json:"answered"`
	Failed              []jsonFailedUnit  `json:"failed_units"`
	SetAside            []string          `json:"set_aside_units"`
	RestartLoops        []jsonLoopingUnit `json:"restart_loops"`
	Cycling             []string          `json:"cycling_units"`
	StaleJobs           []jsonStaleJob    `json:"stale_jobs"`
	NeverSpawnedClosure []jsonSpawnFault  `json:"never_spawned_closure"`
	NeverSpawnedHost    []jsonSpawnFault  `json:"never_spawned_host"`
	SkippedOnCondition  []string          `json:"skipped_on_condition"`
	Restarted           []string          `json:"restarted_units"`
	// NotRestarted: the changed units the switch left running, as
	// "<unit>: changed, not restarted (restartIfChanged = false)".
	NotRestarted []string `json:"not_restarted_units,omitempty"`
	Reasons      []string `json:"reasons"`
	// Activation: how the node came to run the judged system ("switched", "rebooted
	// (kernel changed); boot took 24s", …), as the provider's verdict.activation.
	Activation string `json:"activation,omitempty"`
}

type jsonFailedUnit struct {
	Unit   string `json:"unit"`
	Result string `json:"result"`
	Origin string `json:"origin"`
}

type jsonLoopingUnit struct {
	Unit         string `json:"unit"`
	NRestarts    int    `json:"n_restarts"`
	Budget       int    `json:"budget"`
	PastBudget   bool   `json:"past_budget"`
	StillLooping bool   `json:"still_looping"`
}

type jsonStaleJob struct {
	Unit       string  `json:"unit"`
	JobID      int     `json:"job_id"`
	AgeSeconds float64 `json:"age_seconds"`
}

type jsonSpawnFault struct {
	Unit   string `json:"unit"`
	Status int    `json:"status"`
	Reason string `json:"reason"`
}

func verdictJSON(v *judge.Verdict) *jsonVerdict {
	if v == nil {
		return nil
	}
	out := &jsonVerdict{OK: v.OK, Strict: v.Strict, VerdictOnly: v.VerdictOnly, SystemState: v.SystemState,
		Unreachable: v.Unreachable, Unread: v.Unread, Samples: v.Samples, Answered: v.Answered,
		SetAside: v.SetAside, Cycling: v.Cycling, SkippedOnCondition: v.SkippedOnCondition,
		Restarted: v.Restarted, NotRestarted: v.NotRestarted, Reasons: v.Reasons, Activation: v.Activation}
	out.Failed = mapList(v.Failed, func(f judge.FailedUnit) jsonFailedUnit {
		return jsonFailedUnit{Unit: f.Unit, Result: f.Result, Origin: string(f.Origin)}
	})
	out.RestartLoops = mapList(v.RestartLoops, func(l judge.LoopingUnit) jsonLoopingUnit {
		return jsonLoopingUnit{Unit: l.Unit, NRestarts: l.NRestarts, Budget: l.Budget, PastBudget: l.PastBudget, StillLooping: l.StillLooping}
	})
	out.StaleJobs = mapList(v.StaleJobs, func(j judge.StaleJob) jsonStaleJob {
		return jsonStaleJob{Unit: j.Unit, JobID: j.JobID, AgeSeconds: j.Age.Seconds()}
	})
	spawn := func(f judge.SpawnFault) jsonSpawnFault {
		return jsonSpawnFault{Unit: f.Unit, Status: f.Status, Reason: f.Reason}
	}
	out.NeverSpawnedClosure = mapList(v.NeverSpawnedClosure, spawn)
	out.NeverSpawnedHost = mapList(v.NeverSpawnedHost, spawn)
	return out
}

// mapList maps a list, keeping nil (unread) apart from empty.
func mapList[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

type jsonCheck struct {
	Name             string  `json:"name"`
	Kind             string  `json:"kind"`
	OK               bool    `json:"ok"`
	Attempts         int     `json:"attempts"`
	SecondsToFirstOK float64 `json:"seconds_to_first_pass"`
	LastOutputTail   string  `json:"last_output,omitempty"`
}

// jsonChanges is what the deploy changed; a list that could not be known is null.
type jsonChanges struct {
	PreviousSystem       string   `json:"previous_system"`
	PreviousClosureKnown bool     `json:"previous_closure_known"`
	PathsAdded           []string `json:"paths_added"`
	PathsRemoved         []string `json:"paths_removed"`
	PackagesAdded        []string `json:"packages_added"`
	PackagesRemoved      []string `json:"packages_removed"`
	PackagesChanged      []string `json:"packages_changed"`
	PathsCopied          int      `json:"paths_copied"`
	BytesCopied          int64    `json:"bytes_copied"`
	UnitsAdded           []string `json:"units_added"`
	UnitsRemoved         []string `json:"units_removed"`
	UnitsChanged         []string `json:"units_changed"`
	UnitsNotRestarted    []string `json:"units_not_restarted"`
	// Counts is every known list's full length: each list keeps its first
	// deploybody.ChangesListLimit names.
	Counts map[string]int `json:"counts,omitempty"`
	Notes  []string       `json:"notes,omitempty"`
}

func changesJSON(c *deploybody.Changes) *jsonChanges {
	if c == nil {
		return nil
	}
	return &jsonChanges{PreviousSystem: c.PreviousSystem, PreviousClosureKnown: c.PreviousClosureKnown,
		PathsAdded: c.PathsAdded, PathsRemoved: c.PathsRemoved, PackagesAdded: c.PackagesAdded,
		PackagesRemoved: c.PackagesRemoved, PackagesChanged: c.PackagesChanged, PathsCopied: c.PathsCopied,
		BytesCopied: c.BytesCopied, UnitsAdded: c.UnitsAdded, UnitsRemoved: c.UnitsRemoved,
		UnitsChanged: c.UnitsChanged, UnitsNotRestarted: c.UnitsNotRestarted, Counts: c.Counts, Notes: c.Notes}
}

// changesLine is the one-line summary of what a deploy changed, for the table.
func changesLine(c *deploybody.Changes) string {
	if c == nil {
		return ""
	}
	parts := []string{fmt.Sprintf("%d paths copied (%d bytes)", c.PathsCopied, c.BytesCopied)}
	add := func(name string, l []string) {
		if len(l) == 0 {
			return
		}
		part := strings.ReplaceAll(name, "_", " ") + ": " + strings.Join(l, ", ")
		if n := c.Counts[name]; n > len(l) {
			part += fmt.Sprintf(", … (%d in all)", n)
		}
		parts = append(parts, part)
	}
	add("packages_changed", c.PackagesChanged)
	add("packages_added", c.PackagesAdded)
	add("packages_removed", c.PackagesRemoved)
	add("units_changed", c.UnitsChanged)
	add("units_not_restarted", c.UnitsNotRestarted)
	add("units_added", c.UnitsAdded)
	add("units_removed", c.UnitsRemoved)
	return strings.Join(parts, "; ")
}

type jsonCopy struct {
	PathsTotal  int   `json:"paths_total"`
	PathsCopied int   `json:"paths_copied"`
	Bytes       int64 `json:"bytes"`
}

type jsonPhase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Note    string  `json:"note,omitempty"`
}

type jsonSummary struct {
	Nodes    []jsonNode `json:"nodes"`
	OK       []string   `json:"ok"`
	Failed   []string   `json:"failed"`
	Disabled []string   `json:"disabled"`
	// NotAttempted are the nodes a halted rollout left alone.
	NotAttempted []string `json:"not_attempted"`
	// Interrupted are the nodes whose run an interrupt cut short.
	Interrupted []string     `json:"interrupted"`
	Rollout     *jsonRollout `json:"rollout,omitempty"`
}

func writeJSON(w io.Writer, s jsonSummary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// summarize gathers every node's data once: --json prints it, and the JUnit and
// metrics exports are written from it.
func summarize(outcomes []fleet.Outcome, rollout *jsonRollout) jsonSummary {
	s := jsonSummary{Nodes: []jsonNode{}, OK: []string{}, Failed: []string{}, Disabled: []string{}, NotAttempted: []string{}, Interrupted: []string{}, Rollout: rollout}
	for _, o := range outcomes {
		n := jsonNode{Node: o.Node, OK: o.OK(), Disabled: o.Disabled, Seconds: o.Elapsed.Seconds(), Warnings: o.Warnings(),
			Wave: o.Wave, NotAttempted: o.NotAttempted, Interrupted: o.Interrupted, Resumed: o.Resumed, reasons: reasons(o)}
		if o.Err != nil {
			n.Error = o.Err.Error()
			var de *deploybody.DeployError
			if errors.As(o.Err, &de) {
				n.Phase = de.Phase
			}
		}
		if r := o.Result; r != nil {
			n.Toplevel, n.Generation, n.Running = r.Toplevel, r.Generation, r.RunningSystem
			n.Copied = &jsonCopy{PathsTotal: r.Copy.PathsTotal, PathsCopied: r.Copy.PathsMissing, Bytes: r.Copy.BytesSent}
			n.Verdict, n.Report = verdictJSON(r.Verdict), r.Report
			n.Changes = changesJSON(r.Changes)
			if r.Verdict != nil {
				for _, c := range r.Verdict.Checks {
					n.Checks = append(n.Checks, jsonCheck{Name: c.Name, Kind: c.Kind, OK: c.OK, Attempts: c.Attempts,
						SecondsToFirstOK: c.TimeToPass.Seconds(), LastOutputTail: c.Output})
				}
			}
			for _, p := range r.Phases {
				n.Phases = append(n.Phases, jsonPhase{Name: p.Name, Seconds: p.Duration.Seconds(), Note: p.Note})
			}
		}
		s.Nodes = append(s.Nodes, n)
		switch {
		case o.Disabled:
			s.Disabled = append(s.Disabled, o.Node)
		case o.NotAttempted != "":
			s.NotAttempted = append(s.NotAttempted, o.Node)
		case o.Interrupted:
			s.Interrupted = append(s.Interrupted, o.Node)
		case n.OK:
			s.OK = append(s.OK, o.Node)
		default:
			s.Failed = append(s.Failed, o.Node)
		}
	}
	return s
}

// progress shows each node's current phase on stderr: a live view (one line per node,
// redrawn in place) on a terminal, plain lines on a pipe.
type progress struct {
	w     io.Writer
	live  bool
	order []string
	line  map[string]string
	drawn int
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, line: map[string]string{}}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb" {
			p.live = true
		}
	}
	return p
}

func (p *progress) event(e fleet.Event) {
	text := e.Phase
	if e.Done {
		text = map[bool]string{true: "done: ok", false: "done: FAILED"}[e.OK]
	}
	msg := fmt.Sprintf("%-7s %s", e.Elapsed.Round(100*time.Millisecond), text)
	if !p.live {
		fmt.Fprintf(p.w, "%s: %s\n", e.Node, msg)
		return
	}
	if _, seen := p.line[e.Node]; !seen {
		p.order = append(p.order, e.Node)
		sort.Strings(p.order)
	}
	p.line[e.Node] = msg
	p.redraw()
}

func (p *progress) redraw() {
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn)
	}
	width := 0
	for _, n := range p.order {
		width = max(width, len(n))
	}
	for _, n := range p.order {
		fmt.Fprintf(&b, "\x1b[2K%-*s  %s\n", width, n, p.line[n])
	}
	p.drawn = len(p.order)
	_, _ = io.WriteString(p.w, b.String())
}

// wave says a rollout's wave starts; on a terminal its nodes' lines start a new block
// under it, so the waves before stay on screen as they ended.
func (p *progress) wave(number, waves int, nodes []string) {
	fmt.Fprintf(p.w, "rollout: wave %d of %d: %s\n", number, waves, strings.Join(nodes, ", "))
	p.order, p.line, p.drawn = nil, map[string]string{}, 0
}

// notice prints a line that stays (a node the deploy will reboot, and why) above the
// nodes' live lines.
func (p *progress) notice(text string) {
	if p.live && p.drawn > 0 {
		fmt.Fprintf(p.w, "\x1b[%dA\x1b[J", p.drawn)
		p.drawn = 0
	}
	fmt.Fprintln(p.w, text)
	if p.live {
		p.redraw()
	}
}
