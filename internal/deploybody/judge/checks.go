package judge

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Operator health checks: commands on the node (NodeCheck) and requests from the
// deployer (Probe). They start after the settle. A node check rides in the same batch
// as the watch sample it falls due with, so checks add their own run time and no round
// trips per sample; what is still pending when the watch ends is retried in the checks
// phase until it passes or its timeout runs out.

// Default check timings.
const (
	DefaultCheckInterval = 2 * time.Second
	DefaultCheckTimeout  = 30 * time.Second
)

// NodeCheck is a command run on the node: it passes when it exits with ExpectExit.
type NodeCheck struct {
	Name       string
	Argv       []string
	ExpectExit int
	// Interval is the pause between two attempts; Timeout bounds all of them (from the
	// end of the settle). Zero takes the defaults.
	Interval time.Duration
	Timeout  time.Duration
}

// Probe is a request from the deployer: an HTTP(S) GET of URL that must answer
// ExpectStatus (and match BodyPattern when set), or a TCP connect to TCP.
type Probe struct {
	Name         string
	URL          string
	TCP          string
	ExpectStatus int            // 0 means 200
	BodyPattern  *regexp.Regexp // optional, matched against the first probeBodyLimit bytes
	// Insecure turns off TLS verification (it is on by default).
	Insecure bool
	Interval time.Duration
	Timeout  time.Duration
}

// CheckResult is the outcome of one check or probe.
type CheckResult struct {
	Name string
	// Kind is "node" (a check on the node) or "probe" (from the deployer).
	Kind     string
	OK       bool
	Attempts int
	// TimeToPass is from the end of the settle to the passing attempt (0 when it never passed).
	TimeToPass time.Duration
	// Output is the tail of the last attempt's output (or why it failed), bounded and
	// with credential-looking text masked.
	Output string
}

// Check kinds.
const (
	CheckKindNode  = "node"
	CheckKindProbe = "probe"
)

const (
	checkOutputTail = 256
	probeBodyLimit  = 64 << 10
	probeAttemptCap = 10 * time.Second
)

// ValidateChecks reports the first problem of a set of checks and probes: an empty or
// repeated name, an empty argv, a probe with neither or both of URL and TCP, a URL
// that is not http(s).
func ValidateChecks(checks []NodeCheck, probes []Probe) error {
	seen := map[string]bool{}
	name := func(kind, n string) error {
		if strings.TrimSpace(n) == "" {
			return fmt.Errorf("a %s has an empty name", kind)
		}
		if seen[n] {
			return fmt.Errorf("%s %q: the name is used twice (check and probe names share one namespace)", kind, n)
		}
		seen[n] = true
		return nil
	}
	for _, c := range checks {
		if err := name("check", c.Name); err != nil {
			return err
		}
		if len(c.Argv) == 0 || c.Argv[0] == "" {
			return fmt.Errorf("check %q: argv is empty", c.Name)
		}
	}
	for _, p := range probes {
		if err := name("probe", p.Name); err != nil {
			return err
		}
		if (p.URL == "") == (p.TCP == "") {
			return fmt.Errorf("probe %q: set exactly one of url and tcp", p.Name)
		}
		if p.URL != "" && !strings.HasPrefix(p.URL, "http://") && !strings.HasPrefix(p.URL, "https://") {
			return fmt.Errorf("probe %q: url %q is not http:// or https://", p.Name, redactURL(p.URL))
		}
		if p.TCP != "" {
			if _, _, err := net.SplitHostPort(p.TCP); err != nil {
				return fmt.Errorf("probe %q: tcp %q is not host:port", p.Name, p.TCP)
			}
		}
	}
	return nil
}

// PendingCheck is one check or probe and its progress in this run.
type PendingCheck struct {
	node     *NodeCheck
	probe    *Probe
	interval time.Duration
	timeout  time.Duration
	next     time.Time
	done     bool // passed or gave up
	result   CheckResult
}

// CheckAnswer is the node's answer to one attempt of a node check (the fields of a
// transport's command result, so one converts to the other).
type CheckAnswer struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// CheckRun schedules a run's checks and probes.
type CheckRun struct {
	started bool
	start   time.Time
	items   []*PendingCheck
}

func NewCheckRun(checks []NodeCheck, probes []Probe) *CheckRun {
	c := &CheckRun{}
	pick := func(v, def time.Duration) time.Duration {
		if v <= 0 {
			return def
		}
		return v
	}
	for i := range checks {
		nc := &checks[i]
		c.items = append(c.items, &PendingCheck{node: nc, interval: pick(nc.Interval, DefaultCheckInterval), timeout: pick(nc.Timeout, DefaultCheckTimeout),
			result: CheckResult{Name: nc.Name, Kind: CheckKindNode}})
	}
	for i := range probes {
		p := &probes[i]
		c.items = append(c.items, &PendingCheck{probe: p, interval: pick(p.Interval, DefaultCheckInterval), timeout: pick(p.Timeout, DefaultCheckTimeout),
			result: CheckResult{Name: p.Name, Kind: CheckKindProbe}})
	}
	return c
}

func (c *CheckRun) Begin(now time.Time) {
	if c.started {
		return
	}
	c.started, c.start = true, now
	for _, it := range c.items {
		it.next = now
	}
}

// Due lists the checks whose next attempt has come. A check gets at least one attempt,
// and none after its timeout.
func (c *CheckRun) Due(now time.Time) []*PendingCheck {
	var out []*PendingCheck
	for _, it := range c.items {
		if it.done || now.Before(it.next) {
			continue
		}
		if it.result.Attempts > 0 && !now.Before(c.start.Add(it.timeout)) {
			it.done = true // gave up: its last output stays
			continue
		}
		out = append(out, it)
	}
	return out
}

// NextDue is the earliest next attempt of a check still in play; ok is false when
// every check is done.
func (c *CheckRun) NextDue(now time.Time) (at time.Time, ok bool) {
	for _, it := range c.items {
		if it.done {
			continue
		}
		if it.result.Attempts > 0 && !now.Before(c.start.Add(it.timeout)) {
			it.done = true
			continue
		}
		if !ok || it.next.Before(at) {
			at, ok = it.next, true
		}
	}
	return at, ok
}

func (c *CheckRun) record(it *PendingCheck, at time.Time, passed bool, output string) {
	it.result.Attempts++
	it.result.Output = tailOutput(output)
	it.next = at.Add(it.interval)
	if passed {
		it.result.OK, it.done = true, true
		it.result.TimeToPass = at.Sub(c.start)
	}
}

func (c *CheckRun) Results() []CheckResult {
	if len(c.items) == 0 {
		return nil
	}
	out := make([]CheckResult, 0, len(c.items))
	for _, it := range c.items {
		out = append(out, it.result)
	}
	return out
}

// NodeCommands splits the due checks into node commands (to batch) and probes.
func NodeCommands(due []*PendingCheck) (cmds [][]string, nodes, probes []*PendingCheck) {
	for _, it := range due {
		if it.node != nil {
			cmds = append(cmds, boundedCheckArgv(it))
			nodes = append(nodes, it)
		} else {
			probes = append(probes, it)
		}
	}
	return cmds, nodes, probes
}

// boundedCheckArgv bounds one attempt of a node check by the check's timeout, so a
// command that hangs cannot hold the watch sample it rides with (coreutils timeout
// exits 124 when it fires).
func boundedCheckArgv(it *PendingCheck) []string {
	secs := int((it.timeout + time.Second - 1) / time.Second)
	return append([]string{"timeout", "-k", "2", fmt.Sprintf("%ds", secs)}, it.node.Argv...)
}

// RecordNodeAnswers records the answers to the node checks of a batch.
func (c *CheckRun) RecordNodeAnswers(nodes []*PendingCheck, answers []CheckAnswer, at time.Time) {
	for i, it := range nodes {
		res := answers[i]
		out := strings.TrimSpace(string(res.Stdout) + "\n" + string(res.Stderr))
		if res.ExitCode == 124 && it.node.ExpectExit != 124 {
			out = fmt.Sprintf("timed out after %s: %s", it.timeout, out)
		} else if res.ExitCode != it.node.ExpectExit {
			out = fmt.Sprintf("exit %d, want %d: %s", res.ExitCode, it.node.ExpectExit, out)
		}
		c.record(it, at, res.ExitCode == it.node.ExpectExit, out)
	}
}

// RunProbes runs the due probes from the deployer.
func (c *CheckRun) RunProbes(ctx context.Context, probes []*PendingCheck, at time.Time) {
	for _, it := range probes {
		limit := min(it.interval, probeAttemptCap)
		if limit < time.Second {
			limit = time.Second
		}
		ok, out := probeOnce(ctx, it.probe, limit)
		c.record(it, at, ok, out)
	}
}

// probeOnce makes one attempt of a probe, bounded by limit.
func probeOnce(ctx context.Context, p *Probe, limit time.Duration) (ok bool, output string) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if p.TCP != "" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", p.TCP)
		if err != nil {
			return false, err.Error()
		}
		_ = conn.Close()
		return true, "connected to " + p.TCP
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return false, redactURLError(err, p.URL)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // probes go where they say, never through an environment proxy
	if p.Insecure {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // #nosec G402 -- the operator asked for it with insecure = true
	}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return false, redactURLError(err, p.URL)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyLimit))
	want := p.ExpectStatus
	if want == 0 {
		want = http.StatusOK
	}
	if resp.StatusCode != want {
		return false, fmt.Sprintf("status %d, want %d: %s", resp.StatusCode, want, body)
	}
	if p.BodyPattern != nil && !p.BodyPattern.Match(body) {
		return false, fmt.Sprintf("status %d, but the body does not match %s: %s", resp.StatusCode, p.BodyPattern, body)
	}
	return true, fmt.Sprintf("status %d: %s", resp.StatusCode, body)
}

// redactURL drops the user information of a URL, so a password in it is never echoed.
func redactURL(u string) string {
	scheme, rest, found := strings.Cut(u, "://")
	if !found {
		return u
	}
	host, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(host, "@"); at >= 0 {
		host = "…@" + host[at+1:]
	}
	if path != "" || strings.Contains(rest, "/") {
		return scheme + "://" + host + "/" + path
	}
	return scheme + "://" + host
}

func redactURLError(err error, u string) string {
	msg := err.Error()
	if red := redactURL(u); red != u {
		msg = strings.ReplaceAll(msg, u, red)
	}
	// net/url already masks a password as "xxxxx"; drop what remains of the user.
	return msg
}

// secretLine matches text that looks like a credential:
//   - a PEM private key (group 1);
//   - key=value or key: value with a secret-sounding key (group 2, the key with what
//     follows it up to the value), also as JSON or YAML writes it ("password": "…",
//     'token': …); the value (group 3) is a quoted string or one or two words;
//   - a bearer token (group 4 is "bearer ");
//   - the user:password of a URL (group 5 is the scheme and "://").
var secretLine = regexp.MustCompile(`(?i)` +
	`(-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$))` +
	`|((?:pass(?:word|wd|phrase)?|secret|token|api[-_]?key|private[-_]?key|authorization|auth|credential)s?["']?[ \t]*[=:][ \t]*)` +
	`("(?:[^"\\\n]|\\.)*"?|'[^'\n]*'?|\S+(?:[ \t]+\S+)?)` +
	`|(bearer[ \t]+)\S+` +
	`|([a-z][a-z0-9+.-]*://)[^\s/@:"']*:[^\s/@"']*@`)

// maskSecrets replaces what secretLine matches, keeping the key (and a value's
// quotes), so the output still says what was there.
func maskSecrets(s string) string {
	return secretLine.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretLine.FindStringSubmatch(m)
		switch {
		case sub[1] != "":
			return "(private key masked)"
		case sub[2] != "":
			if q := sub[3][:1]; q == `"` || q == "'" {
				return sub[2] + q + "(masked)" + q
			}
			return sub[2] + "(masked)"
		case sub[4] != "":
			return sub[4] + "(masked)"
		default:
			return sub[5] + "(masked)@"
		}
	})
}

// tailOutput keeps the last checkOutputTail bytes of s, printable, with credential-looking
// text masked (masking first, so a secret cut by the tail is not half shown).
func tailOutput(s string) string {
	s = maskSecrets(s)
	var b bytes.Buffer
	for _, r := range s {
		if r == '\n' || r == '\t' || (r >= 0x20 && r != 0x7f) {
			b.WriteRune(r)
		} else {
			b.WriteRune('?')
		}
	}
	out := strings.TrimSpace(b.String())
	if len(out) > checkOutputTail {
		cut := len(out) - checkOutputTail
		for cut < len(out) && (out[cut]&0xC0) == 0x80 {
			cut++ // do not split a UTF-8 sequence
		}
		out = "…" + out[cut:]
	}
	return out
}

// checkReasons are the verdict reasons of the failed checks. unitsFine says no other
// reason names a unit or an unread source, so a failed check is the cause.
func checkReasons(checks []CheckResult, unitsFine bool) []string {
	var reasons []string
	for _, c := range checks {
		if c.OK {
			continue
		}
		what := "check"
		if c.Kind == CheckKindProbe {
			what = "probe"
		}
		reason := fmt.Sprintf("%s %s failed after %d attempts (%s)", what, c.Name, c.Attempts, FirstLine(c.Output, "no output"))
		if unitsFine {
			reason += "; every unit is fine, so this check is the cause"
		}
		reasons = append(reasons, reason)
	}
	return reasons
}

// FailedChecks names the checks of a verdict that did not pass, sorted.
func FailedChecks(v *Verdict) []string {
	if v == nil {
		return nil
	}
	var out []string
	for _, c := range v.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

// RenderChecks writes the checks for the report.
func RenderChecks(checks []CheckResult) string {
	if len(checks) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("  checks:\n")
	for _, c := range checks {
		state := "FAILED"
		if c.OK {
			state = fmt.Sprintf("ok after %s", c.TimeToPass.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "    %s (%s): %s, %d attempts", c.Name, c.Kind, state, c.Attempts)
		if !c.OK && c.Output != "" {
			fmt.Fprintf(&b, ": %s", FirstLine(c.Output, ""))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// None reports whether the run has no checks or probes at all.
func (c *CheckRun) None() bool { return len(c.items) == 0 }

// FailUnansweredNodeChecks ends every node check still in play as failed with why: the
// node stopped answering, so it owes them.
func (c *CheckRun) FailUnansweredNodeChecks(at time.Time, why string) {
	for _, it := range c.items {
		if !it.done && it.node != nil {
			c.record(it, at, false, why)
			it.done = true
		}
	}
}
