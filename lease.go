package baton

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Lease is a held lock. Its work context is cancelled, with a cause, as soon
// as the lease is lost or released; work done under the lease should use it.
//
// A lease is renewed in the background until Release. Losing it is reported
// three ways, all at once: Done is closed, Err returns a *LostError, and the
// work context is cancelled with that error as its cause.
//
// Holding a lease does not stop a paused process from writing after the
// lease ended: no check made before a write can. Writes that must not
// happen twice go through a fence with a FencedLease's token.
type Lease struct {
	name   string
	holder string
	token  Token
	hold   Hold
	logger *slog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc

	releaseTimeout time.Duration
	unfollow       func()  // stops following the hold's loss
	owner          *Locker // counts the lease among its live ones until it ends

	mu  sync.Mutex
	err error // nil while held
	// runCancel, set by Run, cancels fn's context (a child of the
	// caller's, for its deadline and values) in the same step as the
	// work context, under mu.
	runCancel context.CancelCauseFunc

	relOnce sync.Once
	relErr  error
}

func newLease(parent context.Context, name, holder string, h Hold, cfg Config, owner *Locker) *Lease {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	l := &Lease{
		name:           name,
		holder:         holder,
		token:          h.Token(),
		hold:           h,
		logger:         cfg.Logger,
		ctx:            ctx,
		cancel:         cancel,
		releaseTimeout: cfg.ReleaseTimeout,
	}
	l.owner = owner
	owner.track(l)
	l.unfollow = l.follow()
	switch d := h.Deadline(); {
	case h.Context().Err() != nil:
		l.lost() // ended already: not a moment later, from AfterFunc's goroutine
	case !time.Now().Before(d):
		// The local deadline passed since the backend's look (a pause):
		// the lock service may free the lock any moment; no work may start.
		l.markLost(deadlinePassed(d, "as the lease was granted"), false)
		// Free it now, as Release would: a caller that sees the loss may
		// drop the lease without Release, while the hold lives on (a
		// renewal in flight may have come through, a ZooKeeper node
		// stays for its session's life). A later Release returns what
		// this one did.
		_ = l.Release(parent)
	}
	return l
}

// deadlinePassed is the loss of a lease whose local deadline d passed
// when (as it was granted, before the release) its timer had not yet said so.
func deadlinePassed(d time.Time, when string) error {
	return fmt.Errorf("%w: the local deadline (%s) passed %s", ErrLeaseLost, d.Format(time.StampMilli), when)
}

// follow turns the hold's loss into the lease's, with context.AfterFunc,
// and returns how to stop.
func (l *Lease) follow() (stop func()) {
	unhook := context.AfterFunc(l.hold.Context(), l.lost)
	return func() { unhook() }
}

// lost reports the hold's loss, unless the lease was released first.
func (l *Lease) lost() {
	l.markLost(l.hold.Err(), false)
	l.owner.untrack(l)
}

// markLost records a loss with cause and cancels the work context with it,
// unless the lease had already ended; byRelease says that the release
// found the loss, after it marked the lease released, which the loss then
// replaces.
func (l *Lease) markLost(cause error, byRelease bool) {
	lost := &LostError{Name: l.name, Token: l.token, Cause: cause}
	l.mu.Lock()
	if l.err != nil && !(byRelease && l.err == ErrReleased) {
		l.mu.Unlock()
		return
	}
	l.err = lost
	l.cancelWork(lost) // after a release: already cancelled, with ErrReleased
	l.mu.Unlock()
	// Logged after the lock: a log writer that blocks (a stalled pipe)
	// must not hold up Err, which a supervisor reads to stop the work.
	l.logger.Warn("lease lost", "lock", l.name, "token", int64(l.token), "err", cause)
}

// cancelWork cancels the work context, and Run's fn's, with cause; l.mu is
// held.
func (l *Lease) cancelWork(cause error) {
	l.cancel(cause)
	if l.runCancel != nil {
		l.runCancel(cause)
	}
}

// runUnder has cancel, which cancels Run's fn's context, called in the same
// step as the work context's cancellation, or at once if the lease has
// ended already.
func (l *Lease) runUnder(cancel context.CancelCauseFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		cancel(context.Cause(l.ctx))
		return
	}
	l.runCancel = cancel
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Holder returns the holder identity stored with the lock.
func (l *Lease) Holder() string { return l.holder }

// Key returns the backend's key for this hold (the etcd key, the ZooKeeper
// node, the Redis key), for logs and status.
func (l *Lease) Key() string { return l.hold.Key() }

// Context returns the work context: it carries the values of the context
// Acquire was called with, is not cancelled when that context is, and is
// cancelled with cause *LostError on loss or ErrReleased on Release.
func (l *Lease) Context() context.Context { return l.ctx }

// Done returns a channel closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is held, a *LostError (matching
// ErrLeaseLost) once it was lost, or ErrReleased after Release. It changes
// together with Done and the work context: between the local deadline and
// the moment the backend's timer reports it (usually well under a
// millisecond), Err is still nil; work that must not outlive the lease
// checks Deadline as well. Release closes that gap: a lease released at or
// after its local deadline is reported lost, not released.
func (l *Lease) Err() error {
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err == nil && l.hold.Context().Err() != nil {
		l.lost() // a loss follow has not relayed yet
		l.mu.Lock()
		err = l.err
		l.mu.Unlock()
	}
	return err
}

// Deadline returns the local deadline: the send time of the last confirmed
// renewal (on ZooKeeper, of the one before it: see package zk) plus the
// TTL, minus the drift margin. The lock service cannot free
// the lock before it, so work that checks time.Until(Deadline()) knows how
// long it may still run; it is counted on the monotonic clock.
func (l *Lease) Deadline() time.Time { return l.hold.Deadline() }

// Release frees the lock if it is still ours and cancels the work context
// with ErrReleased. It runs on a context detached from ctx (keeping its
// values) and bounded by the release timeout, so it frees the lock at once
// even when ctx is already cancelled. It is idempotent: later calls return
// the first call's result. Releasing a lost lease returns nil, unless the
// release itself found the local deadline passed (before the hold's timer
// said so) and the request that frees its key, which the service may not
// have freed yet, fails: then the release's error, as for a lease that
// holds. A lease that Locker.Close ended is lost (with ErrClosed): once
// the backend's Close has ended its hold, its Release returns nil and
// logs nothing, since a failure to free its lock is Close's error (a
// Release that comes first frees the lock itself, and returns its own
// failure). Err still reports the
// loss, also one that only the release finds: the local
// deadline passed before the release, or the lock key was deleted by
// someone else, which the backend had not yet noticed, when the release's
// answer came before the local deadline (a later one cannot tell that from
// a key that ran out after the work stopped: see "What is not" in the
// package documentation). In the latter case
// Err changes from ErrReleased to the *LostError when Release returns,
// while the work context, cancelled as the release began, keeps
// ErrReleased as its cause.
func (l *Lease) Release(ctx context.Context) error {
	l.relOnce.Do(func() { l.relErr = l.release(ctx) })
	return l.relErr
}

func (l *Lease) release(ctx context.Context) error {
	if l.hold.Context().Err() != nil {
		l.lost() // a loss the hold saw but had not yet relayed
	} else if d := l.hold.Deadline(); !time.Now().Before(d) {
		// The local deadline passed and the hold's timer has not fired
		// yet: the work may have run past it, so this is a loss all the
		// same, not a release.
		l.markLost(deadlinePassed(d, "before the release"), false)
	}
	l.mu.Lock()
	released := l.err == nil
	if released {
		l.err = ErrReleased
		l.cancelWork(ErrReleased) // stop the work before the lock is free
	}
	l.mu.Unlock()
	if d := l.hold.Deadline(); released && !time.Now().Before(d) {
		// The deadline passed between the look above and the work's stop.
		l.markLost(deadlinePassed(d, "before the release"), true)
	}
	l.unfollow()
	l.owner.untrack(l)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.releaseTimeout)
	defer cancel()
	err := l.hold.Release(rctx)
	switch {
	case errors.Is(err, ErrLeaseLost):
		// The release found the lease lost (the lock key already gone):
		// a loss like any other, which Err reports.
		if released {
			l.markLost(err, true)
		}
		return nil
	case err != nil && errors.Is(l.hold.Err(), ErrClosed):
		// The backend's Close ended the hold (Locker.Close, which marked
		// the lease lost first) and failed to free the lock: Close
		// returns that failure, which the hold's Release returns again.
		// The lease was lost, not released, and its release is not to
		// blame. A release that ended the hold before the backend's Close
		// came to it failed on its own: that is its error, below.
		return nil
	case err != nil:
		l.logger.Warn("release failed; the lock stays until its TTL runs out", "lock", l.name, "err", err)
		return fmt.Errorf("release %q: %w", l.name, err)
	}
	return nil
}

// FencedLease is a Lease with a fencing token, handed out only by a
// FencedLocker. Pass Token to a Fence with every write that must not come
// from a stale holder. Its methods are those of Lease, plus Token.
type FencedLease struct {
	l *Lease
}

// Token returns the lease's fencing token.
func (f *FencedLease) Token() Token { return f.l.token }

// Lease returns the lease without its token, for code that takes a *Lease.
func (f *FencedLease) Lease() *Lease { return f.l }

// Name returns the lock's name.
func (f *FencedLease) Name() string { return f.l.Name() }

// Holder returns the holder identity stored with the lock.
func (f *FencedLease) Holder() string { return f.l.Holder() }

// Key returns the backend's key for this hold.
func (f *FencedLease) Key() string { return f.l.Key() }

// Context returns the work context; see Lease.Context.
func (f *FencedLease) Context() context.Context { return f.l.Context() }

// Done returns a channel closed when the lease is lost or released.
func (f *FencedLease) Done() <-chan struct{} { return f.l.Done() }

// Err returns nil while held, a *LostError after a loss, ErrReleased after
// Release.
func (f *FencedLease) Err() error { return f.l.Err() }

// Deadline returns the local deadline; see Lease.Deadline.
func (f *FencedLease) Deadline() time.Time { return f.l.Deadline() }

// Release frees the lock if it is still ours; see Lease.Release.
func (f *FencedLease) Release(ctx context.Context) error { return f.l.Release(ctx) }

// Raise raises fence for the lease's name to its token, as Run does before
// fn; see Fence.Raise. A refusal as stale goes through CheckStale.
func (f *FencedLease) Raise(ctx context.Context, fence Fence) error {
	return f.CheckStale(ctx, fence.Raise(ctx, f.Name(), f.Token()))
}

// CheckStale returns err, a fenced write's error (Raise's, a run marked
// done, a write of the caller's own through Fence.WithTx). When err is a
// *StaleTokenError whose fence has a token newer than this lease's, it
// first asks the lock service who holds the lock: if the service still
// names this lease, the fence's newer token cannot have come from a later
// holder of this service, and the error has Ahead set, which its message
// explains. If the service cannot say, the error is left as the fence
// returned it. The look must see the service's latest state, and does:
// etcd's reads are linearizable, the ZooKeeper backend syncs before it
// lists, PostgreSQL answers from the primary; and Ahead is set only while
// the lease's local deadline has not passed.
func (f *FencedLease) CheckStale(ctx context.Context, err error) error {
	var stale *StaleTokenError
	if !errors.As(err, &stale) || stale.Newest <= f.Token() {
		return err
	}
	term, lerr := f.l.owner.Leader(ctx, f.Name())
	if lerr == nil && term.Key == f.Key() && term.Token == f.Token() && f.Err() == nil && time.Now().Before(f.Deadline()) {
		stale.Ahead = true
	}
	return err
}
