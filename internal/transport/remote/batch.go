package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
)

// A batch runs several commands in one round trip: one remote /bin/sh runs them one
// after the other (stdin from /dev/null) and frames each one's stdout, stderr and exit
// code with marker lines that carry a random boundary. Over SSH a round trip is a new
// session; over Incus it is an exec with recorded output (about 50 ms each), so the
// watch loop's three systemctl reads per sample cost one round trip instead of three.
//
// Framing, on each stream, for command i:
//
//	"\n" B " start " i "\n"  <the command's output>  "\n" B " end " i [" " rc] "\n"
//
// B is 32 random hex digits chosen per batch, so no command output can forge a marker.
// The exit code is on the stdout end marker.

// BatchCommand returns the argv of one shell command that runs cmds in order, and the
// function that splits that command's result into one RunResult per command. Every
// element of every command is quoted (Quote); nothing is parsed by the shell.
func BatchCommand(cmds [][]string) (argv []string, split func(deploybody.RunResult) ([]deploybody.RunResult, error), err error) {
	if len(cmds) == 0 {
		return nil, nil, errors.New("batch: no commands")
	}
	var script strings.Builder
	script.WriteString(`B=$1; `)
	for i, c := range cmds {
		line, err := ShellJoin(c)
		if err != nil {
			return nil, nil, fmt.Errorf("batch: command %d: %w", i, err)
		}
		fmt.Fprintf(&script, `printf '\n%%s start %d\n' "$B"; printf '\n%%s start %d\n' "$B" >&2; %s </dev/null; `+
			`printf '\n%%s end %d %%s\n' "$B" "$?"; printf '\n%%s end %d\n' "$B" >&2; `, i, i, line, i, i)
	}
	boundary := randomHex(16)
	argv = []string{"/bin/sh", "-c", script.String(), "sh", boundary}
	split = func(res deploybody.RunResult) ([]deploybody.RunResult, error) {
		return splitBatch(res, boundary, len(cmds))
	}
	return argv, split, nil
}

// splitBatch cuts a batch's output into n results. A batch whose output stops early
// (the shell was killed, the output was capped) is an error: a result is never guessed.
func splitBatch(res deploybody.RunResult, boundary string, n int) ([]deploybody.RunResult, error) {
	out := make([]deploybody.RunResult, n)
	stdout, stderr := res.Stdout, res.Stderr
	for i := 0; i < n; i++ {
		body, code, rest, err := section(stdout, boundary, i, true)
		if err != nil {
			return nil, fmt.Errorf("batch: stdout of command %d of %d: %w (batch shell exited %d: %s)", i+1, n, err, res.ExitCode, firstLine(string(res.Stderr)))
		}
		out[i].Stdout, out[i].ExitCode, stdout = body, code, rest
		body, _, rest, err = section(stderr, boundary, i, false)
		if err != nil {
			return nil, fmt.Errorf("batch: stderr of command %d of %d: %w (batch shell exited %d)", i+1, n, err, res.ExitCode)
		}
		out[i].Stderr, stderr = body, rest
	}
	return out, nil
}

// section reads command i's framed output from the front of s and returns the rest.
func section(s []byte, boundary string, i int, withCode bool) (body []byte, code int, rest []byte, err error) {
	start := []byte("\n" + boundary + " start " + strconv.Itoa(i) + "\n")
	at := bytes.Index(s, start)
	if at < 0 {
		return nil, 0, nil, errors.New("no start marker")
	}
	s = s[at+len(start):]
	end := []byte("\n" + boundary + " end " + strconv.Itoa(i))
	at = bytes.Index(s, end)
	if at < 0 {
		return nil, 0, nil, errors.New("no end marker (output cut short)")
	}
	body = append([]byte(nil), s[:at]...)
	s = s[at+len(end):]
	nl := bytes.IndexByte(s, '\n')
	if nl < 0 {
		return nil, 0, nil, errors.New("end marker cut short")
	}
	tail := strings.TrimSpace(string(s[:nl]))
	if withCode {
		if code, err = strconv.Atoi(tail); err != nil {
			return nil, 0, nil, fmt.Errorf("unreadable exit code %q", tail)
		}
	} else if tail != "" {
		return nil, 0, nil, fmt.Errorf("malformed end marker %q", tail)
	}
	return body, code, s[nl+1:], nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "no message"
	}
	return s
}

// RunBatch runs cmds on the node in one round trip, each with opts.Path before the
// node's PATH. opts.Stdin must be empty (the commands read /dev/null). err is only for
// transport faults and for output that cannot be split.
func RunBatch(ctx context.Context, r Runner, cmds [][]string, opts deploybody.RunOptions) ([]deploybody.RunResult, error) {
	return BatchVia(cmds, opts, func(argv []string, o deploybody.RunOptions) (deploybody.RunResult, error) {
		return Run(ctx, r, argv, o)
	})
}

// BatchVia runs cmds as one command through run (a transport's own way to run argv
// with a PATH prefix) and splits its result: the whole of a batch for transports that
// do not run commands through a Runner.
func BatchVia(cmds [][]string, opts deploybody.RunOptions, run func([]string, deploybody.RunOptions) (deploybody.RunResult, error)) ([]deploybody.RunResult, error) {
	if opts.Stdin != nil {
		return nil, errors.New("batch: commands of a batch take no stdin")
	}
	argv, split, err := BatchCommand(cmds)
	if err != nil {
		return nil, err
	}
	res, err := run(argv, deploybody.RunOptions{Path: opts.Path})
	if err != nil {
		return nil, err
	}
	return split(res)
}

// RunBatch implements deploybody.BatchRunner.
func (t *Transport) RunBatch(ctx context.Context, cmds [][]string, opts deploybody.RunOptions) ([]deploybody.RunResult, error) {
	res, err := RunBatch(ctx, t.Runner, cmds, opts)
	if err != nil {
		return nil, t.wrap(fmt.Errorf("run a batch of %d commands: %w", len(cmds), err))
	}
	return res, nil
}
