package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/ctxhook"
	"github.com/baton-go/baton/internal/obsend"
)

var _ baton.Observer = (*backend)(nil)

// Observe implements baton.Observer. It reads the lock's keys, then watches
// the lock's key range from the next revision, applying every revision's
// events in order and sending a term each time the key with the lowest
// create revision changes. Unlike concurrency.Election.Observe, it reports a term
// with no leader when the last key goes, and it ends when the cluster stops
// answering (a quorum read every RenewEvery), where a watch would stay open
// and silent, reporting a leader that may be long gone; the change it was
// handing a slow reader then still reaches it first. It also ends when the
// backend closes: Close waits for it, and returns with the channel closed;
// an Observe after Close returns baton.ErrClosed.
//
// A term is the first key in line, as with concurrency.Election: a waiter
// that gives up just as the holder leaves can be first for the moment its
// key takes to go, and is reported then as a leader that never held the
// lock. A TryAcquire that finds the lock held writes no key, so it is
// never reported.
func (b *backend) Observe(ctx context.Context, name string) (<-chan baton.Term, error) {
	if err := baton.ValidateName(name); err != nil {
		return nil, err
	}
	pfx := b.lockPrefix(name)
	keys, rev, err := b.snapshot(ctx, pfx)
	// The observation is the backend's to await, as its other goroutines
	// are: started under b.mu while not closed, it is among those Close
	// waits for (b.bg's Add comes before Close's Wait).
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, baton.ErrClosed // before, or during, the read: whose failure then says nothing
	}
	if err != nil {
		return nil, err
	}
	ch := make(chan baton.Term)
	b.bg.Go(func() { b.observe(ctx, name, pfx, keys, rev, ch) })
	return ch, nil
}

// snapshot reads the keys of a lock, by key, and the revision read at.
func (b *backend) snapshot(ctx context.Context, pfx string) (map[string]*mvccpb.KeyValue, int64, error) {
	octx, cancel := b.op(ctx)
	defer cancel()
	resp, err := b.client.Get(octx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, b.fail(ctx, "list election keys", err)
	}
	keys := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys[string(kv.Key)] = kv
	}
	return keys, resp.Header.Revision, nil
}

// observe is owned by Observe's caller through ctx, and by the backend,
// whose Close ends it (bgCtx) and waits for it (bg); it closes ch when ctx
// ends, the backend closes, the watch fails for good, or the cluster stops
// answering.
func (b *backend) observe(ctx context.Context, name, pfx string, keys map[string]*mvccpb.KeyValue, rev int64, ch chan<- baton.Term) {
	defer close(ch)
	// From here on ctx ends with the caller's, or with Close: every send
	// and request gives up then, a send to a reader that is gone too.
	// The callback that Close starts has returned before observe does,
	// so that Close, which waits for observe, leaves nothing running.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	unhook := ctxhook.AfterFunc(b.bgCtx, stop)
	defer unhook()
	// A client that reaches no member at all keeps its watch open and
	// silent, reconnecting for ever (and a new watch blocks as long):
	// every RenewEvery a quorum read asks whether the cluster answers, and
	// one that fails ends the observation, through octx.
	octx, end := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() { defer close(probed); b.probe(octx, name, pfx, end) }()
	defer func() { end(); <-probed }()
	// send hands the reader a term, unless the observation ends first.
	// One that ends because the cluster stopped answering still hands
	// over the term it was sending: that change happened, and is the last
	// the observation knows; only the caller's end or Close (ctx) drops
	// it.
	caller := ctx
	send := func(t baton.Term) bool {
		if hk := b.hooks.Load(); hk != nil && hk.observed != nil {
			hk.observed(t)
		}
		if sendTerm(octx, ch, t) {
			return true
		}
		if caller.Err() == nil {
			sendTerm(caller, ch, t)
		}
		return false
	}
	ctx = octx
	cur := term(name, keys)
	if !send(cur) {
		return
	}
	// advance sends the term keys show when it is another than cur: by
	// key and token, since another tool's key name may come back (see
	// term); it reports whether the observation goes on.
	advance := func() bool {
		next := term(name, keys)
		if next.Key == cur.Key && next.Token == cur.Token {
			return true
		}
		cur = next
		return send(cur)
	}
	for {
		// WithRequireLeader: a member cut off from its cluster's leader
		// (partitioned, or its peers down) would keep the watch open and
		// silent, and the observer would report a leader that may be long
		// gone. The server ends such a watch a few election timeouts after
		// it lost its leader; then a fresh read, which the client may send
		// to another member, tells whether the cluster can still be
		// observed.
		wch := b.client.Watch(clientv3.WithRequireLeader(ctx), pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		noLeader := false
		for wr := range wch {
			if err := wr.Err(); err != nil {
				noLeader = errors.Is(err, rpctypes.ErrNoLeader)
				compacted := errors.Is(err, rpctypes.ErrCompacted)
				if compacted {
					b.cfg.Logger.Warn("an observer's next revision was compacted; the changes until it reads the keys again go unreported", "election", name, "revision", rev+1, "compacted", wr.CompactRevision)
				}
				if noLeader || compacted {
					break // read the keys again below
				}
				obsend.Warn(ctx, b.cfg.Logger, "its watch failed", "election", name, "err", err)
				return
			}
			for i, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					delete(keys, string(ev.Kv.Key))
				} else {
					keys[string(ev.Kv.Key)] = ev.Kv
				}
				// The leader is that of a whole revision: one revision
				// deletes every key of a session that ends, a holder's
				// and a waiter's of the same Locker, and the waiter
				// never led.
				if i+1 < len(wr.Events) && wr.Events[i+1].Kv.ModRevision == ev.Kv.ModRevision {
					continue
				}
				if !advance() {
					return
				}
			}
			rev = max(rev, wr.Header.Revision)
		}
		if ctx.Err() != nil {
			return
		}
		if noLeader {
			b.cfg.Logger.Warn("an observer's etcd member lost its leader; the changes until it reads the keys again go unreported", "election", name, "revision", rev)
			// Not at once: the next watch may land on that member again.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		// Compacted past our revision, or no leader: start again from a
		// fresh read; one that fails ends the observation.
		var err error
		if keys, rev, err = b.snapshot(ctx, pfx); err != nil {
			obsend.Warn(ctx, b.cfg.Logger, "it could not read the election's keys again", "election", name, "err", err)
			return
		}
		if !advance() {
			return
		}
	}
}

// probe, owned by observe, ends the observation (end) when the cluster
// does not answer a quorum read of the election's keys within the request
// timeout, asking every RenewEvery until ctx ends.
func (b *backend) probe(ctx context.Context, name, pfx string, end context.CancelFunc) {
	tick := time.NewTicker(b.cfg.RenewEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		octx, cancel := b.op(ctx)
		_, err := b.client.Get(octx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil && ctx.Err() == nil {
			obsend.Warn(ctx, b.cfg.Logger, "the cluster did not answer a quorum read", "election", name, "err", err)
			end()
			return
		}
	}
}

// term is the leader among keys: the one with the lowest create revision,
// and of keys one transaction made together (another tool's), the first
// by name, so that the leader does not change with the map's order.
func term(name string, keys map[string]*mvccpb.KeyValue) baton.Term {
	var first *mvccpb.KeyValue
	for _, kv := range keys {
		if first == nil || kv.CreateRevision < first.CreateRevision ||
			kv.CreateRevision == first.CreateRevision && string(kv.Key) < string(first.Key) {
			first = kv
		}
	}
	if first == nil {
		return baton.Term{Election: name}
	}
	v := decodeValue(first.Value)
	return baton.Term{Election: name, Leader: v.Holder, Token: baton.Token(first.CreateRevision), Key: string(first.Key), Since: v.Since}
}

func sendTerm(ctx context.Context, ch chan<- baton.Term, t baton.Term) bool {
	select {
	case ch <- t:
		return true
	case <-ctx.Done():
		return false
	}
}
