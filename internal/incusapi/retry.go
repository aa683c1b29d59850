package incusapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// Transient daemon faults are retried, bounded, and only for calls that are safe to
// send twice: reads (GET), deletes of a named object, and file pushes that overwrite
// with a body that can be read again. A command (exec) or a state change is never
// sent twice: the first may have run. The one exception is a streamed exec none of
// whose data websockets connected (OpenExec): the daemon had not started it. Seen in the lab: with eight nodes deploying at
// once incusd reset one file push ("connection reset by peer") and answered 5xx while
// it stalled. A retried DELETE that finds nothing is a success: the first one, whose
// answer was lost, deleted it.
const (
	retryAttempts = 3
	retryPause    = 500 * time.Millisecond
	// SlowCall is how long a call may take before the client's OnSlow hears of it.
	SlowCall = 10 * time.Second
)

// transient tells whether err is a fault of the daemon's moment, not of the request.
func transient(err error) bool {
	// The daemon's own wait timeout is an answer, not a fault: the operation is still
	// running, and waitOp decides whether to ask again within its deadline. Retrying it
	// here would stretch a caller's short wait several times over.
	if waitTimedOut(err) {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.StatusCode >= 500 && ae.StatusCode <= 599
	}
	var te *TransportError
	if !errors.As(err, &te) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset by peer")
}

func idempotent(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodDelete
}

// retry runs call up to retryAttempts times while it fails transiently, pausing
// between tries (and giving up when ctx ends). A call that took longer than SlowCall
// is told to OnSlow.
func (c *Client) retry(ctx context.Context, op string, call func() error) error {
	start := time.Now()
	var err error
	for attempt := 1; attempt <= retryAttempts; attempt++ {
		err = call()
		if err == nil || !transient(err) || attempt == retryAttempts {
			break
		}
		t := time.NewTimer(time.Duration(attempt) * retryPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	if d := time.Since(start); d > SlowCall && c.OnSlow != nil {
		c.OnSlow(op, d)
	}
	return err
}
