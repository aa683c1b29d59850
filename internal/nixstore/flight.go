package nixstore

import (
	"context"
	"sync"
)

// Flight lets concurrent callers with the same key share one run of a function: the
// first caller runs it, the others wait for its result. Eight nodes of one group often
// build the same derivation; through a Flight the provider process builds it once,
// instead of eight nix processes of which seven poll nix's lock on the output.
//
// A result is not remembered once the run ends: a later caller runs the function again
// (for a build that is cheap, since nix then finds the output valid).
type Flight struct {
	mu    sync.Mutex
	calls map[string]*flightCall
}

type flightCall struct {
	done chan struct{}
	val  string
	err  error
}

// Do runs fn for key, or waits for the run of fn another caller started for the same
// key. shared tells a waiter it got another caller's result. A waiter whose ctx ends
// stops waiting with ctx's error; the run goes on for the others.
func (f *Flight) Do(ctx context.Context, key string, fn func() (string, error)) (val string, shared bool, err error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]*flightCall{}
	}
	if c, ok := f.calls[key]; ok {
		f.mu.Unlock()
		select {
		case <-c.done:
			return c.val, true, c.err
		case <-ctx.Done():
			return "", true, ctx.Err()
		}
	}
	c := &flightCall{done: make(chan struct{})}
	f.calls[key] = c
	f.mu.Unlock()

	defer func() {
		f.mu.Lock()
		delete(f.calls, key)
		f.mu.Unlock()
		close(c.done)
	}()
	c.val, c.err = fn()
	return c.val, false, c.err
}
