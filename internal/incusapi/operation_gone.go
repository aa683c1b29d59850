package incusapi

import (
	"context"
	"errors"
	"time"
)

// OperationGoneError says the daemon no longer knows an operation the client was
// waiting for. incusd forgets an operation five seconds after it ends, so a wait that
// reaches it later cannot read how the operation ended: the deployer was starved of CPU
// between the request and its wait (a CI run with two cores and four suites met it on a
// container create), or a wait answered late was asked again. The operation did end;
// whether it did what it was asked is read from the object it changed (see settleGone),
// never assumed.
type OperationGoneError struct {
	ID, Op, Instance, Project string
	// Created is when the daemon made the operation, by its own clock (zero when its
	// answer did not say): an object the operation created is younger than it.
	Created time.Time
}

func (e *OperationGoneError) Error() string {
	return subject(e.Op, e.Instance, e.Project) + ": operation " + e.ID +
		" ended, but the daemon had forgotten it (it keeps an ended operation five seconds) before its result was read, and what it changed does not show that it did what was asked"
}

// IsOperationGone reports whether err is an OperationGoneError. It is not a not-found
// of the object (IsNotFound is false): the object may well exist.
func IsOperationGone(err error) bool {
	var g *OperationGoneError
	return errors.As(err, &g)
}

// settleGone turns an operation the daemon forgot into the outcome its object shows:
// nil when done reads that the change took effect, err otherwise (also when done cannot
// read it). Any other err is returned as it is.
func settleGone(ctx context.Context, err error, done func(ctx context.Context, gone *OperationGoneError) (bool, error)) error {
	var gone *OperationGoneError
	if !errors.As(err, &gone) {
		return err
	}
	if ok, derr := done(ctx, gone); derr == nil && ok {
		return nil
	}
	return err
}

// goneAfterDelete is a settleGone check for a delete: the object is gone.
func goneAfterDelete(get func(context.Context) error) func(context.Context, *OperationGoneError) (bool, error) {
	return func(ctx context.Context, _ *OperationGoneError) (bool, error) {
		err := get(ctx)
		if IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
}

// madeByIt is a settleGone check for a create: the object is there and younger than the
// operation. Its name alone would not do: a create whose name is taken is refused inside
// the operation, and the object found is the older one. Both times are the daemon's.
func madeByIt(created func(context.Context) (time.Time, error)) func(context.Context, *OperationGoneError) (bool, error) {
	return func(ctx context.Context, gone *OperationGoneError) (bool, error) {
		t, err := created(ctx)
		if err != nil {
			return false, err
		}
		return !gone.Created.IsZero() && !t.Before(gone.Created), nil
	}
}
