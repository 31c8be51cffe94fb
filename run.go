package baton

import (
	"context"
	"errors"
)

// Run acquires the lock name (blocking, bounded by ctx), runs fn under the
// lease and releases it. fn's context is cancelled when ctx is, and when the
// lease is lost, with the *LostError as its cause.
//
// Run returns only after fn has returned. Its error is fn's; if the lease was
// lost before fn returned, the error also matches ErrLeaseLost, even when fn
// itself returned nil, because fn's work may have overlapped another holder's.
// If fn panics, Run releases the lease and the panic goes on.
//
// When the acquisition fails, Run returns Acquire's error as it is, and fn
// never ran. That error may match ErrLeaseLost as well: the session the
// wait was made on ended, and nothing was held (see Locker.Acquire). A
// lease lost as it was granted (a pause; see Locker.Acquire) is reported
// as a loss too, without fn being called. Run's error does not tell these
// apart from a loss while fn ran; whether fn was called does, so a caller
// that must know whether work may have overlapped another holder's
// records in fn that it was called.
func (l *Locker) Run(ctx context.Context, name string, fn func(ctx context.Context, lease *Lease) error) error {
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	return runHeld(ctx, lease, func(ctx context.Context) error { return fn(ctx, lease) })
}

// Run acquires the lock name, raises fence for name to the lease's token,
// runs fn and releases the lease. Raising the fence before fn runs closes
// the guide's first gap: from that moment no older holder can write through
// the fence, even before fn's first write. A stale token (a newer holder has
// already raised the fence) returns a *StaleTokenError without running fn;
// see FencedLease.Raise.
// A nil fence skips that step. The fence is raised on the context fn gets:
// it ends when ctx is cancelled or the lease ends, and the lease is then
// released. See Locker.Run for the rest.
func (f *FencedLocker) Run(ctx context.Context, name string, fence Fence, fn func(ctx context.Context, lease *FencedLease) error) error {
	lease, err := f.Acquire(ctx, name)
	if err != nil {
		return err
	}
	return runHeld(ctx, lease.l, func(ctx context.Context) error {
		// On fn's context: a Raise held up (PostgreSQL waiting on a frozen
		// old holder's transaction) ends when the caller gives up.
		if fence != nil {
			if err := lease.Raise(ctx, fence); err != nil {
				return err // the fence's error names it and the token
			}
		}
		return fn(ctx, lease)
	})
}

func runHeld(ctx context.Context, lease *Lease, fn func(context.Context) error) error {
	// fn's context is the caller's (its deadline, its values), cancelled
	// also in the same step as the lease reports a loss.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lease.runUnder(cancel)

	returned := false
	defer func() {
		if !returned {
			// fn panicked (or called runtime.Goexit): free the lock before
			// the panic goes on, or a caller that recovers (net/http, a
			// job runner) would keep it renewed for the process's life.
			// A failed release is logged by Release.
			_ = lease.Release(ctx)
		}
	}()
	var ferr error
	if lease.Err() == nil { // else lost as granted (see newLease): neither the fence nor fn may run on it
		ferr = fn(wctx)
	}
	returned = true
	rerr := lease.Release(ctx) // first: it also finds a loss not yet reported
	var lost *LostError
	if errors.As(lease.Err(), &lost) {
		if ferr == nil || !errors.Is(ferr, ErrLeaseLost) {
			ferr = errors.Join(ferr, lost)
		}
	}
	return errors.Join(ferr, rerr)
}
