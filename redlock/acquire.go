package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
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

	// yielded: a claim took the key there, but a live waiter was first
	// (see claim). The key holds our value; the attempt does not count
	// it, and undoes it unless the other nodes make a majority (then it is
	// the hold's, and its renewals count it).
	yielded bool
}

// round is what one attempt on every node found.
type round struct {
	res     []nodeResult
	errs    []error
	held    int
	yielded int
	failed  int
	unsure  int // failed nodes whose request may have run (see rediskit.MayHaveRun)
	heads   int
	pttl    time.Duration // the longest remaining TTL among nodes not ours

	// settled is closed when every node's request has returned, or the
	// node timeout has passed (see eachSettled): after a majority
	// answered, the rest may still set our value.
	settled <-chan struct{}
}

// splitRetries is how many more times a single attempt (TryAcquire) tries
// when the votes split between racers, so that no one has a majority and
// no one holds the lock.
const splitRetries = 5

// attempt runs the acquire script on every node in parallel, as the
// acquisition's round numbered num (a handoff after it names num); with
// claim, a claim on every node instead (see claim). olds are the values
// the acquisition gave up (see acquireScript's ARGV[7] and on).
func (b *backend) attempt(ctx context.Context, k keys, value string, olds []string, wait, claim bool, score int64, num string) round {
	tell := rediskit.Tell(num, b.channel)
	w := "0"
	if wait {
		w = "1"
	}
	var r round
	r.res, r.errs, r.settled = eachSettled(ctx, b, b.nodeTimeout, func(ctx context.Context, n *node) (nodeResult, error) {
		if claim {
			return b.claim(ctx, n, k, value, score)
		}
		return b.runAcquire(ctx, n, k, value, olds, w, score, "0", tell)
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
			if rediskit.MayHaveRun(err) {
				r.unsure++
			}
		case r.res[i].held:
			r.held++
		case r.res[i].yielded:
			r.yielded++
		default:
			if r.res[i].head {
				r.heads++
			}
			r.pttl = max(r.pttl, r.res[i].pttl)
		}
	}
	return r
}

// claim is the first attempt of an acquisition that has not queued, on
// node n, without a script, as redsync takes the lock: rediskit.Claim,
// marked by the queue, with GET to name the holder. Only when the SET took
// K and a queue is there does the acquire script follow: K was free but
// maybe reserved for the first live waiter (a holder's key that expired,
// or was deleted by a forced release or an undo). Then the script reports
// the key yielded, but leaves it:
// the caller undoes the attempt unless it holds a majority without that
// node. A script that deleted the key itself could be delivered late, as
// any request can (see Acquire), and delete it after a renewal counted
// it.
func (b *backend) claim(ctx context.Context, n *node, k keys, value string, score int64) (nodeResult, error) {
	c, err := rediskit.Claim(ctx, n.client, k.lock, value, b.ttlMS(), true, k.q)
	switch {
	case err != nil:
		return nodeResult{}, n.err("take lock key "+k.lock, err)
	case !c.Ours:
		return nodeResult{holder: c.Holder}, nil
	case !c.Marked:
		return nodeResult{held: true}, nil
	}
	return b.runAcquire(ctx, n, k, value, nil, "0", score, "1", rediskit.Tell("0", b.channel)) // queues nothing: no number
}

// runAcquire runs acquireScript on node n with ARGV[3] wait, ARGV[5]
// tell (see rediskit.Tell), ARGV[6] claimed and, from ARGV[7] on, olds.
func (b *backend) runAcquire(ctx context.Context, n *node, k keys, value string, olds []string, wait string, score int64, claimed, tell string) (nodeResult, error) {
	args := append([]any{value, b.ttlMS(), wait, score, tell, claimed}, rediskit.Args(olds)...)
	res, err := acquireScript.Run(ctx, n.client, k.all(), args...).Slice()
	var r rediskit.Reply
	if err == nil {
		r, err = rediskit.ParseReply(res)
	}
	if err != nil {
		return nodeResult{}, n.err("take lock key "+k.lock, err)
	}
	return nodeResult{held: r.Held, holder: r.Holder, pttl: r.PTTL, head: r.Head, yielded: r.Yielded}, nil
}

// majorityHolder returns the value another acquisition holds on a
// majority of the nodes, if any. A free key reserved for us (value, first
// in line there) is not another's.
func (b *backend) majorityHolder(r round, value string) (string, bool) {
	var others []string
	for i, res := range r.res {
		if r.errs[i] == nil && !res.held && res.holder != value {
			others = append(others, res.holder)
		}
	}
	best, n := mostCommon(others)
	return best, n >= b.quorum
}

// mostCommon returns the value that occurs most often in vs, empty ones
// aside, and how often (ties go to the smaller value); "", 0 when none.
func mostCommon(vs []string) (string, int) {
	count := map[string]int{}
	for _, v := range vs {
		if v != "" {
			count[v]++
		}
	}
	best, n := "", 0
	for v, c := range count {
		if c > n || (c == n && v < best) {
			best, n = v, c
		}
	}
	return best, n
}

// Acquire implements baton.Backend with Redlock: the lock is held when it
// was set on a majority of the nodes, within its validity (TTL - the time
// the attempt took - drift). An attempt that set the key on some nodes but
// not a majority, or that some nodes did not answer (where it may have run
// all the same), is undone on every node, and the acquisition goes on
// with a new value. The first attempt of an
// acquisition that has not queued is a claim on every node (see claim);
// later ones run the acquire script. A waiting acquisition joins each
// node's queue and is woken by the first node that frees the lock for it,
// or by a timed retry (see retryIn). A round that no majority answers
// ends a TryAcquire as unavailable; a waiting acquisition tries again
// while a node in it did not answer in time, for a request timeout.
func (b *backend) Acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	k := b.keys(req.Name)
	value := rediskit.NewValue(req.Holder)
	score := time.Now().UnixMicro() // our place in every node's queue, alike on all: by our clock (see "What is not" in the package documentation)

	hand := newHandoffs(len(b.nodes), value)
	queued := false
	var olds []string // values given up that a node may still know (see retire below)
	defer func() {
		if queued {
			for _, n := range b.nodes {
				for _, v := range slices.Concat(olds, []string{value}) {
					n.wake.Unregister(v)
				}
			}
		}
	}()
	if req.Wait && b.subscribed() {
		// Every node's subscription is up: even the first attempt may
		// join the queues, as no handoff can be missed.
		hand.listen(b, value)
		queued = true
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var failingSince time.Time // the start of the first of the rounds in a row that no majority answered
	splits := 0                // TryAcquire's rounds lost to a split vote
	headSplits := 0            // consecutive rounds first in line with no majority holder
	retire := false            // value's keys were undone: go on with a new value
	var rounds uint64          // the rounds so far: each is numbered with the count, which a handoff after it names
	for first := true; ; first = false {
		if retire {
			// An undo that a node did not answer in time, or answered
			// after an earlier copy of it went astray (go-redis sends a
			// request again after a read timeout), may still reach that
			// node later, on a connection the client gave up, and delete
			// a key that a later attempt took there again. So every undo
			// ends the value it undid: the acquisition goes on with a new
			// one, and a late request for an old value touches nothing
			// of the new one's. Every later attempt hands the old values'
			// places in the queues to the new one, and makes a key an old
			// one still holds ours (acquireScript's ARGV[7] and on): a
			// late attempt may queue an old value again. The old values
			// stay registered, so that their wake-ups wake us. At most
			// maxOlds are kept, the latest.
			olds = append(olds, value)
			if len(olds) > maxOlds {
				for _, n := range b.nodes {
					n.wake.Unregister(olds[0])
				}
				olds = slices.Delete(olds, 0, 1)
			}
			value = rediskit.NewValue(req.Holder)
			if queued {
				hand.listen(b, value)
			}
			retire = false
		}
		rounds++
		num := strconv.FormatUint(rounds, 10)
		hand.round(value, num)
		start := time.Now()
		r := b.attempt(ctx, k, value, olds, queued, first && !queued, score, num)
		if queued {
			b.noteRound(time.Since(start))
		}
		if r.held >= b.quorum {
			if h, late, err := b.held(ctx, k, value, olds, start, r.settled); !late {
				return h, err
			}
			// Too late to be of use: undone below; try again.
		}
		if r.held+r.yielded+r.unsure > 0 {
			// Too late, or a minority, which is no lock (with a key a
			// claim yielded, or on nodes that did not answer, where our
			// request may have run all the same): undo it. First in line on a majority (where
			// we took K as first in line the script took us out of the
			// queue; our next attempt puts us back at our score), we try
			// again after a split vote's pause and hand our keys to no
			// one, who would only take our turn, unless another waiter
			// is first there (see unlockScript). Otherwise (or too late)
			// we are a racer that split the vote: hand each key we hold
			// to the first waiter on its node, which may be sleeping
			// until our keys would have expired, having seen them held
			// when it tried.
			<-r.settled
			notify := r.held >= b.quorum || r.held+r.heads < b.quorum
			if _, err := b.unlock(ctx, k, false, notify, b.nodeTimeout, slices.Concat(olds, []string{value})...); err != nil {
				// Warned where the attempt is known to have set keys; a
				// round that only may have (nodes that did not answer,
				// as every round does while a majority is down) says so
				// at debug level.
				level := slog.LevelDebug
				if r.held+r.yielded > 0 {
					level = slog.LevelWarn
				}
				b.cfg.Logger.Log(ctx, level, "could not undo an attempt on a majority; its keys end after one TTL", "key", k.lock, "err", err)
			}
			retire = true
		}
		if ctx.Err() != nil {
			b.giveUp(ctx, k, value, olds, queued, r.settled)
			return nil, context.Cause(ctx)
		}
		if r.failed > len(b.nodes)-b.quorum {
			// No majority answered. Where a node did not answer in time
			// it may only be slow (a stall of its machine, or of the
			// network): a waiting acquisition tries again after a
			// random delay, as Redlock prescribes, until a request
			// timeout has passed since the first round that found no
			// majority. Nodes that refuse the connection are down.
			if failingSince.IsZero() {
				failingSince = start
			}
			if !req.Wait || !slowNode(r.errs) || time.Since(failingSince) >= b.cfg.RequestTimeout {
				b.giveUp(ctx, k, value, olds, queued, r.settled)
				var during string
				if start.After(failingSince) {
					during = fmt.Sprintf(" in every round for %v", time.Since(failingSince).Round(time.Millisecond))
				}
				why := b.noMajority(r.errs, during)
				return nil, b.unavailableWhy(ctx, "take lock key "+k.lock, why, r.errs, k.all()...)
			}
		} else {
			failingSince = time.Time{}
		}
		holder, majority := b.majorityHolder(r, value)
		if !req.Wait {
			if !majority && r.failed == 0 && splits < splitRetries {
				// Racers split the vote and all undo theirs; look again
				// after a random pause, as Redlock prescribes.
				splits++
				if err := sleep(ctx, splitPause()); err != nil {
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
			if ctx.Err() != nil {
				// Ended while we subscribed: a round now would join the
				// queues after the end, for a give-up that may overtake
				// it there. Nothing is queued yet, and the attempt was
				// undone above.
				return nil, context.Cause(ctx)
			}
			hand.listen(b, value)
			queued = true
			continue
		}
		if r.held+r.heads >= b.quorum && !majority {
			headSplits++
		} else {
			headSplits = 0
		}
		timer.Reset(b.retryIn(r, majority, headSplits))
		// A release hands each node's key to the first waiter there
		// and tells it, naming the attempt of ours it came after. When
		// a majority of the nodes handed the lock to us after this
		// round's attempts, the keys there are ours and expire no
		// sooner than this round's start plus TTL: the lock is held,
		// without a round of its own, unless a renewal counted from
		// that start would be due already. Not after an undo of this value
		// (retire), which a node may still be about to run. Other
		// wake-ups, and handoffs that make no majority within a grace
		// of about two rounds' time (the other nodes may have handed their
		// key to another waiter), are checked by an attempt, which
		// finds the keys handed to us ours.
		var grace <-chan time.Time
	wait:
		for {
			select {
			case <-ctx.Done():
				break wait // given up below
			case <-hand.wake:
				n, other := hand.look()
				if retire {
					n = 0
				}
				if n >= b.quorum {
					// Taken on the round's word while a renewal counted
					// from start is not yet due; later, the lease would
					// come with less time for its first renewal than any
					// renewed lease has (or none): an attempt takes the
					// keys ours again, for a whole TTL.
					// Held's own deadline check, a moment later, finds
					// the lease late only when this goroutine was held up
					// past TTL - Drift - RenewEvery in between: then too
					// an attempt takes the keys, handed to value, ours
					// again (or finds them gone, as any attempt may).
					if !time.Now().Before(start.Add(b.cfg.RenewEvery)) {
						break wait
					}
					if b.beforeHandoffHeld != nil {
						b.beforeHandoffHeld(start.Add(b.cfg.TTL - b.cfg.Drift))
					}
					h, late, err := b.held(ctx, k, value, olds, start, r.settled)
					if late {
						break wait
					}
					return h, err
				}
				if n == 0 || other {
					break wait // a message that is not a handoff after this round
				}
				if grace == nil {
					grace = time.After(b.handoffGrace())
				}
			case <-grace:
				break wait
			case <-timer.C:
				break wait
			}
		}
		if ctx.Err() != nil {
			// Ended as the timer fired or a wake-up came (select picks
			// either): no round after the end.
			b.giveUp(ctx, k, value, olds, true, r.settled)
			return nil, context.Cause(ctx)
		}
	}
}

// handoffGrace is how long a waiter that nodes handed the key to waits
// for the others' handoffs, before it looks with a round of its own,
// which finds every key handed to it by then: about what a round takes
// (the release that hands over went to the nodes in parallel, as a
// round does), at most the node timeout. Waiting longer would cost more
// than the round.
func (b *backend) handoffGrace() time.Duration {
	if b.graceForTest > 0 {
		return b.graceForTest
	}
	return min(b.nodeTimeout, 2*time.Duration(b.roundAvg.Load())+time.Millisecond)
}

// noteRound adds a round's time to the average that handoffGrace uses,
// each round an eighth, so that one round slowed by a stall of the
// machine does not make the next waits long. Rounds of different
// acquisitions may note at once, and one may overwrite another's.
func (b *backend) noteRound(d time.Duration) {
	avg := b.roundAvg.Load()
	if avg == 0 {
		b.roundAvg.Store(int64(d))
		return
	}
	b.roundAvg.Store(avg + (int64(d)-avg)/8)
}

// handoffs collects, for an acquisition, the tags of the messages by
// which nodes tell it they handed it their key (see
// rediskit.LuaHandoff), as the nodes' dispatchers deliver them, and wakes
// it on any message for it.
type handoffs struct {
	wake chan struct{} // buffered: a wake-up not yet taken stands for any number

	mu     sync.Mutex
	value  string   // the acquisition's value now: a message for one it gave up only wakes it
	num    string   // the number of the round now, which a handoff after it names
	tags   []string // per node, the tag of the last handoff to value
	others bool     // a message came that is no handoff to value (see look)
}

func newHandoffs(nodes int, value string) *handoffs {
	return &handoffs{wake: make(chan struct{}, 1), value: value, tags: make([]string, nodes)}
}

// listen has every node's messages for value delivered.
func (h *handoffs) listen(b *backend, value string) {
	for i, n := range b.nodes {
		n.wake.RegisterFunc(value, func(tag string) { h.deliver(i, value, tag) })
	}
}

// deliver takes node i's message for value, tagged tag ("" for none).
func (h *handoffs) deliver(i int, value, tag string) {
	h.mu.Lock()
	if value == h.value && tag != "" {
		h.tags[i] = tag
	} else {
		h.others = true
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// round makes value the acquisition's (handoffs to one it gave up no
// longer count) and num the round's number, and forgets the messages so
// far, and a wake-up they left, before the round, which answers them: a
// handoff counts only when it came after the round (its tag is num).
func (h *handoffs) round(value, num string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.value, h.num = value, num
	clear(h.tags)
	h.others = false
	select {
	case <-h.wake:
	default:
	}
}

// look reports how many nodes handed the key to the current value after
// the current round (their last handoff names it), and whether a message
// that is no handoff to the current value (one telling it that it is
// first now, or one for a value it gave up) came since the last look. A
// node whose answer to the round was lost counts too: its handoff came
// after the round's attempt ran there, whose SEEN, written with the
// number, is no earlier than the round's start, so the handed key
// outlives the lease's deadline all the same.
func (h *handoffs) look() (n int, other bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tag := range h.tags {
		if tag != "" && tag == h.num {
			n++
		}
	}
	other, h.others = h.others, false
	return n, other
}

// retryIn is how long a queued waiter sleeps before its next attempt when
// no node wakes it first: at most RenewEvery, which keeps its queue
// entries alive. First in line on a majority (counting nodes where we took
// K): a split vote's pause when no one holds a majority, for splitRetries
// rounds in a row (racers that split the vote undo their keys at once;
// waiting out those keys' TTL instead stalled the start of a contended
// lock for RenewEvery); after that, or when someone holds a majority,
// just past the longest remaining TTL of keys not ours (a crashed holder,
// or crashed racers, are taken over right after their keys expire).
// Otherwise, first in line or when no one holds a majority, a random delay
// up to the node timeout (the Redlock retry after a failed round).
func (b *backend) retryIn(r round, majority bool, headSplits int) time.Duration {
	d := b.cfg.RenewEvery
	first := r.held+r.heads >= b.quorum
	switch {
	case first && !majority && headSplits <= splitRetries:
		d = min(d, splitPause())
	case first && r.pttl > 0:
		d = min(d, rediskit.PastExpiry(r.pttl))
	case first || !majority:
		d = min(d, time.Millisecond+rand.N(b.nodeTimeout+1))
	}
	return max(d, time.Millisecond)
}

// splitPause is the random pause before looking again after racers split
// the vote, so that they do not split it again in step.
func splitPause() time.Duration { return time.Millisecond + rand.N(5*time.Millisecond) }

// slowNode reports whether a node did not answer in time (errNoAnswer),
// rather than fail.
func slowNode(errs []error) bool {
	return slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, errNoAnswer) })
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

// giveUp leaves the queues and undoes whatever this acquisition set, once
// its last attempt's requests have settled (see eachSettled).
func (b *backend) giveUp(ctx context.Context, k keys, value string, olds []string, queued bool, settled <-chan struct{}) {
	if !queued {
		return // a failed attempt was undone already, on every node it may have reached
	}
	<-settled
	if _, err := b.unlock(ctx, k, true, true, b.releaseTimeout(), slices.Concat(olds, []string{value})...); err != nil {
		b.cfg.Logger.Warn("could not undo an acquisition on a majority; its keys end after one TTL", "key", k.lock, "err", err)
	}
}

// maxOlds bounds the values an acquisition gave up that it keeps handing
// over (see Acquire): an acquisition undoes an attempt in a few percent
// of contended holds, seldom twice.
const maxOlds = 8

// held makes the hold for value, set on a majority by an attempt started
// at start, unless its validity (TTL - elapsed - drift) already ran out
// or the backend closed. Late, it returns no hold and no error: the
// caller tries again, never returns the nil hold (after a round it
// undoes the attempt; after a majority's handoffs its next attempt takes
// the keys handed to value ours again).
func (b *backend) held(ctx context.Context, k keys, value string, olds []string, start time.Time, settled <-chan struct{}) (_ baton.Hold, late bool, _ error) {
	if !time.Now().Before(start.Add(b.cfg.TTL - b.cfg.Drift)) {
		return nil, true, nil
	}
	h := newHold(b, k, value, olds, start, settled)
	if !b.track(h) {
		_ = h.end(ctx, baton.ErrClosed)
		return nil, false, baton.ErrClosed
	}
	return h, false, nil
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
