package deploybody

// The summary of changes, made beside the settle and the watch (it reads only the
// deployer, and everything it is made of is known since the snapshot), and taken by the
// report. A file of its own: the settle's step starts it, so it ranks there in the
// deploy body's data flow, while changes.go, which the report also calls, ranks after
// the report.

import "context"

// changesAhead is the summary of changes made beside the settle and the watch.
type changesAhead struct {
	done    chan struct{}
	cancel  context.CancelFunc
	changes *Changes
}

// startChanges computes the summary of changes on its own goroutine. It reads only the
// deployer (its store and the new toplevel's files), never the node, and warns nothing.
func (e *runEnv) startChanges(ctx context.Context, in changesIn) *changesAhead {
	ctx, cancel := context.WithCancel(ctx)
	c := &changesAhead{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(c.done)
		c.changes = e.computeChanges(ctx, in)
	}()
	return c
}

// take waits for the summary (nil when none was started).
func (c *changesAhead) take() *Changes {
	if c == nil {
		return nil
	}
	<-c.done
	c.cancel()
	return c.changes
}

// abandon stops the computation and waits for it, for a run that stops before its report.
func (c *changesAhead) abandon() {
	if c != nil {
		c.cancel()
		<-c.done
	}
}
