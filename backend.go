package baton

import (
	"context"
	"time"
)

// Token is a fencing token: a number the lock service hands out with every
// grant, higher than every grant before it on the same lock, even across the
// lock service's failover. A fence compares tokens; nothing else about them
// is meaningful. Tokens are int64 because PostgreSQL bigint, etcd revisions
// and ZooKeeper zxids all are.
type Token int64

// Backend is the interface a lock service implements. Application code uses
// Locker and FencedLocker, which wrap a Backend with name validation, work
// contexts, detached release and Run; Backend is for those writing one.
type Backend interface {
	// Acquire takes the lock req.Name for req.Holder. With req.Wait false
	// it makes one attempt and returns an error wrapping ErrNotAcquired
	// (ideally a *NotAcquiredError) when another holder has the lock. With
	// req.Wait true it blocks until the lock is held or ctx ends. It never
	// returns a Hold whose lease it knows to be dead; one lost just after
	// its look (a pause, a loss the service reports at once) comes with
	// Context cancelled, which the Lease then reports.
	Acquire(ctx context.Context, req Request) (Hold, error)
	// Close ends every hold and frees the backend's resources.
	Close() error
}

// FencedBackend is a Backend whose tokens never go backwards, even when the
// lock service fails over: etcd, ZooKeeper, PostgreSQL. Only a FencedBackend
// can be wrapped into a FencedLocker.
type FencedBackend interface {
	Backend
	// TokenSource says in a few words where tokens come from, such as
	// "create revision of the lock key".
	TokenSource() string
}

// Request is one acquisition asked of a Backend.
type Request struct {
	Name   string // validated by ValidateName
	Holder string // stored with the lock
	Wait   bool   // block until held, or make one attempt
}

// Hold is one held lock, as a Backend reports it.
type Hold interface {
	// Key is the backend's name for the hold: the etcd key, the ZooKeeper
	// node path, the Redis key.
	Key() string
	// Token is the fencing token; zero on a backend that is not fenced.
	Token() Token
	// Context is cancelled when the hold is lost (a refused renewal, a
	// local deadline passed without a confirmed renewal, a dead session,
	// the key removed) or released. A Lease follows it with
	// context.AfterFunc, so holding a lock costs no goroutine of the
	// Lease's own.
	Context() context.Context
	// Err says why Context was cancelled: a cause matching ErrLeaseLost, or
	// ErrReleased or ErrClosed; nil before that.
	Err() error
	// Deadline is the local deadline: the send time of the last confirmed
	// renewal (or of one the service is known to have counted from) plus
	// the TTL, minus the drift margin, on the monotonic clock.
	Deadline() time.Time
	// Release frees the lock if it is still ours; it never frees another
	// holder's. Releasing a lost hold returns nil, or an error matching
	// ErrLeaseLost when the release finds (or found just before) that the
	// hold was lost, which Lease.Release then records as the lease's loss.
	// A later Release returns nil or what the first returned. ctx bounds
	// the request as given: Lease.Release passes one detached from the
	// caller's cancellation and bounded by the release timeout. A caller
	// may drop a lost hold without Release: the backend lets go of it at
	// its loss (it renews it no more, and does not keep it for Close).
	Release(ctx context.Context) error
}

// LockInfo describes one lock as the lock service sees it.
type LockInfo struct {
	Name    string
	Holder  string // empty when no one holds it
	Key     string // the holder's key
	Token   Token  // zero on backends without tokens
	TTLLeft time.Duration
	// Since is when the holder took the lock, by the holder's clock (the
	// database's, on PostgreSQL; on ZooKeeper, the server's for a node
	// that does not record the holder's); zero when unknown. On etcd and
	// ZooKeeper, where a waiter queues with a key or node of its own that
	// becomes the hold, it is when the holder joined the queue: earlier
	// than it took the lock by its wait.
	Since   time.Time
	Waiters int // acquisitions queued behind the holder
	// Err, in a list of every held lock (Inspect without names), is why
	// this lock could not be read: keys or nodes that this client may not
	// read (an ACL), or that another tool wrote (a Redis key of another
	// type, ZooKeeper sequence numbers that wrapped). Such a lock is
	// listed with its Name and Err alone, so that one stray entry does not
	// fail the whole list, nor go unseen; Inspect with its name returns
	// the same error. Nil otherwise.
	Err error
}

// Inspector is implemented by backends that can list their locks, for
// `baton status`.
type Inspector interface {
	// Inspect returns the named locks (held or not), or every held lock
	// when names is empty, sorted by name. A lock that cannot be read
	// makes naming it an error; in a list of every held lock, it is
	// listed with LockInfo.Err, and the list is an error only when no lock
	// could be read.
	Inspect(ctx context.Context, names ...string) ([]LockInfo, error)
}

// ForceReleaser is implemented by backends that can free a lock held by
// someone else, for an operator who must clear a hold by hand. The holder
// learns it lost the lease; a fence still refuses its writes once the next
// holder has raised it.
type ForceReleaser interface {
	// ForceRelease frees the lock name and returns what it was.
	// A lock no one holds returns a *NotAcquiredError with Free set
	// (matching ErrNotAcquired); a lock
	// that changed hands between the read of its holder and the release,
	// one matching ErrChangedHands, having freed nothing. The backends
	// send a delete whose answer was lost again, within the request
	// timeout, so after an error matching ErrUnavailable the outcome
	// stayed unknown: the lock may have been freed all the same. Look
	// again (Inspect) before forcing again, which would free the next
	// holder's lock.
	ForceRelease(ctx context.Context, name string) (LockInfo, error)
}
