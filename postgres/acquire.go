package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
)

// Timing of a waiter's own re-checks.
const (
	// recheckMargin is added to the time the database says a lease or a
	// waiter's row has left, so that the re-check lands after it ended.
	recheckMargin = time.Millisecond
	// minRecheck keeps a waiter that lost a race from spinning.
	minRecheck = time.Millisecond
)

// errTooSlow means an acquisition was confirmed only after the lease's
// local deadline, so the lease was given back at once.
var errTooSlow = errors.New("the lock was granted, but the answer came after the lease's local deadline")

// Acquire implements baton.Backend.
//
// One statement (attemptSQL, after locking the row in the same round trip)
// takes the lock when its row is free or expired by the database's clock
// and no live waiter is queued ahead; with req.Wait it queues the caller in
// the same statement when it cannot. A release hands the lock to the first
// waiter in the same transaction and NOTIFYs it with its token, so the
// waiter holds the lock without another round trip. A waiter also looks
// again on its own, when the holder's lease or the place of the waiter
// ahead of it ends by the database's clock (as the database reported it),
// and at least every RenewEvery, which keeps its own place alive; that
// look claims a hand-off whose NOTIFY was lost. Waiters get the lock in
// the order they queued.
//
// The acquisition runs on a goroutine of its own, so that Acquire returns
// at most the release timeout after ctx ends even while a statement is in
// flight, which is never cut off by the caller (see op). What is left of
// it then (the statement's answer, giving back a lease it granted,
// leaving the queue) goes on without the caller, and Close waits for it.
//
// The Locker's first acquisition (or Observe) creates the lock tables
// and sequences when they are missing, replaces a waiters table of an
// older baton, and sweeps the waiters table (see prepare); a failure
// there is its error, and the next call tries again.
func (b *backend) Acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	if ctx.Done() == nil { // a ctx that never ends: nothing to return early for
		return b.acquire(ctx, req)
	}
	type outcome struct {
		h   baton.Hold
		err error
	}
	res := make(chan outcome) // unbuffered: taken by the caller, unless it abandoned the acquisition
	abandoned := make(chan struct{})
	go func() {
		h, err := b.acquire(ctx, req)
		select {
		case res <- outcome{h, err}:
		case <-abandoned:
			defer b.abandoned.Done()
			if h != nil { // granted as ctx ended: nobody will use it
				// As freeDetached: a failure to free leaves the lock
				// taken until its TTL runs out, which the error says. A
				// loss leaves nothing to free.
				if err := h.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, baton.ErrLeaseLost) {
					b.cfg.Logger.Warn("could not give back a lease nobody will use", "lock", req.Name, "token", int64(h.Token()), "err", err)
				}
			}
		}
	}()
	select {
	case o := <-res:
		return o.h, o.err
	case <-ctx.Done():
	}
	timer := time.NewTimer(b.cfg.ReleaseTimeout)
	defer timer.Stop()
	select {
	case o := <-res:
		return o.h, o.err
	case <-timer.C:
	}
	b.mu.Lock()
	if b.closed { // Close may be waiting for the abandoned already: wait here instead
		b.mu.Unlock()
		o := <-res
		return o.h, o.err
	}
	b.abandoned.Add(1)
	close(abandoned)
	b.mu.Unlock()
	return nil, context.Cause(ctx)
}

// acquire is Acquire's acquisition. The Locker's first one creates the
// lock tables when they are missing (prepare).
func (b *backend) acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	// key names our waiter in the NOTIFY of a hand-off to us: a new one
	// for each attempt, so that a hand-off tells which attempt it came
	// after. One whose NOTIFY names an earlier attempt (held up on its way
	// while a later attempt ran, which claimed that hand-off or found it
	// freed since) is dropped: taken for a hold, it could be a lease
	// given back, or freed by force, and held by another since.
	var key string
	var wake <-chan int64
	// lis is the Locker's listener once it runs. Its first wait starts it
	// only when its first attempt did not get the lock: an Acquire of a
	// free lock opens no connection for it.
	var lis *listener
	var slot int32 // our waiters row; 0, no row, when not waiting
	// unsure: a statement on our slot's row failed, so it may yet run,
	// late (see giveSlot), or have run with its answer lost.
	unsure := false
	if req.Wait {
		lis = b.runningListener()
		defer func() {
			if lis != nil {
				lis.unregister(key)
			}
		}()
		slot = b.slots.take()
		// After leaving the queue: deferred calls run last first.
		defer func() { b.giveSlot(slot, unsure) }()
	}
	var ticket int64 // our place in the queue, once queued
	wrote := false   // a statement queued us: our slot has a row on this lock
	defer func() {
		// A statement that failed may have queued us, its answer lost (a
		// place whose ticket we never learned): leave then too, which
		// needs no ticket.
		if req.Wait && (ticket != 0 || unsure) {
			wrote = true
			if !b.leaveQueue(ctx, req.Name, slot, ticket, key) {
				unsure = true
			}
		}
		if wrote {
			b.keepRow(ctx, req.Name)
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if req.Wait {
			if lis != nil {
				lis.unregister(key)
			}
			key = strconv.FormatUint(b.waiterSeq.Add(1), 10)
			if lis != nil {
				// Known to the listener before the statement that queues
				// us can commit, so its NOTIFY cannot arrive unrouted.
				wake = lis.register(key)
			}
		}
		sent := time.Now()
		r, err := b.attempt(ctx, req, slot, ticket, key)
		if err != nil {
			unsure = true
			return nil, err
		}
		if r.ticket != nil {
			ticket = *r.ticket
			wrote = true
		}
		if r.token != nil {
			ticket = 0 // the statement took us off the queue
			h, err := b.held(ctx, req.Name, baton.Token(*r.token), sent)
			if errors.Is(err, errTooSlow) && req.Wait && ctx.Err() == nil {
				continue
			}
			return h, err
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !req.Wait {
			return nil, r.notAcquired(req.Name)
		}
		if lis == nil {
			// This Locker's first wait: listen, then look again at once.
			// That look claims a hand-off made before the LISTEN, whose
			// NOTIFY nobody heard, and has the next one sent to a key the
			// listener knows.
			if lis, err = b.listener(ctx); err != nil {
				return nil, err
			}
			continue
		}
		timer.Reset(r.recheckIn(b.cfg.RenewEvery))
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-timer.C:
		case token := <-wake:
			// Handed to us after our last statement ran (the NOTIFY
			// names its key), so the lease lasts at least TTL from then:
			// that is the keeper's start. If that leaves too little,
			// look again instead, which claims and extends it.
			if token > 0 && time.Since(sent) < (b.cfg.TTL-b.cfg.Drift)/2 {
				ticket = 0 // the hand-off took us off the queue
				return b.held(ctx, req.Name, baton.Token(token), sent)
			}
		}
	}
}

// result is what attemptSQL returns.
type result struct {
	token       *int64   // set when acquired
	ticket      *int64   // set when queued (or still queued)
	holder      *string  // the holder when the statement began, if any
	holderToken *int64   // its token
	holderLeft  *float64 // seconds its lease has left by the database's clock; nil when expired
	ahead       int64    // live waiters queued ahead of us
	aheadLeft   *float64 // seconds until the soonest of their rows expires
	next        *string  // the first of them's holder identity
}

// attempt runs attemptSQL after locking the lock's row, in one round trip
// and one transaction: attemptSQL then reads the queue with a snapshot
// taken under the row's lock, so it sees every hand-off and every waiter
// that came and went before it (a snapshot taken before waiting for the
// lock could count waiters that have since left, and queue behind them
// while the lock stays free).
func (b *backend) attempt(ctx context.Context, req baton.Request, slot int32, ticket int64, key string) (result, error) {
	b.attempts.Add(1)
	octx, cancel := b.op(ctx)
	defer cancel()
	var r result
	var batch pgx.Batch
	batch.Queue(b.sql.lockRow, req.Name)
	batch.Queue(b.sql.attempt, req.Name, req.Holder, b.cfg.TTL, ticket, req.Wait, b.channel, key, b.now(), slot).QueryRow(func(row pgx.Row) error {
		return row.Scan(&r.token, &r.ticket, &r.holder, &r.holderToken, &r.holderLeft, &r.ahead, &r.aheadLeft, &r.next)
	})
	if err := b.pool.SendBatch(octx, &batch).Close(); err != nil {
		b.failures.Add(1)
		return r, b.fail(ctx, "take the lease row", err)
	}
	return r, nil
}

// notAcquired says who holds the lock; a lock that is free but has waiters
// queued is being handed to the first of them, who is named instead.
func (r result) notAcquired(name string) error {
	e := &baton.NotAcquiredError{Name: name}
	switch {
	case r.holderLeft != nil && r.holder != nil && r.holderToken != nil:
		e.Holder, e.Token = *r.holder, baton.Token(*r.holderToken)
	case r.next != nil:
		e.Holder = *r.next + " (first in line)"
	}
	return e
}

// recheckIn is how long a waiter sleeps unless woken: until the holder's
// lease ends (when first in line) or the row of the first waiter ahead
// expires (when not), as the database reported it, and never longer than
// bound.
func (r result) recheckIn(bound time.Duration) time.Duration {
	left := r.holderLeft
	if r.ahead > 0 {
		left = r.aheadLeft
	}
	if left == nil {
		return minRecheck // free when the statement began, and still not ours: look again
	}
	d := seconds(*left) + recheckMargin
	return max(min(d, bound), minRecheck)
}

// held makes the hold for a granted lease, or gives the lease back when
// the caller gave up or the grant came too late to be of use.
func (b *backend) held(ctx context.Context, name string, token baton.Token, sent time.Time) (baton.Hold, error) {
	if ctx.Err() != nil {
		b.freeDetached(ctx, name, token)
		return nil, context.Cause(ctx)
	}
	if took := time.Since(sent); took >= b.cfg.TTL-b.cfg.Drift {
		b.freeDetached(ctx, name, token)
		return nil, &baton.UnavailableError{Where: b.where, Err: fmt.Errorf("%w (it took %v; TTL %v)", errTooSlow, took.Round(time.Millisecond), b.cfg.TTL)}
	}
	h := newHold(b, name, token, sent)
	if !b.track(h) {
		_ = h.end(ctx, baton.ErrClosed, false)
		return nil, baton.ErrClosed
	}
	return h, nil
}

func (b *backend) freeDetached(ctx context.Context, name string, token baton.Token) {
	fctx, cancel := b.detached(ctx)
	defer cancel()
	if _, err := b.free(fctx, name, token); err != nil {
		b.cfg.Logger.Warn("could not give back a lease nobody will use", "lock", name, "token", int64(token), "err", err)
	}
}

// keepRow notes that this Locker keeps a row on name, after a wait there
// that queued, and deletes its ended rows on the lock it waited on least
// recently when that makes more than maxKeptLocks locks: one more round
// trip at the end of such a wait, only for a Locker that waits on ever new
// names.
func (b *backend) keepRow(ctx context.Context, name string) {
	evict, ok := b.kept.ended(name)
	if !ok {
		return
	}
	fctx, cancel := b.detached(ctx)
	defer cancel()
	if _, err := b.pool.Exec(fctx, b.sql.forgetName, evict, b.channel); err != nil {
		b.cfg.Logger.Debug("could not delete this Locker's rows in the waiters table; its Close deletes them, as do a Locker's first acquisition or observer and the Close of one that waited once their place ended an hour ago", "lock", evict, "err", err)
	}
}

// giveSlot returns slot for another acquisition of this Locker to use,
// unless unsure: a statement of ours on its row failed, and one whose
// answer was lost may have committed while a copy held up in the network
// can still arrive and run. Such a statement, run on the row of another
// acquisition waiting in the same slot, would take that waiter's place
// (its ticket, and the key its hand-off is sent to) or end it. The slot's
// number is not used again; its row ends with its place, and goes with
// the Locker's other rows.
func (b *backend) giveSlot(slot int32, unsure bool) {
	if !unsure {
		b.slots.give(slot)
	}
}

// leaveQueue takes us off the queue (ends our place in slot), also when
// ticket is 0: a statement whose answer was lost may have queued us. If
// the lock was handed to us meanwhile (to ticket, or to the place our last
// attempt, key, made; or an acquisition we never heard back from took
// it), it frees it and hands it on; all under the row's lock, so no
// hand-off can pick us after we left. When we were first in line, the
// waiter now first is told to look again: waiters behind the first sleep
// up to RenewEvery, and it would find the holder's lease ended that late.
// It reports whether the server confirmed it.
func (b *backend) leaveQueue(ctx context.Context, name string, slot int32, ticket int64, key string) bool {
	fctx, cancel := b.detached(ctx)
	defer cancel()
	var batch pgx.Batch
	batch.Queue(b.sql.lockRow, name)
	batch.Queue(b.sql.leave, name, b.channel, slot)
	batch.Queue(b.sql.freeOur, name, ticket, b.channel, slot, key)
	batch.Queue(b.sql.handOff, name)
	batch.Queue(b.sql.tellHead, name, ticket)
	if err := b.pool.SendBatch(fctx, &batch).Close(); err != nil {
		b.cfg.Logger.Warn("could not leave the queue; the place expires within one TTL", "lock", name, "ticket", ticket, "err", err)
		return false
	}
	return true
}
