package zk

import (
	"context"
	"errors"
	"fmt"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/obsend"
)

var _ baton.Observer = (*backend)(nil)

// Observe implements baton.Observer: it lists the election node's
// candidates, reads the first one (the leader) with a watch on its node,
// and looks again each time the watch fires, sending a term whenever the
// leader's node is another one. With no candidate, that is no leader, and
// the watch is on the election node's children. Candidates that join and
// leave behind a leader wake no observer: each costs an observer nothing,
// and a change of leader one event and two reads.
//
// ZooKeeper watches fire once and must be set again, and go-zookeeper v1.0.4
// has no persistent watches (ZooKeeper 3.6's AddWatch), so a leader whose
// whole term is shorter than the round trip between the watch firing and the
// next watch set can go unseen (two round trips when the election empties: a
// listing, then one with a watch on the children); terms are always reported
// in order, and every term that outlasts that time is reported, also to a
// slow reader: the observation goes on meanwhile and keeps up to 1,024 terms
// it has not taken (then the oldest go). An observation whose connection
// stays down for the session timeout (the TTL), counted from its last
// drop, ends: the session, and its watch, are gone, and the leader is
// unknown; the reader gets the terms queued before, then the channel
// closes.
//
// A term is the first candidate in line, as in the recipe: a candidate
// that leaves the line just as the holder leaves (a waiter that gives up,
// or a TryAcquire that found the lock held: it creates its node, then
// deletes it) can be first for the moment its node takes to go, and is
// reported then as a leader that never held the lock.
func (b *backend) Observe(ctx context.Context, name string) (<-chan baton.Term, error) {
	if err := baton.ValidateName(name); err != nil {
		return nil, err
	}
	dir := b.lockDir(name)
	drops := b.observe().mark.drops
	cur, watch, err := b.leaderW(ctx, name, dir)
	if err != nil {
		return nil, err
	}
	ch := make(chan baton.Term)
	go b.follow(ctx, name, dir, cur, watch, drops, ch)
	return ch, nil
}

// maxQueued is how many terms follow keeps for a reader that has not
// taken them yet; beyond it, the oldest go. A backend keeps it in
// obsQueue, which tests lower.
const maxQueued = 1024

// follow is owned by Observe's caller through ctx; it closes ch when ctx
// ends or ZooKeeper can no longer be read. It keeps following while the
// reader is slow: terms wait in a queue, in order, until the reader takes
// them (ZooKeeper keeps no history to read them back from later). cur and
// watch are from a read made when the connection had dropped drops times.
//
// It reads the election again after every reconnection, whatever the
// watch says. go-zookeeper sets its watches again on the new connection
// with the last zxid it saw, for the server to send the events of the
// changes made while it was away; but it reads that zxid while the new
// connection's first answers may be raising it (go-zookeeper/zk#35), and
// a zxid past a change's hides the change's event. A leader that came
// while the observer was cut off would go unseen until the next change.
func (b *backend) follow(ctx context.Context, name, dir string, cur baton.Term, watch <-chan zkgo.Event, drops uint64, ch chan<- baton.Term) {
	defer close(ch)
	// ended says why the observation ends, unless our Close ends it.
	ended := func(why string, args ...any) {
		if b.life.Err() == nil {
			obsend.Warn(ctx, b.cfg.Logger, why, append([]any{"election", name}, args...)...)
		}
	}
	queue := []baton.Term{cur} // terms the reader has not taken, oldest first
	b.observed(cur)
	// A connection down for the session timeout has lost its session, and
	// with it the watch: the observation ends then (go-zookeeper keeps the
	// watch open, and would say nothing until it reconnects). A
	// reconnection between two looks starts the count again (see outage).
	var down outage
	defer down.stop()
	v := b.observe()
	reread := false // a read failed for want of the connection: read again once connected
	for {
		var out chan<- baton.Term // nil, blocking, while nothing waits
		var head baton.Term
		if len(queue) > 0 {
			out, head = ch, queue[0]
		}
		select {
		case out <- head:
			queue = queue[1:]
			continue
		case <-ctx.Done():
			return
		case <-b.life.Done():
			return
		case <-v.changed:
			v = b.observe()
			if !v.connected() || (v.mark.drops == drops && !reread) {
				continue
			}
			// Reconnected since the last read: read again (see above).
		case <-down.see(v, b.cfg.TTL):
			ended("the connection stayed down for the session timeout", "ttl", b.cfg.TTL)
			flush(ctx, b.life, ch, queue)
			return
		case _, ok := <-watch:
			if !ok {
				// The connection closed, or a new session lost the
				// watch: look again below, once connected.
				if err := b.waitConnected(ctx, time.Now().Add(b.cfg.RequestTimeout)); err != nil {
					ended("its watch ended and the connection did not come back", "err", err)
					flush(ctx, b.life, ch, queue)
					return
				}
			}
		}
		drops = b.observe().mark.drops
		if hk := b.hooks.Load(); hk != nil && hk.observeRead != nil {
			hk.observeRead()
		}
		next, w, err := b.leaderW(ctx, name, dir)
		if err != nil {
			if isConnErr(err) && !errors.Is(err, zkgo.ErrClosing) && ctx.Err() == nil && b.life.Err() == nil && !b.observe().connected() {
				// The connection dropped, and the read gave up after the
				// request timeout: the session, and the observation, last
				// until the connection was down for the session timeout
				// (down, above). Read again once connected (a change of
				// state since v, the reconnection, wakes the loop). A
				// read with no answer on a connection still up ends the
				// observation, as before: no change of state may come.
				watch, reread = nil, true
				continue
			}
			ended("it could not read the election", "err", err)
			flush(ctx, b.life, ch, queue)
			return
		}
		watch, reread = w, false
		if next.Key != cur.Key {
			cur = next
			if len(queue) >= b.obsQueue {
				b.cfg.Logger.Warn("an observer's reader is far behind; its oldest term not taken is dropped", "election", name, "queued", b.obsQueue)
				queue = queue[1:]
			}
			queue = append(queue, cur)
			b.observed(cur)
		}
	}
}

// flush hands the reader the terms still queued, when the observation
// ends for want of ZooKeeper: they happened, and the last of them is the
// last the observation knows. It gives up when ctx ends or the backend
// closes.
func flush(ctx context.Context, life context.Context, ch chan<- baton.Term, queue []baton.Term) {
	for _, t := range queue {
		select {
		case ch <- t:
		case <-ctx.Done():
			return
		case <-life.Done():
			return
		}
	}
}

// observed calls the test hook, if any, with a term follow queued.
func (b *backend) observed(t baton.Term) {
	if hk := b.hooks.Load(); hk != nil && hk.observed != nil {
		hk.observed(t)
	}
}

// leaderW reads the election's leader and sets a watch that fires when
// the leader may have changed: on the leader's node while there is one,
// so that candidates joining and leaving behind it wake no observer (the
// leader changes only when its node goes: a candidate created later has a
// higher sequence number); else on the election node's children, for the
// next candidate (or, while the election node does not exist, on its
// creation).
func (b *backend) leaderW(ctx context.Context, name, dir string) (baton.Term, <-chan zkgo.Event, error) {
	type listing struct {
		kids  []string
		watch <-chan zkgo.Event
	}
	watchKids := false // the last listing found no candidate: list with a watch
	for range 6 {
		l, err := retryRead(b, ctx, nil, func() (listing, error) {
			if watchKids {
				kids, _, ch, err := b.conn.ChildrenW(dir)
				return listing{kids, ch}, err
			}
			kids, _, err := b.conn.Children(dir)
			return listing{kids: kids}, err
		})
		if errors.Is(err, zkgo.ErrNoNode) {
			ok, w, err := retryRead2(b, ctx, func() (bool, <-chan zkgo.Event, error) {
				ok, _, ch, err := b.conn.ExistsW(dir)
				return ok, ch, err
			})
			if err != nil {
				return baton.Term{}, nil, b.fail(ctx, "watch "+dir, err)
			}
			if ok {
				continue // created meanwhile: list it
			}
			return baton.Term{Election: name}, w, nil
		}
		if err != nil {
			return baton.Term{}, nil, b.fail(ctx, "list candidates of "+dir, err)
		}
		cands, err := orderCandidates(dir, l.kids)
		if err != nil {
			return baton.Term{}, nil, err
		}
		if len(cands) == 0 {
			if l.watch != nil {
				return baton.Term{Election: name}, l.watch, nil
			}
			watchKids = true
			continue
		}
		path := dir + "/" + cands[0].name
		w, ok, err := b.watchNode(ctx, path, nil)
		if err != nil {
			return baton.Term{}, nil, err
		}
		if !ok {
			continue // the leader left meanwhile
		}
		h := headOf(path, w)
		return baton.Term{Election: name, Leader: h.holder, Token: h.token, Key: h.path, Since: h.since}, w.watch, nil
	}
	return baton.Term{}, nil, &baton.UnavailableError{Where: b.place(), Err: fmt.Errorf("election %q keeps changing leader; look again", name)}
}

// retryRead2 is retryRead for a read with two results.
func retryRead2[A, B any](b *backend, ctx context.Context, fn func() (A, B, error)) (A, B, error) {
	type pair struct {
		a A
		b B
	}
	p, err := retryRead(b, ctx, nil, func() (pair, error) {
		a, bb, err := fn()
		return pair{a, bb}, err
	})
	return p.a, p.b, err
}
