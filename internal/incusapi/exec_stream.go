package incusapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/fediversity/terraform-provider-fediversity/internal/websocket"
)

// ExecStream is a command running in an instance with its stdin, stdout and stderr
// attached over the exec operation's websockets (a non-interactive exec with
// wait-for-websocket: one websocket per stream, plus the control websocket). Nothing is
// recorded on the daemon, so there are no logs to fetch or delete: a long-lived
// process (a shell taking one command after another) costs one exec in all.
//
// Stdin is written with Write and ended with CloseStdin. Stdout and Stderr are read as
// byte streams until the command closes them. Close ends the command if it still runs.
type ExecStream struct {
	c        *Client
	w        where
	instance string
	opID     string

	stdin, stdout, stderr, control *websocket.Conn

	Stdout io.Reader // the command's stdout, until it closes it (io.EOF)
	Stderr io.Reader // the command's stderr, until it closes it (io.EOF)

	closeOnce sync.Once
}

// OpenExec starts req in instance name with its streams attached and returns once the
// websockets are connected. ctx bounds the opening only.
//
// An opening none of whose stdin, stdout and stderr websockets connected is made once
// more, as a new exec: the daemon starts the command only once those three are
// connected, so the first one never ran, and this is the one exec that may be sent
// twice (see retry.go). A websocket did not connect when its handshake ran out its
// deadline, or when the daemon no longer knew the operation: incusd fails an exec
// whose websockets have not all connected within seconds (5 s in Incus 6.0, 10 s later)
// and forgets it five seconds later. Both seen in CI under load (eight suites on two
// cores): the handshakes of three nodes' copies all hung for the whole 30 s at once,
// while those nodes' open sessions kept answering; and one copy's four handshakes were
// all answered "404: Operation not found". The hangs were the daemon's accept loop held
// by a connection that said nothing (lazyconn.go): requests on open connections (the
// sessions) went on, every new one (each handshake is one) waited.
func (c *Client) OpenExec(ctx context.Context, name string, req ExecRequest) (*ExecStream, error) {
	w := where{op: "exec (streamed)", instance: name}
	if len(req.Command) == 0 {
		return nil, c.apiErr(w, 0, "empty command")
	}
	start := time.Now()
	c.spares.refill() // for this exec's handshakes if it can, for the next ones if not
	s, neverRan, err := c.openExecOnce(ctx, w, name, req)
	if err != nil && neverRan && ctx.Err() == nil {
		s, _, err = c.openExecOnce(ctx, w, name, req)
	}
	if d := time.Since(start); d > SlowCall && c.OnSlow != nil {
		c.OnSlow(w.op+" open", d)
	}
	return s, err
}

// openExecOnce is one exec with its streams attached. neverRan is true when the
// opening failed with none of stdin, stdout and stderr connected, each one by the
// handshake's deadline or by the daemon having dropped the exec (the command cannot
// have started).
func (c *Client) openExecOnce(ctx context.Context, w where, name string, req ExecRequest) (_ *ExecStream, neverRan bool, _ error) {
	body := execBody{
		Command:          req.Command,
		Environment:      req.Environment,
		WaitForWebsocket: true,
		Interactive:      false, // separate stdout and stderr, and no terminal to mangle bytes
		RecordOutput:     false,
		Cwd:              req.Cwd,
		User:             req.User,
		Group:            req.Group,
	}
	r, err := c.do(ctx, w, http.MethodPost, instPath(name, "exec"), nil, body)
	if err != nil {
		return nil, false, err
	}
	op, err := c.asyncOp(w, r)
	if err != nil {
		return nil, false, err
	}
	var fds map[string]string
	if raw, ok := op.Metadata["fds"]; ok {
		if err := json.Unmarshal(raw, &fds); err != nil {
			return nil, false, c.apiErr(w, 0, fmt.Sprintf("malformed exec websocket list: %v", err))
		}
	}
	s := &ExecStream{c: c, w: w, instance: name, opID: op.ID}
	streams := []struct {
		name string
		ws   **websocket.Conn
	}{{"control", &s.control}, {"0", &s.stdin}, {"1", &s.stdout}, {"2", &s.stderr}}
	for _, fd := range streams {
		if fds[fd.name] == "" {
			return nil, false, c.apiErr(w, 0, "the exec operation offers no websocket for "+fd.name)
		}
	}
	// The four websockets are dialled side by side: the command starts once 0, 1 and 2
	// are connected, and each dial is a round trip of its own.
	pauseBeforeDial(op.ID)
	var wg sync.WaitGroup
	errs := make([]error, len(streams))
	for i, fd := range streams {
		wg.Go(func() {
			*fd.ws, errs[i] = c.dialWebsocket(ctx, w, "/1.0/operations/"+url.PathEscape(op.ID)+"/websocket", url.Values{"secret": {fds[fd.name]}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.Close() // the websockets that did connect: incusd then ends the command
		neverRan, dropped := true, false
		for _, e := range errs[1:] { // stdin, stdout, stderr
			neverRan = neverRan && e != nil && (errors.Is(e, context.DeadlineExceeded) || IsNotFound(e))
			dropped = dropped || IsNotFound(e)
		}
		if neverRan && dropped {
			// The daemon's not-found is about the operation, never the instance: said in
			// words of its own, so that no caller reads it as "no such instance".
			return nil, true, c.apiErr(w, 0, "the daemon dropped the exec before its streams connected, "+
				"so the command did not run (incusd waits only seconds for an exec's websockets; the daemon or the machine was too slow)")
		}
		return nil, neverRan, err
	}
	s.Stdout = &streamReader{ws: s.stdout}
	s.Stderr = &streamReader{ws: s.stderr}
	// incusd pings every websocket every 10 s; the two we only write to are read too,
	// so the pings are answered and do not pile up unread.
	go drain(s.control)
	go drain(s.stdin)
	return s, false, nil
}

// pauseBeforeDial runs between an exec's request and the dials of its websockets: a
// lab test makes it outlast the daemon's patience with them.
var pauseBeforeDial = func(opID string) {}

// drain reads ws until it ends, for its pings: incusd sends a client nothing else on
// the control and stdin websockets.
func drain(ws *websocket.Conn) {
	for { // ends when the websocket does
		if _, _, err := ws.ReadMessage(); err != nil {
			return
		}
	}
}

// Write sends p to the command's stdin.
func (s *ExecStream) Write(p []byte) (int, error) {
	if err := s.stdin.WriteMessage(websocket.OpBinary, p); err != nil {
		return 0, s.c.transportErr(s.w, err)
	}
	return len(p), nil
}

// CloseStdin ends the command's stdin: incusd takes an empty text message (its
// "barrier") as the end of a stream and closes the pipe.
func (s *ExecStream) CloseStdin() error {
	if err := s.stdin.WriteMessage(websocket.OpText, nil); err != nil {
		return s.c.transportErr(s.w, err)
	}
	return nil
}

// Wait waits for the command to end (bounded by ctx) and returns its exit code.
func (s *ExecStream) Wait(ctx context.Context) (int, error) {
	done, err := s.c.waitOp(ctx, s.w, s.opID, opTimeout(ctx))
	if err != nil {
		return -1, s.c.forgotten(s.w, &Operation{ID: s.opID}, err)
	}
	raw, ok := done.Metadata["return"]
	if !ok {
		return -1, s.c.apiErr(s.w, 0, "the exec operation finished without an exit code")
	}
	code := -1
	if err := json.Unmarshal(raw, &code); err != nil {
		return -1, s.c.apiErr(s.w, 0, fmt.Sprintf("malformed exit code %s: %v", raw, err))
	}
	return code, nil
}

// Close ends the stream: closing the control websocket makes incusd kill the command
// if it still runs (a command that ended is not touched). It does not wait.
func (s *ExecStream) Close() {
	s.closeOnce.Do(func() {
		for _, ws := range []*websocket.Conn{s.control, s.stdin, s.stdout, s.stderr} {
			if ws != nil {
				_ = ws.Close()
			}
		}
	})
}

// streamReader reads one output stream of an exec: binary messages are its bytes; an
// empty text message (incusd's barrier) or a close is its end.
type streamReader struct {
	ws  *websocket.Conn
	buf []byte
	err error
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		op, msg, err := r.ws.ReadMessage()
		switch {
		case errors.Is(err, websocket.ErrClosed) || errors.Is(err, io.EOF):
			r.err = io.EOF
		case err != nil:
			r.err = err
		case op == websocket.OpText:
			r.err = io.EOF
		default:
			r.buf = msg
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
