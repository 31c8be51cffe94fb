// Package baton makes a job run once across many replicas, and makes a
// paused, late or cut-off holder harmless.
//
// A Locker hands out leases: locks that end on their own after a TTL unless
// renewed. Backends live in their own packages (etcd, zk and postgres,
// fenced; redis and redlock, efficiency-only) and return a *Locker, or a
// *FencedLocker when their tokens never go backwards, even across the lock
// service's failover. Only a FencedLease
// carries a Token, so code that needs fencing cannot be handed an
// efficiency-only lock by mistake: the guide's decision rule is a type.
//
//	locker, _ := etcd.New(client, baton.WithTTL(15*time.Second))
//	err := locker.Run(ctx, "invoices", fence, func(ctx context.Context, lease *baton.FencedLease) error {
//		// the fence is already raised to lease.Token(); write through it
//	})
//
// # What is guaranteed
//
//   - At most one holder per name at a time, as the lock service sees it:
//     two acquisitions exclude each other whether they come from two
//     processes or from one Locker.
//   - A FencedLease's token is higher than that of every earlier holder of
//     the same name.
//   - A held lease is renewed every RenewEvery (default TTL/3) until it is
//     released or lost. Loss is reported three ways at once: Done closes,
//     Err returns a *LostError, and the work context is cancelled with that
//     error as its cause.
//   - Release frees only our own hold, never another holder's, and still
//     happens when the caller's context is already cancelled.
//   - Run returns only after its function has returned, and reports a loss
//     during it even when the function itself returned nil.
//
// # What is not
//
//   - A lease cannot stop a paused process from writing after its lease
//     ended: a SIGSTOP, a long GC pause or a suspended VM can strike between
//     any check and the write that follows it. Writes that must not happen
//     twice go through a Fence (fence/postgres, fence/sqlite), which refuses
//     a token older than the newest it has seen, in the same transaction as
//     the write. FencedLocker.Run raises the fence before the work starts,
//     so from that moment no older holder can write.
//   - Side effects outside the fenced store (an email, a payment call) are
//     not fenced. Record the intent in the fenced store and have a single
//     sender act on it.
//   - A lock taken from a holder that cannot hear the service (a forced
//     release, or a delete by another client, while it is cut off) is
//     reported when the holder hears again, or at its local deadline. When
//     the holder's own Release is the first to hear, and its answer comes
//     after the local deadline, the release cannot tell that from a key
//     that ran out with its lease after the work had stopped, and reports
//     a release, not a loss: the work may have overlapped the next
//     holder's, which the fence, raised by that holder, made harmless.
//
// # The clock model
//
// The holder never trusts the lock service's clock, nor its own wall clock.
// Its local deadline is the send time of the last renewal the service
// confirmed, plus the TTL, minus a drift margin (default TTL/100 + 2ms),
// counted on Go's monotonic clock: the service cannot have freed the lock
// before that moment, because it extended the lease on receiving a request
// that was sent no earlier. When the deadline passes without a confirmed
// renewal the lease is reported lost, before anyone else can hold it. (On
// a ZooKeeper ensemble the leader may hear of a renewal that a follower
// answered only later, so there the deadline counts from the renewal
// before the last: see package zk.)
//
// The loss is told by a timer at the deadline, and a timer's goroutine
// runs when the Go scheduler gives it a CPU. In an idle process that is
// well under a millisecond; in one whose goroutines keep every CPU busy it
// waits for one of them to be preempted, about 10ms, and longer at times
// (measured on a 2-core machine with GOMAXPROCS=2 and CPU-bound goroutines:
// 10ms at the median, 25 to 45ms at the 99th percentile). The drift margin
// is what covers that lateness: at the default, TTL/100 + 2ms, it does for
// TTLs of a few seconds and more (152ms at 15s), not at 1s (12ms). A
// short TTL in a CPU-bound process wants WithDrift of 50ms or more; either
// way a holder that is told late is a paused holder, which the fence is
// for. (baton run's own process is idle: its command runs in a process of
// its own.)
//
// Nor does the loss wait for logging: the logger given with WithLogger
// gets its records from a goroutine of baton's own, so a handler that
// blocks (writing to a pipe nobody reads) holds up no loss, give-back or
// wake-up; past 1,024 waiting records baton drops its records, and logs
// how many.
//
// Go's monotonic clock is CLOCK_MONOTONIC, which keeps running while a
// process is stopped but not while the machine itself is suspended. A
// holder on a suspended VM wakes believing less time has passed than did;
// its first renewal then fails, but a write already under way is not
// stopped. That is what the fence is for.
//
// # Errors
//
// Errors match the sentinels with errors.Is: ErrNotAcquired (held by someone
// else; from a forced release, a *NotAcquiredError with Free: no one held
// it), ErrLeaseLost, ErrStaleToken, ErrUnavailable (the lock service
// failed), ErrInvalidOption, ErrClosed, ErrReleased, and ErrChangedHands
// (a forced release found the lock changed hands). A caller's cancellation
// is returned as context.Cause(ctx), so three outcomes of a failed
// acquisition, cancelled, contended (ErrNotAcquired) and failed
// (ErrUnavailable), are always told apart. A fourth matches ErrLeaseLost
// although nothing was held: on etcd and ZooKeeper, the session the
// acquisition waited on, or its place in the lock's queue, ended while it
// waited (it expired, was revoked or deleted, or its local deadline passed
// during an outage). As after ErrUnavailable, acquiring again is the
// remedy. So ErrLeaseLost says that work ran under a lease that was lost
// only when it comes from the lease (Err, its work context) or from a Run
// whose function was called; see Locker.Acquire and Locker.Run.
package baton
