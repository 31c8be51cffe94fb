package baton

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/baton-go/baton/internal/asynclog"
)

// Locker hands out leases on one lock service. It is safe for concurrent
// use; two acquisitions of one name through the same Locker exclude each
// other exactly as two processes do.
//
// A Locker gives no fencing tokens: it fits an efficiency lock, where a rare
// double run only wastes work. For a correctness lock use a FencedLocker,
// which only fenced backends (etcd, ZooKeeper, PostgreSQL) return.
type Locker struct {
	b   Backend
	cfg Config

	closing  context.Context // cancelled by Close, ending waits in flight
	shut     context.CancelCauseFunc
	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	relays   sync.WaitGroup      // Observe's relays, which Close waits for
	leases   map[*Lease]struct{} // live: neither released nor lost yet

	closeOnce sync.Once
	closeErr  error
}

// NewLocker wraps a backend built with cfg. Backend packages call it; most
// programs get a Locker from a backend's constructor or from Open. Fields
// a Config built by hand leaves zero get NewConfig's defaults, and its
// Logger is put behind a queue as NewConfig does (see WithLogger): a
// backend that logs should use the Locker's Config().Logger, or build cfg
// with NewConfig and log through cfg.Logger, so that its records share
// that queue and Close flushes them.
func NewLocker(b Backend, cfg Config) *Locker {
	cfg.fill()
	closing, shut := context.WithCancelCause(context.Background())
	return &Locker{b: b, cfg: cfg, closing: closing, shut: shut, leases: map[*Lease]struct{}{}}
}

// Config returns the configuration the Locker was built with.
func (l *Locker) Config() Config { return l.cfg }

// Acquire blocks until it holds the lock name, ctx ends, or the lock
// service fails. When ctx ends first it returns an error wrapping
// context.Cause(ctx); when the service cannot be reached or answers
// nothing within the request timeout, an error wrapping ErrUnavailable;
// after Close, an error matching ErrClosed.
//
// It may also return an error matching ErrLeaseLost, although nothing was
// held: the session the wait was made on, or its place in the lock's queue
// (an etcd key, a ZooKeeper node), ended while it waited: it expired, was
// revoked or deleted, or its local deadline passed during an outage of the
// lock service. The etcd and ZooKeeper backends do so. As after
// ErrUnavailable, the remedy is to acquire again; no work ran under a
// lease.
//
// The Lease it returns stays held, renewed in the background, until it is
// released, lost, or the Locker is closed; the end of ctx does not end it.
// A Lease dropped without Release is not freed when nothing uses it any
// more: the Locker keeps it and the backend renews it until Close (or a
// loss), and no one else can take the lock meanwhile. Always Release it
// (defer lease.Release(ctx)), or use Run, which does.
//
// A waiter that gives up takes its place out of the lock's queue before
// it returns, so that it does not stand ahead of later waiters: against a
// service that answers, that is one more round trip; against one that
// does not, Acquire returns up to the release timeout after ctx ended
// (the place then goes with the waiter's session, key or entry TTL).
//
// The lease it returns may be lost already: if this process paused between
// the service's answer and the lease's making, past its local deadline,
// its work context is cancelled and its hold released at once. Check
// Context or Err before the work starts, as Run does.
func (l *Locker) Acquire(ctx context.Context, name string) (*Lease, error) {
	return l.acquire(ctx, name, true)
}

// TryAcquire makes one attempt at the lock name and returns an error
// matching ErrNotAcquired (a *NotAcquiredError) at once if another holder
// has it. Its other errors are Acquire's, an error matching ErrLeaseLost
// included: the session the attempt was made on ended, and nothing was
// held. The Lease it returns must be released, as Acquire's.
func (l *Locker) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	return l.acquire(ctx, name, false)
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool) (*Lease, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	actx, end, done, err := l.enter(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
	defer done()
	defer end()

	if actx.Err() != nil {
		return nil, fmt.Errorf("acquire %q: %w", name, context.Cause(actx))
	}
	h, err := l.b.Acquire(actx, Request{Name: name, Holder: l.cfg.Holder, Wait: wait})
	if err != nil {
		outcome := errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrLeaseLost)
		if !outcome {
			awaitDeadline(actx)
		}
		if actx.Err() != nil && !outcome {
			err = context.Cause(actx)
		}
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
	if h == nil { // a backend's bug: said so, not a panic on the nil hold
		return nil, fmt.Errorf("acquire %q: the backend returned neither a hold nor an error (%T): a bug, please report it", name, l.b)
	}
	if l.cfg.Logger.Enabled(ctx, slog.LevelDebug) { // the arguments allocate
		l.cfg.Logger.Debug("lease acquired", "lock", name, "key", h.Key(), "token", int64(h.Token()))
	}
	return newLease(ctx, name, l.cfg.Holder, h, l.cfg, l), nil
}

// enter counts a call that goes on to the backend among those Close
// waits for, until done, and returns ctx cancelled with ErrClosed as
// Close begins, until end (which also cancels it). Once Close has begun
// it returns ErrClosed: the count is added under mu, after the look at
// closed, so Close's Wait comes after every Add.
func (l *Locker) enter(ctx context.Context) (cctx context.Context, end, done func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, nil, ErrClosed
	}
	l.inflight.Add(1)
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.closing, func() { cancel(ErrClosed) })
	return cctx, func() { stop(); cancel(nil) }, l.inflight.Done, nil
}

// awaitDeadline waits, briefly, for ctx to end when its deadline has
// passed. A client that puts the context's deadline on its socket (as
// go-redis does) fails the request at that instant, before the context's
// own timer has fired: without the wait, the caller's deadline would be
// reported as the service failing.
func awaitDeadline(ctx context.Context) {
	d, ok := ctx.Deadline()
	if !ok || time.Now().Before(d) {
		return
	}
	t := time.NewTimer(50 * time.Millisecond) // the timer is due; a wall-clock deadline may lag
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// track counts lease among the live ones, which Close ends. It is called
// before inflight.Done, so Close, which waits for that, finds every lease.
func (l *Locker) track(lease *Lease) {
	l.mu.Lock()
	l.leases[lease] = struct{}{}
	l.mu.Unlock()
}

// untrack forgets lease, which ended (released or lost).
func (l *Locker) untrack(lease *Lease) {
	l.mu.Lock()
	delete(l.leases, lease)
	l.mu.Unlock()
}

// Close ends the waits in flight, then every hold made through the Locker,
// and frees its resources; the observations end too, their channels closed
// by the time it returns. Leases still held are lost: their work contexts
// are cancelled, and Err reports it, before the lock service frees their
// locks (where the backend can) for the next holders. Close is idempotent.
func (l *Locker) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.shut(ErrClosed)
		l.inflight.Wait()
		l.mu.Lock()
		live := l.leases
		l.leases = nil
		l.mu.Unlock()
		for lease := range live {
			lease.markLost(ErrClosed, false) // the work stops before the lock is free
		}
		l.closeErr = l.b.Close()
		l.relays.Wait() // the backend has closed their observations
		// The last records, for a program that exits next; a handler
		// that does not take them within the release timeout loses them.
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ReleaseTimeout)
		_ = asynclog.Flush(ctx, l.cfg.Logger)
		cancel()
	})
	return l.closeErr
}

// Backend returns the backend the Locker wraps.
func (l *Locker) Backend() Backend { return l.b }

// Fenced returns the FencedLocker view of l and true when its backend gives
// fencing tokens, and nil and false otherwise. Programs that build a Locker
// from a URL use it to refuse a fence on a backend that cannot serve one.
func (l *Locker) Fenced() (*FencedLocker, bool) {
	if _, ok := l.b.(FencedBackend); !ok {
		return nil, false
	}
	return &FencedLocker{l: l}, true
}

// FencedLocker hands out FencedLeases, each with a fencing token. Only
// backends whose tokens never go backwards, even across failover, can build
// one; that makes the guide's decision rule a compile-time fact.
type FencedLocker struct {
	l *Locker
}

// NewFencedLocker wraps a fenced backend built with cfg.
func NewFencedLocker(b FencedBackend, cfg Config) *FencedLocker {
	return &FencedLocker{l: NewLocker(b, cfg)}
}

// Acquire blocks until it holds the lock name, ctx ends, or the lock
// service fails (see Locker.Acquire).
func (f *FencedLocker) Acquire(ctx context.Context, name string) (*FencedLease, error) {
	lease, err := f.l.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return &FencedLease{l: lease}, nil
}

// TryAcquire makes one attempt at the lock name; see Locker.TryAcquire.
func (f *FencedLocker) TryAcquire(ctx context.Context, name string) (*FencedLease, error) {
	lease, err := f.l.TryAcquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return &FencedLease{l: lease}, nil
}

// Locker returns the unfenced view, for code that takes a *Locker.
func (f *FencedLocker) Locker() *Locker { return f.l }

// TokenSource says where the backend's tokens come from.
func (f *FencedLocker) TokenSource() string { return f.l.b.(FencedBackend).TokenSource() }

// Close closes the underlying Locker.
func (f *FencedLocker) Close() error { return f.l.Close() }
