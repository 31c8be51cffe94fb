package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/rediskit"
)

// nodeResult is what one node answered to one attempt.
type nodeResult struct {
	held   bool
	holder string        // the holder's value there, or the reserved waiter's
	pttl   time.Duration // the key's remaining TTL there
	head   bool          // we are first in that node's queue
}

// round is what one attempt on every node found.
type round struct {
	res    []nodeResult
	errs   []error
	held   int
	failed int
	heads  int
	pttl   time.Duration // the longest remaining TTL among nodes not ours

	// settled is closed when every node's request has returned: after a
	// majority answered, the rest may still set our value.
	settled <-chan struct{}
}

// splitRetries is how many more times a single attempt (TryAcquire) tries
// when the votes split between racers, so that no one has a majority and
// no one holds the lock.
const splitRetries = 5

// attempt runs the acquire script on every node in parallel.
func (b *backend) attempt(ctx context.Context, k keys, value string, wait bool, score int64) round {
	w := "0"
	if wait {
		w = "1"
	}
	var r round
	r.res, r.errs, r.settled = eachSettled(ctx, b, b.nodeTimeout, func(ctx context.Context, n *node) (nodeResult, error) {
		var nr nodeResult
		res, err := acquireScript.Run(ctx, n.client, k.all(), value, b.ttlMS(), w, score, b.channel).Slice()
		if err != nil {
			return nr, n.err("acquire "+k.lock, err)
		}
		if len(res) == 0 {
			return nr, n.err("acquire "+k.lock, fmt.Errorf("empty reply"))
		}
		if v, _ := res[0].(int64); v == 1 {
			nr.held = true
			return nr, nil
		}
		if len(res) < 4 {
			return nr, n.err("acquire "+k.lock, fmt.Errorf("unexpected reply %v", res))
		}
		nr.holder, _ = res[1].(string)
		pttl, _ := res[2].(int64)
		nr.pttl = time.Duration(pttl) * time.Millisecond
		head, _ := res[3].(int64)
		nr.head = head == 1
		return nr, nil
	}, func(res []nodeResult, errs []error) bool {
		held := 0
		for i, nr := range res {
			if errs[i] == nil && nr.held {
				held++
			}
		}
		return held >= b.quorum // enough: no need to wait for a slow node
	})
	for i, err := range r.errs {
		switch {
		case err == errPending:
		case err != nil:
			r.failed++
		case r.res[i].held:
			r.held++
		default:
			if r.res[i].head {
				r.heads++
			}
			r.pttl = max(r.pttl, r.res[i].pttl)
		}
	}
	return r
}

// majorityHolder returns the value another acquisition holds on a
// majority of the nodes, if any.
func (b *backend) majorityHolder(r round) (string, bool) {
	count := map[string]int{}
	for i, res := range r.res {
		if r.errs[i] == nil && !res.held && res.holder != "" {
			count[res.holder]++
		}
	}
	best, n := "", 0
	for v, c := range count {
		if c > n {
			best, n = v, c
		}
	}
	return best, n >= b.quorum
}

// Acquire implements baton.Backend with Redlock: the lock is held when it
// was set on a majority of the nodes, within its validity (TTL - the time
// the attempt took - drift). A failed attempt is undone on every node, also
// those that did not answer. A waiting acquisition joins each node's queue
// and is woken by the first node that frees the lock for it, or by a timed
// retry (see retryIn).
func (b *backend) Acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	k := b.keys(req.Name)
	value := rediskit.NewValue(req.Holder)
	score := time.Now().UnixMicro() // our place in every node's queue

	wake := make(chan struct{}, 1)
	queued := false
	defer func() {
		if queued {
			for _, n := range b.nodes {
				n.wake.Unregister(value)
			}
		}
	}()
	if req.Wait && b.subscribed() {
		// Every node's subscription is up: even the first attempt may
		// join the queues, as no handoff can be missed.
		for _, n := range b.nodes {
			n.wake.Register(value, wake)
		}
		queued = true
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	splits := 0
	for {
		start := time.Now()
		r := b.attempt(ctx, k, value, queued, score)
		if r.held >= b.quorum {
			if h, err := b.held(ctx, k, value, start, r.settled); err == nil || !errors.Is(err, errTooLate) {
				return h, err
			}
			// Too late to be of use: undone by held; try again.
		} else if r.held > 0 {
			// A minority is no lock: undo it, keeping our place in the
			// queues, and without waking anyone (the lock is reserved for
			// the first waiter, possibly us).
			_ = b.unlock(ctx, k, value, false, false, b.nodeTimeout)
		}
		if ctx.Err() != nil {
			b.giveUp(ctx, k, value, queued)
			return nil, context.Cause(ctx)
		}
		if r.failed > len(b.nodes)-b.quorum {
			b.giveUp(ctx, k, value, queued)
			return nil, b.unavailable(ctx, "acquire "+k.lock, r.errs)
		}
		holder, majority := b.majorityHolder(r)
		if !req.Wait {
			if !majority && r.failed == 0 && splits < splitRetries {
				// Racers split the vote and all undo theirs; look again
				// after a random pause, as Redlock prescribes.
				splits++
				if err := sleep(ctx, time.Millisecond+rand.N(5*time.Millisecond)); err != nil {
					return nil, err
				}
				continue
			}
			return nil, &baton.NotAcquiredError{Name: req.Name, Holder: rediskit.HolderOf(holder)}
		}
		if !queued {
			// Subscribe on every node that answers before joining the
			// queues, so that no wake-up is published before we listen.
			b.subscribe(ctx)
			for _, n := range b.nodes {
				n.wake.Register(value, wake)
			}
			queued = true
			continue
		}
		timer.Reset(b.retryIn(r, majority))
		select {
		case <-ctx.Done():
			b.giveUp(ctx, k, value, true)
			return nil, context.Cause(ctx)
		case <-wake:
		case <-timer.C:
		}
	}
}

// retryIn is how long a queued waiter sleeps before its next attempt when
// no node wakes it first: at most RenewEvery, which keeps its queue
// entries alive; just past the holder's remaining TTL when we are first
// in line on a majority (a crashed holder is taken over right after its
// keys expire); and a short random delay when no one holds a majority
// (the Redlock retry after a failed round).
func (b *backend) retryIn(r round, majority bool) time.Duration {
	d := b.cfg.RenewEvery
	switch {
	case r.heads >= b.quorum && r.pttl > 0:
		d = min(d, r.pttl+time.Millisecond+rand.N(r.pttl/20+1))
	case r.heads >= b.quorum || !majority:
		d = min(d, time.Millisecond+rand.N(b.nodeTimeout+1))
	}
	return max(d, time.Millisecond)
}

// subscribed reports whether every node's subscription is up.
func (b *backend) subscribed() bool {
	for _, n := range b.nodes {
		if !n.wake.Ready() {
			return false
		}
	}
	return true
}

// subscribe starts each node's subscription, in parallel; a node that does
// not answer cannot wake us, and the timed retry covers it.
func (b *backend) subscribe(ctx context.Context) {
	each(ctx, b, b.nodeTimeout, func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, n.wake.Start(ctx)
	}, nil)
}

// giveUp leaves the queues and undoes whatever this acquisition set.
func (b *backend) giveUp(ctx context.Context, k keys, value string, queued bool) {
	if !queued {
		return // a failed attempt was undone already
	}
	if err := b.unlock(ctx, k, value, true, true, b.releaseTimeout()); err != nil {
		b.cfg.Logger.Warn("could not undo an acquisition on a majority; its keys end after one TTL", "key", k.lock, "err", err)
	}
}

var errTooLate = errors.New("acquired after the lease's validity ended")

// held makes the hold for value, set on a majority by an attempt started
// at start, unless its validity (TTL - elapsed - drift) already ran out or
// the backend closed.
func (b *backend) held(ctx context.Context, k keys, value string, start time.Time, settled <-chan struct{}) (baton.Hold, error) {
	if !time.Now().Before(start.Add(b.cfg.TTL - b.cfg.Drift)) {
		<-settled
		_ = b.unlock(ctx, k, value, false, false, b.nodeTimeout)
		return nil, errTooLate
	}
	h := newHold(b, k, value, start, settled)
	if !b.track(h) {
		_ = h.end(ctx, baton.ErrClosed)
		return nil, baton.ErrClosed
	}
	return h, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
