package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton"
)

// hold is one held lock key. It is lost when its session is, or when the
// key is deleted by someone else (an operator's forced release).
type hold struct {
	b   *backend
	s   *session
	key string
	rev int64

	life     context.Context // cancelled when the hold ends: its Context
	end      context.CancelFunc
	mu       sync.Mutex
	err      error
	unhook   func() bool        // stops relaying the session's end
	watchCtx context.Context    // the watcher's: ends with the session, or cancel
	cancel   context.CancelFunc // ends the watcher
	exited   chan struct{}

	detached sync.Once // see detach
}

// detach drops the hold from the backend's and from its session's users,
// once: at Release, or as soon as the watcher finds the key gone or the
// session ends, since a caller may drop a lost lease without Release (a
// retired session would otherwise renew on for it until Close, and a
// session lost by its deadline would not be revoked).
func (h *hold) detach() {
	h.detached.Do(func() {
		h.b.untrack(h)
		h.b.leave(h.s)
	})
}

// drop is detach for the watcher that found the key gone, as it exits: it
// also stops relaying the session's end and ends its own context, both
// registered on the session's context, which would keep the hold (a lost
// lease dropped without Release) until the session ends, and a session
// lives as long as the Locker's other holds do.
func (h *hold) drop() {
	h.unhook()
	h.cancel()
	h.detach()
}

// newHold makes the hold; start begins following it.
func newHold(b *backend, s *session, key string, rev int64) *hold {
	ctx, cancel := context.WithCancel(s.k.Context())
	life, end := context.WithCancel(context.Background())
	return &hold{b: b, s: s, key: key, rev: rev, life: life, end: end, watchCtx: ctx, cancel: cancel, exited: make(chan struct{})}
}

// start follows the hold's liveness: the session's end is relayed at once
// (nothing in between can block it), and a watcher looks for the deletion
// of our key. It comes after track: a relay that ran first (the session
// ended meanwhile) would drop a hold not yet tracked, which track would
// then keep.
func (h *hold) start() {
	// The session's end also drops the hold (detach): a caller may drop
	// a lease lost so without Release, and the hold, its session and the
	// session's lease would stay until Close.
	h.unhook = context.AfterFunc(h.s.k.Context(), func() {
		h.lose(h.s.k.Err())
		h.detach()
	})
	go h.watch(h.watchCtx)
}

func (h *hold) Key() string              { return h.key }
func (h *hold) Token() baton.Token       { return baton.Token(h.rev) }
func (h *hold) Context() context.Context { return h.life }
func (h *hold) Deadline() time.Time      { return h.s.k.Deadline() }

func (h *hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// stopWatch stops relaying the session's end and the watcher, and waits
// for the watcher.
func (h *hold) stopWatch() {
	h.unhook()
	h.cancel()
	<-h.exited
}

// lose marks the hold ended (once) and cancels its Context.
func (h *hold) lose(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return
	}
	h.err = cause
	h.end()
}

// watch is owned by the hold and ends with ctx (Release, or the session's
// end). It turns the deletion of our key into the hold's loss.
func (h *hold) watch(ctx context.Context) {
	defer close(h.exited)
	if hk := h.b.hooks.Load(); hk != nil && hk.watchExit != nil {
		defer hk.watchExit()
	}
	from := h.rev + 1
	for {
		// WithRequireLeader: a watch on a member cut off from the leader
		// ends instead of staying silent; the Get below then looks.
		wch := h.b.client.Watch(clientv3.WithRequireLeader(ctx), h.key, clientv3.WithRev(from))
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			if hk := h.b.hooks.Load(); hk != nil && hk.watchEvent != nil {
				hk.watchEvent(ctx)
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					if ctx.Err() == nil {
						h.lose(fmt.Errorf("%w: lock key %s was deleted: by another client (a forced release), or with its session's lease, which expired (this process stopped or cut off past the TTL)", baton.ErrLeaseLost, h.key))
						h.drop()
					}
					return
				}
			}
			from = max(from, wr.Header.Revision+1)
		}
		// The watch ended: ctx is done, or the stream broke (an error or a
		// compaction); then look at the key before watching again.
		if ctx.Err() != nil {
			return
		}
		gctx, cancel := h.b.op(ctx)
		g, err := h.b.client.Get(gctx, h.key)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != h.rev {
				h.lose(fmt.Errorf("%w: lock key %s is gone", baton.ErrLeaseLost, h.key))
				h.drop()
				return
			}
			from = g.Header.Revision + 1
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Release deletes the key if it is still ours (compare-and-delete by create
// revision), and ends the watcher. A hold found lost, before or by the
// delete, returns its loss (see baton.Hold); a key found gone by an answer
// that came after the local deadline is not a loss, as on the other
// backends: the work had stopped before it. A lost hold is not deleted: its key is
// gone, or goes with its session's lease (revoked in the background once
// no other hold uses it, when it was lost by its local deadline), and the
// service may be unreachable, which would only make Release wait. When the
// delete fails, the session is retired, and the delete is tried again in
// the background while the session lives (its lease takes the key at the
// latest).
func (h *hold) Release(ctx context.Context) error {
	h.stopWatch()
	h.b.untrack(h)
	defer h.detach()
	h.mu.Lock()
	prior := h.err
	h.mu.Unlock()
	h.lose(baton.ErrReleased)
	if prior != nil {
		if errors.Is(prior, baton.ErrLeaseLost) {
			return prior // the Lease records it, if the loss had not reached it
		}
		return nil
	}
	resp, err := h.b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
		Then(clientv3.OpDelete(h.key)).
		Commit()
	answered := time.Now()
	if err != nil {
		h.b.retire(h.s)
		h.b.retryDelete(h.s, h.key, h.rev)
		return h.b.failWithin(context.Background(), "delete lock key", fmt.Errorf("%w; it is deleted again in the background, and goes with the session's lease at the latest", err), h.b.cfg.ReleaseTimeout)
	}
	if !resp.Succeeded {
		if errors.Is(h.s.k.Err(), baton.ErrClosed) {
			return nil // our own Close revoked the session meanwhile
		}
		if !answered.Before(h.Deadline()) {
			// The key may have run out with the session's lease while the
			// delete was on its way; the work had stopped before the
			// local deadline either way, so nothing overlapped: not a loss.
			return nil
		}
		// Deleted by someone else, and the watcher, stopped above, had
		// not said so yet: the work may have overlapped the next holder's.
		return fmt.Errorf("%w: lock key %s was gone when released: deleted by another client (a forced release), or gone with its session's lease", baton.ErrLeaseLost, h.key)
	}
	return nil
}
