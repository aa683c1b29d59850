package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// exports are the files a run writes for CI and monitoring, on request: a JUnit XML
// file (one test case per node) and a Prometheus text-format file for node_exporter's
// textfile collector. Both are written from the summary --json prints.
type exports struct {
	junit, metrics string
	// suite names the JUnit test suite: the command and the roster.
	command, roster string
	// lastOK is each node's time of its last ok verdict seen by this process: a
	// one-shot run knows only its own; `verdict --every` keeps it across its passes.
	lastOK map[string]time.Time
}

// write writes the requested files for one run that started at start and ended at end.
func (e *exports) write(s jsonSummary, start, end time.Time) error {
	if e.lastOK == nil {
		e.lastOK = map[string]time.Time{}
	}
	for _, n := range s.Nodes {
		if n.OK && !n.Disabled {
			e.lastOK[n.Node] = end
		}
	}
	if e.junit != "" {
		suite := junitSuiteInfo{name: "fediversity " + e.command, roster: e.roster, start: start, end: end}
		if err := writeFileAtomically(e.junit, func(w io.Writer) error { return writeJUnit(w, suite, s) }); err != nil {
			return fmt.Errorf("--junit: %w", err)
		}
	}
	if e.metrics != "" {
		if err := writeFileAtomically(e.metrics, func(w io.Writer) error { return writeMetrics(w, s, e.lastOK, end) }); err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
	}
	return nil
}

// writeFileAtomically writes path so that a reader (a scraper, a CI job) sees the old
// file or the whole new one, never a part: the content goes to a temporary file in the
// same directory (so the rename stays within one file system), is synced to disk, and
// is renamed over path. The temporary name ends in .tmp, never in .prom, so that
// node_exporter's textfile collector does not read it.
func writeFileAtomically(path string, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	buf := bufio.NewWriter(tmp)
	if err = write(buf); err != nil {
		return err
	}
	if err = buf.Flush(); err != nil {
		return err
	}
	// Readable by a scraper running as another user (CreateTemp makes it 0600).
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename itself survives a crash once the directory is synced.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
