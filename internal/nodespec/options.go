package nodespec

import (
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody/judge"
)

// Check is a command run on the node until it exits ExpectExit (default 0).
type Check struct {
	Name       string   `json:"name"`
	Argv       []string `json:"argv"`
	ExpectExit int      `json:"expect_exit,omitempty"`
	Interval   string   `json:"interval,omitempty"`
	Timeout    string   `json:"timeout,omitempty"`
}

// Probe is a request from the deployer: an HTTP(S) URL that must answer ExpectStatus
// (default 200) and match BodyRegexp when set, or a TCP address that must accept.
type Probe struct {
	Name         string `json:"name"`
	URL          string `json:"url,omitempty"`
	TCP          string `json:"tcp,omitempty"`
	ExpectStatus int    `json:"expect_status,omitempty"`
	BodyRegexp   string `json:"body_regexp,omitempty"`
	// BodyPattern is the roster's older name of BodyRegexp.
	BodyPattern string `json:"body_pattern,omitempty"`
	Insecure    bool   `json:"insecure,omitempty"`
	Interval    string `json:"interval,omitempty"`
	Timeout     string `json:"timeout,omitempty"`
}

// Options are the deploy body's options of the spec (validated by Validate): the
// node's own timings over def (the front end's defaults) over the table's. The front
// end adds what is its own: the build, the logger, the local store.
func (s Spec) Options(def deploybody.Timings) deploybody.Options {
	checks, probes, _ := s.checks()
	o := deploybody.Options{
		Node:        s.Node,
		Toplevel:    s.Toplevel,
		Strict:      s.Strict == nil || *s.Strict,
		Activation:  deploybody.Activation(s.Activation),
		SecretChain: s.SecretChain,
		Checks:      checks,
		Probes:      probes,
		Timings:     s.OwnTimings().Merge(def).WithDefaults(),
	}
	// The self-revert needs a new login to confirm: SSH only, on unless turned off.
	o.SelfRevert = s.SSH != nil && (s.SSH.RevertOnLockout == nil || *s.SSH.RevertOnLockout)
	if s.LoopBudgets != nil {
		o.LoopBudgets = map[string]int{}
		for u, n := range s.LoopBudgets {
			o.LoopBudgets[u] = int(n)
		}
	}
	return o
}

// OwnTimings are the spec's own timings (unset ones zero); invalid ones, which
// Validate reports, are left unset.
func (s Spec) OwnTimings() deploybody.Timings {
	var t deploybody.Timings
	for name, v := range s.Timings {
		tm, ok := deploybody.LookupTiming(name)
		if d, err := deploybody.ParseTiming(name, v); ok && err == nil {
			*tm.In(&t) = d
		}
	}
	return t
}

// checks are the spec's checks and probes in the body's terms.
func (s Spec) checks() ([]judge.NodeCheck, []judge.Probe, error) {
	var checks []judge.NodeCheck
	var probes []judge.Probe
	for _, c := range s.Checks {
		iv, to, err := checkTimes("check", c.Name, c.Interval, c.Timeout)
		if err != nil {
			return nil, nil, err
		}
		checks = append(checks, judge.NodeCheck{Name: c.Name, Argv: c.Argv, ExpectExit: c.ExpectExit, Interval: iv, Timeout: to})
	}
	for _, p := range s.Probes {
		iv, to, err := checkTimes("probe", p.Name, p.Interval, p.Timeout)
		if err != nil {
			return nil, nil, err
		}
		dp := judge.Probe{Name: p.Name, URL: p.URL, TCP: p.TCP, ExpectStatus: p.ExpectStatus, Insecure: p.Insecure, Interval: iv, Timeout: to}
		field, pattern := "body_regexp", p.BodyRegexp
		if p.BodyPattern != "" {
			if pattern != "" {
				return nil, nil, fmt.Errorf("probe %q: body_pattern: give body_regexp or body_pattern (its older name), not both", p.Name)
			}
			field, pattern = "body_pattern", p.BodyPattern
		}
		if pattern != "" {
			re, err := regexp.Compile(pattern)
			if err != nil {
				return nil, nil, fmt.Errorf("probe %q: %s = %q: %v. Write it in Go's regexp syntax", p.Name, field, pattern, err)
			}
			dp.BodyPattern = re
		}
		probes = append(probes, dp)
	}
	if err := judge.ValidateChecks(checks, probes); err != nil {
		return nil, nil, err
	}
	return checks, probes, nil
}

func checkTimes(kind, name, interval, timeout string) (iv, to time.Duration, err error) {
	parse := func(field, v string) (time.Duration, error) {
		if v == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%s %q: %s = %q is not a positive Go duration such as \"2s\" or \"1m\"", kind, name, field, v)
		}
		return d, nil
	}
	if iv, err = parse("interval", interval); err != nil {
		return 0, 0, err
	}
	to, err = parse("timeout", timeout)
	return iv, to, err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
