package incus

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/deploybody"
	"github.com/fediversity/terraform-provider-fediversity/internal/incusapi"
	"github.com/fediversity/terraform-provider-fediversity/internal/transport/remote"
)

// A shell session keeps one exec open for a whole deploy: /bin/sh on the node, its
// stdin, stdout and stderr attached over the exec's websockets (incusapi.ExecStream).
// Each command is one line of shell text written to its stdin, framed on both output
// streams with marker lines, as the SSH transport's batches are framed:
//
//	"\n" B " start\n"  <the command's output>  "\n" B " done" [" " rc] "\n"
//
// B is 32 random hex digits chosen per command, so no output can forge a marker, and
// the exit code is on the stdout end marker. A command through the session costs one
// write and the bytes it prints, about a millisecond, where a recorded exec costs a POST,
// an operation wait, two log reads and two log deletes (25–55 ms).
//
// Every element of argv is quoted (remote.Quote) and the command runs in a subshell
// with stdin from /dev/null, so it cannot read or change the session's shell. The shell
// reads its stdin buffered, which is safe because no command reads it.
//
// When the session breaks (the instance restarted, the daemon closed the websockets),
// the transport opens it once more, and after a second break it runs every command
// with a recorded exec as before. A command that started and then lost its session is
// an error, never run twice.
//
// A command whose start marker never arrived may still have run: the shell may have
// read its line and started it, and only the marker was lost with the websocket. So
// every command is claimed before it runs: the shell creates the file <claims>/B with
// noclobber (an O_EXCL create, no fork), and runs the command only if it made it. The
// recorded exec that stands in for such a command makes the same claim first and runs
// nothing when the file is there (the session ran, or runs, the command) or cannot be
// made (the claims directory is gone with /run, so whether it ran is unknown). Whoever
// claims first runs the command; it never runs twice. The claims directory is the
// session's own, under /run (a tmpfs: gone at a reboot); an orderly close removes it,
// and a session's opening removes those of sessions gone for an hour.

// maxSessionOpens bounds how often one transport opens a session (the first and one
// re-open after a break).
const maxSessionOpens = 2

// errNotStarted says the session's shell refused the command's claim: the command did
// not run there, and never will, so it may be run another way as it is.
var errNotStarted = errors.New("the exec session did not run the command")

// errUnconfirmed says the session broke before the command's start marker arrived: the
// command may have run, so it may be run another way only under its claim (claimPath).
var errUnconfirmed = errors.New("the exec session ended before the command's start was seen")

// sessionClaimsRoot holds each session's claims directory (see above).
const sessionClaimsRoot = "/run/fediversity-session"

// claimTakenMarker is what the stand-in exec prints on stderr, with the claim's path,
// when it finds the claim made: it then exits claimTakenExit without running anything.
const (
	claimTakenMarker = "fediversity: claim taken:"
	claimTakenExit   = 222
)

type shellSession struct {
	stream *incusapi.ExecStream
	limit  int64  // bound on each stream's output of one command
	claims string // this session's claims directory on the node

	mu sync.Mutex // one command at a time

	notify chan struct{} // signalled after every change of out or errs
	omu    sync.Mutex
	out    [2][]byte // stdout, stderr received and not yet consumed
	ends   [2]error  // why a stream ended (io.EOF for a plain end)
	broken error     // set once the session cannot be used any more
}

// openSession starts /bin/sh on the node with path as its PATH.
func (t *Transport) openSession(ctx context.Context, path string) (*shellSession, error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := t.c.OpenExec(octx, t.instance, incusapi.ExecRequest{
		Command:     []string{"/bin/sh"},
		Environment: map[string]string{"PATH": path},
	})
	if err != nil {
		return nil, err
	}
	limit := t.c.MaxOutput
	if limit <= 0 {
		limit = incusapi.DefaultMaxOutput
	}
	s := &shellSession{stream: st, limit: limit, notify: make(chan struct{}, 1),
		claims: sessionClaimsRoot + "/" + randomBoundary()}
	go s.pump(0, st.Stdout)
	go s.pump(1, st.Stderr)
	// The shell's noclobber makes each claim an O_EXCL create; its claims directory is
	// made first, and without it there is no session (commands use recorded execs).
	// The same round trip makes the node ready for the run (nodeSetupScript).
	res, err := s.runScript(octx, randomBoundary(), "set -C; ", "",
		nodeSetupArgv(sessionClaimsRoot, s.claims), path)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("making the directories %s and %s exited %d: %s", stdinDir, s.claims, res.ExitCode, trim(res.Stderr))
	}
	if err != nil {
		s.breakWith(err)
		return nil, err
	}
	t.nodeReady.Store(true)
	return s, nil
}

// pump copies one output stream into the session's buffer until it ends.
func (s *shellSession) pump(i int, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		s.omu.Lock()
		s.out[i] = append(s.out[i], buf[:n]...)
		if err == nil && int64(len(s.out[i])) > s.limit+256 {
			err = fmt.Errorf("command output larger than %d bytes", s.limit)
		}
		if err != nil {
			s.ends[i] = err
		}
		s.omu.Unlock()
		select {
		case s.notify <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// usable reports whether the session can take a command.
func (s *shellSession) usable() bool {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.broken == nil && s.ends[0] == nil && s.ends[1] == nil
}

func (s *shellSession) breakWith(err error) {
	s.omu.Lock()
	if s.broken == nil {
		s.broken = err
	}
	s.omu.Unlock()
	s.stream.Close()
}

// close ends the session without making the caller wait: the end of its stdin ends
// the idle shell, and the websockets are closed once its stdout ends (or after 2 s;
// closing the control websocket first would make incusd kill the shell and log a
// warning for every deploy).
func (s *shellSession) close() {
	s.omu.Lock()
	if s.broken == nil {
		s.broken = errors.New("closed")
	}
	s.omu.Unlock()
	// An orderly end removes the claims: nothing stands in for this session's commands.
	_, _ = fmt.Fprintf(s.stream, "rm -rf -- %s\n", remote.Quote(s.claims))
	if err := s.stream.CloseStdin(); err != nil {
		s.stream.Close()
		return
	}
	go func() {
		deadline := time.After(2 * time.Second)
		for {
			s.omu.Lock()
			ended := s.ends[0] != nil
			s.omu.Unlock()
			if ended {
				break
			}
			select {
			case <-s.notify:
				continue
			case <-deadline:
			}
			break
		}
		s.stream.Close()
	}()
}

// run runs argv with PATH set to path, under its claim. It returns errNotStarted
// (wrapped) when the command certainly did not run, and errUnconfirmed (wrapped, with
// the claim's path) when it may have run.
func (s *shellSession) run(ctx context.Context, argv []string, path string) (deploybody.RunResult, error) {
	b := randomBoundary()
	before, after := claimGuard(s.claimPath(b), b)
	return s.runScript(ctx, b, before, after, argv, path)
}

// framedScript is the line the session's shell gets for one command: argv with PATH
// set to path, framed by boundary b, between before and after.
func framedScript(b, before, after string, argv []string, path string) (string, error) {
	line, err := remote.ShellJoin(argv)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%[4]sprintf '\\n%%s start\\n' %[1]s; printf '\\n%%s start\\n' %[1]s >&2; "+
		"(PATH=%[2]s; export PATH; exec %[3]s) </dev/null; "+
		"printf '\\n%%s done %%s\\n' %[1]s \"$?\"; printf '\\n%%s done\\n' %[1]s >&2%[5]s\n",
		b, remote.Quote(path), line, before, after), nil
}

// claimGuard is the shell text around a command that runs it only under claim, and
// otherwise prints "<b> unclaimed" on both streams.
func claimGuard(claim, b string) (before, after string) {
	return "if { true >" + remote.Quote(claim) + "; } 2>/dev/null; then ",
		"; else printf '\\n%s unclaimed\\n' " + b + "; printf '\\n%s unclaimed\\n' " + b + " >&2; fi"
}

// claimPath is the claim file of the command with boundary b.
func (s *shellSession) claimPath(b string) string { return s.claims + "/" + b }

// unconfirmedError carries the claim of a command whose start was not seen.
type unconfirmedError struct {
	claim string
	err   error
}

func (e *unconfirmedError) Error() string { return errUnconfirmed.Error() + ": " + e.err.Error() }
func (e *unconfirmedError) Unwrap() []error {
	return []error{errUnconfirmed, e.err}
}

// runScript writes one framed command, between before and after (shell text of the
// caller's: a claim, or a setup), and reads its result.
func (s *shellSession) runScript(ctx context.Context, b, before, after string, argv []string, path string) (deploybody.RunResult, error) {
	script, err := framedScript(b, before, after, argv, path)
	if err != nil {
		return deploybody.RunResult{}, err
	}
	unconfirmed := func(err error) error { return &unconfirmedError{claim: s.claimPath(b), err: err} }
	if _, err := s.stream.Write([]byte(script)); err != nil {
		// Part of the line may have reached the shell.
		s.breakWith(err)
		return deploybody.RunResult{}, unconfirmed(err)
	}
	var res deploybody.RunResult
	got := [2]bool{}
	started := false
	unclaimed := []byte("\n" + b + " unclaimed\n")
	for {
		s.omu.Lock()
		if !started && bytes.Contains(s.out[0], unclaimed) {
			s.omu.Unlock()
			err := fmt.Errorf("%w: its claim %s could not be made in the session", errNotStarted, s.claimPath(b))
			s.breakWith(err) // its claims directory is gone: the session cannot run commands
			return res, err
		}
		for i := range 2 {
			if got[i] {
				continue
			}
			body, code, rest, st, ok, ferr := cutFramed(s.out[i], b, i == 0)
			if st && i == 0 {
				started = true
			}
			if ferr != nil {
				s.omu.Unlock()
				s.breakWith(ferr)
				return res, ferr
			}
			if !ok {
				continue
			}
			s.out[i] = rest
			got[i] = true
			if i == 0 {
				res.Stdout, res.ExitCode = body, code
			} else {
				res.Stderr = body
			}
		}
		if got[0] && got[1] {
			s.omu.Unlock()
			return res, nil
		}
		end := s.ends[0]
		if end == nil {
			end = s.ends[1]
		}
		s.omu.Unlock()
		if end != nil {
			err := fmt.Errorf("exec session ended: %w", end)
			s.breakWith(err)
			if !started {
				return res, unconfirmed(err)
			}
			return res, err
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			// The command may still run in the session's shell: the session cannot be
			// trusted to frame the next one, so it ends here.
			s.breakWith(ctx.Err())
			return res, ctx.Err()
		}
	}
}

// cutFramed finds one command's framed output at the front of buf. started says the
// start marker is there; ok says the whole frame is, and then rest is what follows it.
// Bytes before the start marker (output of a background process of an earlier command)
// are dropped.
func cutFramed(buf []byte, b string, withCode bool) (body []byte, code int, rest []byte, started, ok bool, err error) {
	start := []byte("\n" + b + " start\n")
	at := bytes.Index(buf, start)
	if at < 0 {
		return nil, 0, nil, false, false, nil
	}
	tail := buf[at+len(start):]
	end := []byte("\n" + b + " done")
	at = bytes.Index(tail, end)
	if at < 0 {
		return nil, 0, nil, true, false, nil
	}
	after := tail[at+len(end):]
	nl := bytes.IndexByte(after, '\n')
	if nl < 0 {
		return nil, 0, nil, true, false, nil
	}
	mark := bytes.TrimSpace(after[:nl])
	if withCode {
		if code, err = strconv.Atoi(string(mark)); err != nil {
			return nil, 0, nil, true, false, fmt.Errorf("exec session: unreadable exit code %q", mark)
		}
	} else if len(mark) != 0 {
		return nil, 0, nil, true, false, fmt.Errorf("exec session: malformed end marker %q", mark)
	}
	body = append([]byte(nil), tail[:at]...)
	return body, code, append([]byte(nil), after[nl+1:]...), true, true, nil
}

func randomBoundary() string {
	var r [16]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(r[:])
}

// sessionExec runs argv through the deploy's exec session, opening it on first use.
// handled is false when the session cannot take the command (none could be opened, it
// did not run the command, or another command holds it): the caller then runs the
// command with a recorded exec, as it is. claim is set when the session broke before
// the command's start was seen: the recorded exec must then run it under that claim
// (claimedArgv), so it runs at most once.
func (t *Transport) sessionExec(ctx context.Context, argv []string, path string) (res deploybody.RunResult, handled bool, claim string, err error) {
	s := t.session(ctx)
	if s == nil {
		return res, false, "", nil
	}
	if !s.mu.TryLock() {
		return res, false, "", nil // a concurrent command: never wait behind another one
	}
	defer s.mu.Unlock()
	res, err = s.run(ctx, argv, path)
	var unconfirmed *unconfirmedError
	switch {
	case errors.Is(err, errNotStarted):
		t.logPrintf("exec session: %v; running %s with a recorded exec", err, argv[0])
		return res, false, "", nil
	case errors.As(err, &unconfirmed) && ctx.Err() == nil:
		t.logPrintf("exec session: %v; running %s with a recorded exec under its claim", err, argv[0])
		return res, false, unconfirmed.claim, nil
	case err != nil:
		return res, true, "", &sessionLostError{err: err}
	}
	return res, true, "", nil
}

// claimedArgv runs argv only if it can make claim, the file a session's shell makes
// before it runs the same command; when it cannot, it prints claimTakenMarker and the
// claim on stderr and exits claimTakenExit, running nothing.
func claimedArgv(claim string, argv []string) []string {
	script := `set -C; { true >"$0"; } 2>/dev/null || { printf '%s %s\n' "` + claimTakenMarker + `" "$0" >&2; exit ` +
		strconv.Itoa(claimTakenExit) + `; }; exec "$@"`
	return append([]string{"/bin/sh", "-c", script, claim}, argv...)
}

// claimTaken tells whether a claimedArgv run found its claim made and ran nothing.
func claimTaken(res deploybody.RunResult, claim string) bool {
	return res.ExitCode == claimTakenExit && bytes.Contains(res.Stderr, []byte(claimTakenMarker+" "+claim+"\n"))
}

// session is the open session, or a new one, or nil when sessions are off or used up.
// A session is opened for the node's base PATH; a command's own prefix is set per
// command.
func (t *Transport) session(ctx context.Context) *shellSession {
	t.smu.Lock()
	defer t.smu.Unlock()
	if t.noSession {
		return nil
	}
	if t.sess != nil && t.sess.usable() {
		return t.sess
	}
	if t.sess != nil {
		t.sess.close()
		t.sess = nil
	}
	if t.sessOpens >= maxSessionOpens {
		return nil
	}
	t.sessOpens++
	began := time.Now()
	s, err := t.openSession(ctx, t.nodePath(ctx))
	if err != nil {
		t.logPrintf("exec session: cannot open (%v); commands use recorded execs", err)
		return nil
	}
	t.logPrintf("exec session %d of at most %d opened in %s", t.sessOpens, maxSessionOpens, time.Since(began).Round(time.Millisecond))
	t.sess = s
	return s
}

// closeSession ends the deploy's session, if one is open.
func (t *Transport) closeSession() {
	t.smu.Lock()
	s := t.sess
	t.sess = nil
	t.smu.Unlock()
	if s != nil {
		s.close()
		t.logPrintf("exec session closed: %d commands through the session, %d with recorded execs", t.viaSession.Load(), t.viaRecorded.Load())
	}
}

// sessionLostError says a command may have run in the session (it started, or its
// claim is made) and its session ended before its result came back: whether it
// finished is unknown, so it is not run again.
type sessionLostError struct{ err error }

func (e *sessionLostError) Error() string {
	return "the command may have run, but its exec session ended before its result came back (" + e.err.Error() + "); it was not run again"
}

func (e *sessionLostError) Unwrap() error { return e.err }
