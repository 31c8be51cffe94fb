// Package keeper renews a lease in the background and keeps its local
// deadline: the send time of the last confirmed renewal (with Settle, of
// the one before it) plus the TTL, minus a drift margin, counted on the
// monotonic clock. The lock service cannot
// free the lease before that moment, so a holder told to stop at it is
// told before anyone else can start, as long as the timer that tells it
// runs within the drift margin of the deadline (see the baton package's
// clock model: a process whose CPUs are busy runs it later).
//
// Backends use one Keeper per unit of liveness: per etcd session (many locks
// share it), per Redis key, per PostgreSQL lease row, per ZooKeeper
// session.
package keeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/baton-go/baton"
)

// RenewFunc makes one renewal. It returns nil when the lease was extended by
// the full TTL from a moment no earlier than the call's start. An error
// matching baton.ErrLeaseLost is final (the service refused, or the
// backend gives up on a failure: the efficiency-only Redis backends do);
// any other error is retried until the local deadline passes. ctx
// ends at the local deadline: a renewal that lands later cannot help.
type RenewFunc func(ctx context.Context) error

// ErrDeadline is the cause of a loss by the local deadline.
var ErrDeadline = errors.New("local deadline passed without a confirmed renewal")

// Keeper renews one lease until stopped or lost. It runs no goroutine
// between renewals: its Scheduler calls it at the next renewal or at the
// local deadline, whichever comes first, and that call renews or reports
// the loss. Stop waits for a call or renewal in flight.
type Keeper struct {
	ttl, every, drift time.Duration
	renew             RenewFunc
	log               *slog.Logger

	ctx      context.Context // cancelled by Stop and by a loss
	cancel   context.CancelFunc
	sched    *Scheduler
	ticks    sync.WaitGroup // calls of tick scheduled or running
	renewals sync.WaitGroup // renewals in flight
	done     chan struct{}

	settle  time.Duration // see Settle; 0 counts every confirmation at once
	onLoss  func()        // see OnLoss; nil: none
	settled chan struct{} // closed once the deadline counts from a known base

	mu       sync.Mutex
	pending  *tick        // the scheduled call of tick
	next     time.Time    // when to renew
	lastErr  error        // the last renewal's error, since the last success
	last     confirmation // the last confirmation; with Settle, the next settles it
	known    bool         // the deadline counts from a known base: Settled is closed
	deadline time.Time
	err      error
}

// confirmation is one confirmed request: when it was sent and when its
// answer came.
type confirmation struct{ sent, answered time.Time }

// An Option changes how a Keeper counts its deadline.
type Option func(*options)

// options are Start's options.
type options struct {
	settle time.Duration
	base   time.Time // what the first deadline counts from; zero: none known
	onLoss func()
}

// OnLoss has the Keeper call f once if the lease is lost, never when Stop
// ends it first: from the goroutine that found the loss (the Scheduler's
// call, Lose's caller, or Start's, when the answer came past the
// deadline), after Done is closed and every call and renewal in flight has
// ended (so f waits for a renewal that ignores its cut-off context), and
// before Lose returns, or Stop if the Scheduler's call found the loss. A
// backend drops a lost hold from the ones it keeps with it, as a caller
// may let a lost lease go without Release: nothing of the Keeper's runs
// after f. f must not call Stop or Lose.
func OnLoss(f func()) Option {
	return func(o *options) { o.onLoss = f }
}

// Settle makes the Keeper count the deadline only from confirmations that
// the service must have taken in: a confirmed request counts once a later
// one was confirmed that was sent at least d after the earlier one's
// answer came. Until one counts, the deadline counts from base, the send
// time of a request the service is known to have taken in, or, if base is
// zero, from none: Settled is closed only once a confirmation counts, and
// the first renewal is sent d after the answer Start was given, instead of
// RenewEvery after its send. No renewal is sent sooner than d after the
// last confirmation's answer, so that each settles the one before. A base
// must be no older than RenewEvery before the request Start is given: the
// first renewal comes RenewEvery after that request.
//
// It is for a service that answers a request before the part of it that
// expires the lease has heard of it. A ZooKeeper follower answers a sync
// once the leader has, but the leader resets the session's expiry only
// when the follower answers its next ping, up to half a tick later: a
// link between them that breaks in that time leaves the leader counting
// from the client's request before. A later sync that the leader answered,
// sent more than half a tick after the earlier one's answer, proves the
// follower's ping answer with the earlier request went first.
//
// The price is a deadline one renewal shorter: with RenewEvery TTL/3, a
// renewal has TTL/3 - drift to be confirmed, not 2TTL/3 - drift.
func Settle(d time.Duration, base time.Time) Option {
	return func(o *options) {
		o.settle = d
		o.base = base
	}
}

// Start begins renewing a lease created or last renewed by a request sent at
// sent, on a Scheduler of its own. cfg gives TTL, RenewEvery, Drift and
// Logger. A backend that starts a Keeper per hold shares one Scheduler
// among them instead (Scheduler.Start).
func Start(sent time.Time, cfg baton.Config, renew RenewFunc, opts ...Option) *Keeper {
	return NewScheduler().Start(sent, cfg, renew, opts...)
}

// Start begins renewing a lease created or last renewed by a request sent
// at sent, on s. cfg gives TTL, RenewEvery, Drift and Logger. With Settle,
// the request's answer is taken to have come at the call.
func (s *Scheduler) Start(sent time.Time, cfg baton.Config, renew RenewFunc, opts ...Option) *Keeper {
	o := options{base: sent}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Keeper{
		sched: s,
		ttl:   cfg.TTL, every: cfg.RenewEvery, drift: cfg.Drift,
		settle:  o.settle,
		onLoss:  o.onLoss,
		renew:   renew,
		log:     cfg.Logger,
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		settled: make(chan struct{}),
		next:    sent.Add(cfg.RenewEvery),
		last:    confirmation{sent: sent},
	}
	if k.settle > 0 {
		k.last.answered = time.Now()
	}
	if o.base.IsZero() {
		// Settle with no base: lost unless a confirmation counts before
		// sent's own deadline, since none after can count from earlier;
		// the first renewal as soon as it can settle sent.
		k.deadline = sent.Add(k.ttl - k.drift)
		k.next = k.last.answered.Add(k.settle)
	} else {
		k.deadline = o.base.Add(k.ttl - k.drift)
		k.known = true
		close(k.settled)
		k.notBeforeSettling()
	}
	if !time.Now().Before(k.deadline) {
		// Answered at or after the local deadline (a pause between the
		// backend's look and this call): lost from the start, not a tick
		// later, on another goroutine.
		k.lose(nil)
		return k
	}
	k.mu.Lock()
	k.arm()
	k.mu.Unlock()
	return k
}

// arm schedules the next tick, at the renewal or the deadline, whichever is
// first. The caller holds mu and has checked the Keeper is not finished.
func (k *Keeper) arm() {
	at := k.next
	if k.deadline.Before(at) {
		at = k.deadline
	}
	k.ticks.Add(1)
	k.pending = k.sched.after(at, k.tick)
}

// Done is closed when the lease is lost or the Keeper stopped.
func (k *Keeper) Done() <-chan struct{} { return k.done }

// Settled is closed once the deadline counts from a request the service
// is known to have taken in: at once, unless Settle was given no base.
// Until then, Deadline is only the latest moment the lease can last.
func (k *Keeper) Settled() <-chan struct{} { return k.settled }

// Context returns a context cancelled when Done is closed, for requests
// that are only worth finishing while the lease lives.
func (k *Keeper) Context() context.Context { return k.ctx }

// Err says why Done was closed: a cause matching baton.ErrLeaseLost, or the
// cause given to Stop. It is nil before.
func (k *Keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Deadline returns the current local deadline.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// LastRenewal returns the send time of the last confirmed renewal (or of the
// request that created the lease), whether or not it counts yet (Settle).
func (k *Keeper) LastRenewal() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last.sent
}

// Lose marks the lease lost with cause (wrapped to match
// baton.ErrLeaseLost) and stops renewing. Backends call it when they learn
// of a loss some other way: a deleted key, an expired session. It must not
// be called from the RenewFunc.
func (k *Keeper) Lose(cause error) {
	if !errors.Is(cause, baton.ErrLeaseLost) {
		cause = fmt.Errorf("%w: %w", baton.ErrLeaseLost, cause)
	}
	ended := k.finish(cause)
	k.wait() // a call of tick that looked before the loss may still renew
	if ended && k.onLoss != nil {
		k.onLoss()
	}
}

// Stop ends renewal, waits for a renewal in flight and, unless the lease was
// already lost, closes Done with cause. It is idempotent.
func (k *Keeper) Stop(cause error) {
	k.finish(cause)
	k.wait()
}

// wait cancels the pending call and waits for calls and renewals in
// flight; the Keeper is finished, so nothing schedules another.
func (k *Keeper) wait() {
	k.mu.Lock()
	t := k.pending
	k.mu.Unlock()
	if t != nil && k.sched.cancel(t) {
		k.ticks.Done() // it will never run
	}
	k.ticks.Wait()
	k.renewals.Wait()
}

// errStopped is the cause of a Stop given none: Err reports it, so that
// Done and Err agree.
var errStopped = errors.New("renewal stopped")

// finish ends the Keeper with cause, unless it ended already; it reports
// whether this call ended it.
func (k *Keeper) finish(cause error) bool {
	if cause == nil {
		cause = errStopped
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return false
	}
	k.err = cause
	close(k.done)
	k.cancel()
	return true
}

// lost ends the Keeper with a loss, cause, unless it ended already, and
// then calls OnLoss's function. It is called from the Scheduler's call of
// tick (the only one) or from Start, where only renewals can be in flight.
func (k *Keeper) lost(cause error) {
	if k.finish(cause) && k.onLoss != nil {
		k.renewals.Wait()
		k.onLoss()
	}
}

// tick is called by the Scheduler: it reports a passed deadline, or
// renews, then schedules the next tick.
func (k *Keeper) tick() {
	defer k.ticks.Done()
	k.mu.Lock()
	if k.err != nil {
		k.mu.Unlock()
		return
	}
	deadline, next, lastErr := k.deadline, k.next, k.lastErr
	k.mu.Unlock()

	now := time.Now()
	if !now.Before(deadline) {
		k.lose(lastErr)
		return
	}
	if now.Before(next) { // woke early (the clock stepped): wait again
		k.rearm()
		return
	}
	sent := time.Now()
	answered, ok, err := k.renewOnce(deadline)
	if !ok {
		if k.ctx.Err() == nil { // the deadline passed first
			k.lose(lastErr)
		}
		return
	}
	if k.ctx.Err() != nil {
		return // stopped or lost meanwhile
	}
	switch {
	case err == nil:
		k.mu.Lock()
		base := k.counted(sent)
		nd := base.Add(k.ttl - k.drift)
		if !time.Now().Before(nd) {
			k.mu.Unlock()
			k.lose(fmt.Errorf("renewal sent at %s was confirmed only after the deadline it gives", sent.Format(time.StampMilli)))
			return
		}
		if k.err == nil { // a loss or stop since the look above leaves the deadline as it was
			first := !k.known
			k.known, k.deadline, k.lastErr = true, nd, nil
			k.last = confirmation{sent, answered}
			// RenewEvery after this one, but no later than two after
			// the base: a renewal that came late, after failures, leaves
			// the next as long as in steady state. And no sooner than it
			// can settle this one.
			k.next = sent.Add(k.every)
			if late := base.Add(2 * k.every); late.Before(k.next) {
				k.next = late
			}
			k.notBeforeSettling()
			if first {
				close(k.settled)
			}
		}
		k.mu.Unlock()
	case errors.Is(err, baton.ErrLeaseLost):
		k.lost(err)
		return
	default:
		k.mu.Lock()
		k.lastErr = err
		k.next = time.Now().Add(min(max(k.every/8, 10*time.Millisecond), time.Second))
		k.notBeforeSettling()
		k.mu.Unlock()
		// The next tick, which declares the loss at the deadline, is
		// armed before the log line, which a handler writing to a
		// stalled pipe may hold up for good.
		k.rearm()
		k.log.Warn("lease renewal failed; retrying until the local deadline", "err", err, "deadline_in", time.Until(deadline).Round(time.Millisecond))
		return
	}
	k.rearm()
}

// counted returns what the deadline counts from once the renewal sent at
// sent is confirmed: its send time, or with Settle the send time of the
// confirmation before it, which this one settles: notBeforeSettling did
// not send it sooner than the settling time after that one's answer.
func (k *Keeper) counted(sent time.Time) time.Time {
	if k.settle == 0 {
		return sent
	}
	return k.last.sent
}

// notBeforeSettling puts the next renewal off until it can settle the last
// confirmation (Settle): one sent sooner would not move the deadline, and
// with RenewEvery TTL/3, one sent after a slow answer would leave the
// deadline two renewals behind, which a TTL holds no more. The caller
// holds mu.
func (k *Keeper) notBeforeSettling() {
	if k.settle > 0 {
		if soonest := k.last.answered.Add(k.settle); k.next.Before(soonest) {
			k.next = soonest
		}
	}
}

// rearm schedules the next tick unless the Keeper finished meanwhile.
func (k *Keeper) rearm() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		k.arm()
	}
}

// renewOnce runs one renewal with ctx ending at deadline. It returns when
// its answer came, true, and the renewal's error, or false when the
// deadline passed or the Keeper stopped first: a RenewFunc whose client
// ignores its context cannot hold the loss past the deadline. The renewal's
// goroutine notes when the answer came, and only an answer that came
// strictly before the deadline counts: one that came at or after it is too
// late, even when this goroutine, slow to wake, finds it waiting together
// with the deadline. An error returned once ctx has ended counts as the
// deadline's too, not as the renewal's verdict: the request was cut off, so
// a RenewFunc need not tell the two apart. The renewal's goroutine is
// awaited by Stop.
func (k *Keeper) renewOnce(deadline time.Time) (answered time.Time, ok bool, err error) {
	rctx, cancel := context.WithDeadline(k.ctx, deadline)
	defer cancel()
	type answer struct {
		err error
		at  time.Time // when the answer came
		cut bool      // rctx had ended by then
	}
	res := make(chan answer, 1)
	k.renewals.Add(1)
	go func() {
		defer k.renewals.Done()
		err := k.renew(rctx)
		res <- answer{err: err, at: time.Now(), cut: rctx.Err() != nil}
	}()
	var a answer
	select {
	case a = <-res:
	case <-rctx.Done():
		select {
		case a = <-res: // it came meanwhile; when it came decides below
		default:
			return time.Time{}, false, nil
		}
	}
	if !a.at.Before(deadline) || (a.err != nil && a.cut) {
		return time.Time{}, false, nil // too late, or cut off by the deadline or a stop
	}
	return a.at, true, a.err
}

func (k *Keeper) lose(lastErr error) {
	last := k.LastRenewal().Format(time.StampMilli)
	if lastErr != nil {
		k.lost(fmt.Errorf("%w: %w (last renewal sent at %s; last error: %w)", baton.ErrLeaseLost, ErrDeadline, last, lastErr))
		return
	}
	k.lost(fmt.Errorf("%w: %w (last renewal sent at %s)", baton.ErrLeaseLost, ErrDeadline, last))
}
