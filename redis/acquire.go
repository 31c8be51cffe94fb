package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/rediskit"
)

// attempt is what one run of the acquire script found.
type attempt struct {
	held   bool
	holder string        // the holder's value, or the reserved waiter's
	pttl   time.Duration // the key's remaining TTL; negative when free or without expiry
	head   bool          // we are first in the wait queue

	// yielded: a claim took the key, but a live waiter was first (see
	// claim).
	yielded bool
}

// try runs the acquire script once, as the attempt numbered num. With
// wait it joins (or refreshes its place in) the wait queue when the lock
// is not free, and a handoff after it names num.
func (b *backend) try(ctx context.Context, k keys, value string, wait bool, num string) (attempt, error) {
	w := "0"
	if wait {
		w = "1"
	}
	return b.runAcquire(ctx, k, value, w, "0", num)
}

// claim is the first attempt of an acquisition that has not joined the
// queue: rediskit.Claim, marked by the queue and the observers' mark, with
// GET for an attempt that will not wait (holder). When the SET took the
// free key and neither mark was there, the lock is ours. When a mark was
// there, the acquire script finishes the claim: when the first live waiter
// (there only when the last holder's key expired: a handoff never leaves
// the key free) was there first, the script says so and the release
// script hands it the lock (leave); else we keep it and observers are
// told. The acquire script itself hands nothing on: go-redis sends a
// request again after a read timeout, while the first copy may still be
// on its way, and a late copy that handed on a key we hold by then would
// break mutual exclusion (TestClaim_ResentScriptHandsNothingLate). A
// waiting acquisition sends no GET: its next attempt finds a key a
// re-sent pipeline took its own (cur == v).
func (b *backend) claim(ctx context.Context, k keys, value string, holder bool) (attempt, error) {
	octx, cancel := b.op(ctx)
	c, err := rediskit.Claim(octx, b.client, k.lock, value, b.ttlMS(), holder, k.q, k.n)
	cancel()
	switch {
	case err != nil:
		switch {
		case c.Ours: // nobody would free it before its TTL runs out
			b.leave(ctx, k, value)
		case rediskit.MayHaveRun(err):
			// No answer: the SET may have run all the same. Undo it
			// without holding the caller up, whose deadline may be what
			// cut the answer off, and on a server that does not answer
			// the undo waits its timeout.
			b.undos.Go(func() { b.leave(ctx, k, value) })
		}
		return attempt{}, b.fail(ctx, "take lock key "+k.lock, err, k.all()...)
	case !c.Ours:
		return attempt{holder: c.Holder}, nil
	case !c.Marked:
		return attempt{held: true}, nil
	}
	a, err := b.runAcquire(ctx, k, value, "0", "1", "0") // queues nothing: no number
	if err != nil || a.yielded {
		b.leave(ctx, k, value)
	}
	return a, err
}

// runAcquire runs acquireScript with ARGV[3] wait and ARGV[5] claimed, as
// the attempt numbered num.
func (b *backend) runAcquire(ctx context.Context, k keys, value, wait, claimed, num string) (attempt, error) {
	octx, cancel := b.op(ctx)
	defer cancel()
	res, err := acquireScript.Run(octx, b.client, k.all(), value, b.ttlMS(), wait, rediskit.Tell(num, b.wake.Channel()), claimed).Slice()
	var r rediskit.Reply
	if err == nil {
		r, err = rediskit.ParseReply(res)
	}
	if err != nil {
		return attempt{}, b.fail(ctx, "take lock key "+k.lock, err, k.all()...)
	}
	return attempt{held: r.Held, holder: r.Holder, pttl: r.PTTL, head: r.Head, yielded: r.Yielded}, nil
}

// Acquire implements baton.Backend.
//
// The first attempt, unless the acquisition queues at once, is a claim: a
// plain SET key value NX PX ttl pipelined with an EXISTS, one round trip
// without a script (see claim). Every other attempt is one run of the acquire
// script: the same SET, unless a live waiter was there first (then the
// lock is reserved for it). A waiting
// acquisition joins the lock's FIFO queue and sleeps until the holder's
// release hands the lock to it (the release script sets the key to the
// waiter's value and publishes on the waiter's Locker channel), or until a
// timed retry: just after the key's remaining TTL when first in line (a
// crashed holder is taken over right after its key expires), and every
// RenewEvery regardless, which keeps the waiter's place alive.
func (b *backend) Acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	k := b.keys(req.Name)
	value := rediskit.NewValue(req.Holder)

	// With the Locker's subscription up, even the first attempt may join
	// the queue: a handoff cannot be missed.
	wake := make(chan string, 1) // the handoffs' tags: the number of our attempt they came after
	queued := false
	if req.Wait && b.wake.Ready() {
		b.wake.Register(value, wake)
		defer b.wake.Unregister(value)
		queued = true
	}
	var (
		lastQueued time.Time // send time of the last attempt that found us queued
		attempts   uint64    // our attempts so far: each numbered with the count (see rediskit.Tell), the claim too, though it queues nothing
		lastNum    string    // the number of the last attempt that found us queued, which a handoff after it names
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for first := true; ; first = false {
		// A wake-up that came before this attempt is answered by it: the
		// attempt, sent after the handoff, finds the key ours.
		select {
		case <-wake:
		default:
		}
		sent := time.Now()
		var a attempt
		var err error
		attempts++
		num := strconv.FormatUint(attempts, 10)
		if first && !queued {
			a, err = b.claim(ctx, k, value, !req.Wait)
		} else {
			a, err = b.try(ctx, k, value, queued, num)
		}
		if err != nil {
			if queued {
				b.leave(ctx, k, value)
			}
			return nil, err
		}
		if a.held {
			h, late, err := b.held(ctx, k, value, sent)
			if late {
				b.leave(ctx, k, value)
				return nil, b.fail(ctx, "take lock key "+k.lock, fmt.Errorf("the answer came %v after the request, past the lease's local deadline (TTL %v - drift %v)", time.Since(sent).Round(time.Millisecond), b.cfg.TTL, b.cfg.Drift))
			}
			return h, err
		}
		if !req.Wait {
			return nil, &baton.NotAcquiredError{Name: req.Name, Holder: rediskit.HolderOf(a.holder)}
		}
		if !queued {
			if a.yielded {
				// The claim handed the key on with a release of our
				// value, which a copy arriving late (see claim) would
				// do again once the lock came back to us: the wait goes
				// on with a new value, which that copy cannot touch.
				value = rediskit.NewValue(req.Holder)
			}
			// Subscribe before joining the queue, so that the handoff
			// message cannot be published before anyone listens.
			octx, cancel := b.op(ctx)
			err := b.wake.Start(octx)
			cancel()
			if err != nil {
				return nil, b.fail(ctx, "subscribe to "+b.wake.Channel(), err)
			}
			b.wake.Register(value, wake)
			defer b.wake.Unregister(value)
			queued = true
			continue
		}
		lastQueued, lastNum = sent, num
		timer.Reset(b.retryIn(a))
		select {
		case <-ctx.Done():
			b.leave(ctx, k, value)
			return nil, context.Cause(ctx)
		case tag := <-wake:
			// A handoff tagged with the number of our last attempt came
			// after it: the release script set the key to our value,
			// to expire no sooner than that attempt's run plus our TTL,
			// after it ran that attempt, which we sent at lastQueued.
			// Any other wake-up (one that came after an earlier attempt
			// and was held up on its way, or one from a version without
			// numbers), or one so late that a renewal counted from
			// lastQueued would be due already (the lease would come
			// with less time for it than any renewed lease has, or past
			// its deadline), is checked by an attempt at once: the key
			// is ours, for a whole TTL, if the handoff still stands.
			// So is one that held finds late, a moment after this check:
			// this goroutine was held up past TTL - drift - RenewEvery
			// in between. The key, handed to value, stays ours for that
			// attempt (held does not release it); should it have run out
			// meanwhile, the attempt takes it if free, or queues again
			// (the handoff took us out of the queue).
			if tag == lastNum && time.Now().Before(lastQueued.Add(b.cfg.RenewEvery)) {
				if b.beforeHandoffHeld != nil {
					b.beforeHandoffHeld(lastQueued.Add(b.cfg.TTL - b.cfg.Drift))
				}
				if h, late, err := b.held(ctx, k, value, lastQueued); !late {
					return h, err
				}
			}
		case <-timer.C:
		}
	}
}

// retryIn is how long a queued waiter sleeps before its next attempt, when
// no handoff wakes it first: at most RenewEvery, which keeps its entry in
// the queue alive and bounds how stale lastQueued can be; and, when it is
// first in line, just past the key's remaining TTL, with a little jitter
// (see rediskit.PastExpiry), so a crashed holder is taken over right after
// its key expires.
func (b *backend) retryIn(a attempt) time.Duration {
	d := b.cfg.RenewEvery
	if a.head && a.pttl >= 0 { // 0: the key expires within the millisecond
		d = min(d, rediskit.PastExpiry(a.pttl))
	}
	return max(d, time.Millisecond)
}

// leave releases value: it takes a waiter out of the queue when it gives
// up, and frees the lock if it holds value (handed to it meanwhile, or a
// claim that yields), passing it on to the next waiter.
func (b *backend) leave(ctx context.Context, k keys, value string) {
	ctx, cancel := b.cleanup(ctx)
	defer cancel()
	if _, err := b.release(ctx, k, value); err != nil {
		b.cfg.Logger.Warn("could not release our value; the key or queue entry it holds ends after one TTL", "key", k.lock, "err", err)
	}
}

// held makes the hold for value, whose key was set by a request sent at
// sent, unless its local deadline already passed (late: no hold, no
// error, and the key left as it is, for the caller to release or take
// again with an attempt) or the backend closed.
func (b *backend) held(ctx context.Context, k keys, value string, sent time.Time) (_ baton.Hold, late bool, _ error) {
	if !time.Now().Before(sent.Add(b.cfg.TTL - b.cfg.Drift)) {
		return nil, true, nil
	}
	h := newHold(b, k, value, sent)
	if !b.track(h) {
		ctx, cancel := b.cleanup(ctx)
		defer cancel()
		_ = h.end(ctx, baton.ErrClosed)
		return nil, false, baton.ErrClosed
	}
	return h, false, nil
}
