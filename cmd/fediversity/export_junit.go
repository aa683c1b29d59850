package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// The JUnit XML export (--junit): one test suite for the group, one test case per
// node. A node whose verdict is not ok fails, with its reasons as the message and its
// report (or its error) as the text; a node whose run an interrupt cut short is an
// error of type "interrupted" (not a failure: nothing judged it); a node a halted
// rollout left alone, or one the submission disables, is skipped with the reason. The document follows the JUnit
// schema of Jenkins' xUnit plugin (junit-10.xsd), which GitLab, GitHub actions and
// Jenkins read.

type junitSuiteInfo struct {
	name, roster string
	start, end   time.Time
}

type junitTestsuites struct {
	XMLName  xml.Name         `xml:"testsuites"`
	Name     string           `xml:"name,attr"`
	Tests    int              `xml:"tests,attr"`
	Failures int              `xml:"failures,attr"`
	Errors   int              `xml:"errors,attr"`
	Time     string           `xml:"time,attr"`
	Suites   []junitTestsuite `xml:"testsuite"`
}

type junitTestsuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitTestcase `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitTestcase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Skipped   *junitMessage `xml:"skipped"`
	Failure   *junitMessage `xml:"failure"`
	Error     *junitMessage `xml:"error"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Type    string `xml:"type,attr,omitempty"`
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// writeJUnit writes the JUnit document of one run from its summary.
func writeJUnit(w io.Writer, info junitSuiteInfo, s jsonSummary) error {
	suite := junitTestsuite{Name: info.name, Time: junitSeconds(info.end.Sub(info.start).Seconds()),
		Timestamp: info.start.UTC().Format("2006-01-02T15:04:05"), Cases: []junitTestcase{}}
	if info.roster != "" {
		suite.Properties = []junitProperty{{Name: "roster", Value: info.roster}}
	}
	for _, n := range s.Nodes {
		suite.Cases = append(suite.Cases, junitCase(info.name, n))
	}
	for _, c := range suite.Cases {
		switch {
		case c.Skipped != nil:
			suite.Skipped++
		case c.Failure != nil:
			suite.Failures++
		case c.Error != nil:
			suite.Errors++
		}
	}
	suite.Tests = len(suite.Cases)
	doc := junitTestsuites{Name: info.name, Tests: suite.Tests, Failures: suite.Failures, Errors: suite.Errors, Time: suite.Time,
		Suites: []junitTestsuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func junitCase(suite string, n jsonNode) junitTestcase {
	c := junitTestcase{Name: n.Node, Classname: strings.ReplaceAll(suite, " ", "."), Time: junitSeconds(n.Seconds)}
	switch {
	case n.Disabled:
		c.Skipped = &junitMessage{Message: "disabled by the submission: the node was not touched"}
	case n.NotAttempted != "":
		c.Skipped = &junitMessage{Message: "not attempted: " + n.NotAttempted}
	case n.Interrupted:
		c.Error = &junitMessage{Type: "interrupted", Message: "interrupted before the node's verdict: " + strings.Join(n.reasons, "; "), Text: junitFailureText(n)}
	case !n.OK:
		c.Failure = &junitMessage{Type: junitFailureType(n), Message: strings.Join(n.reasons, "; "), Text: junitFailureText(n)}
	}
	if len(n.Warnings) > 0 {
		c.SystemOut = "warning: " + strings.Join(n.Warnings, "\nwarning: ") + "\n"
	}
	return c
}

// junitFailureType is the kind of failure: unreachable, the deploy phase that failed,
// or the verdict.
func junitFailureType(n jsonNode) string {
	switch {
	case n.Verdict != nil && n.Verdict.Unreachable:
		return "unreachable"
	case n.Phase != "":
		return n.Phase
	default:
		return "verdict"
	}
}

// junitFailureText is what the table prints under a failed node: its error, then its
// report.
func junitFailureText(n jsonNode) string {
	var parts []string
	if n.Error != "" {
		parts = append(parts, n.Error)
	}
	if n.Report != "" {
		parts = append(parts, strings.TrimRight(n.Report, "\n"))
	}
	return strings.Join(parts, "\n")
}

// junitSeconds is a duration as the schema's time attribute takes it (no exponent).
func junitSeconds(s float64) string {
	return fmt.Sprintf("%.3f", s)
}
