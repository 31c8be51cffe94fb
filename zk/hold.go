package zk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton"
)

// hold is one held lock: our candidate node, first in line. It is lost when
// its session is (expired, replaced, or past the local deadline), when the
// connection drops (unless ContinueWhileSuspended), or when someone deletes
// the node (an operator's forced release), which the session's next
// confirmation finds. It needs no goroutine of its own: the connection's
// state calls it on every change, and the session's end through
// context.AfterFunc.
type hold struct {
	b     *backend
	s     *session
	path  string
	czxid int64
	mark  mark // the connection's counters when granted

	life context.Context // cancelled when the hold ends: its Context
	end  context.CancelFunc
	mu   sync.Mutex
	err  error
	// stops ends the calls of the connection's state and of the
	// session's end (see follow); unfollowed says they were ended, and a
	// call registered after that is ended at once.
	stops      []func()
	unfollowed bool

	gone atomic.Pointer[error] // a renewal found the node deleted
}

func newHold(b *backend, s *session, own created, m mark) *hold {
	h := &hold{
		b: b, s: s, path: own.path,
		czxid: own.czxid,
		mark:  m,
	}
	h.life, h.end = context.WithCancel(context.Background())
	// Either call may come before the other is registered (a drop on
	// go-zookeeper's goroutine, a session that ended meanwhile on
	// AfterFunc's), end the hold, and unfollow it: follow ends at once a
	// call registered after that.
	h.follow(b.cs.listen(h.look))
	if hk := b.hooks.Load(); hk != nil && hk.holdListening != nil {
		hk.holdListening(h.look)
	}
	stop := context.AfterFunc(s.k.Context(), h.look)
	h.follow(func() { stop() })
	h.look() // a change may have come before we listened
	return h
}

// follow keeps stop, which ends one of the calls that end the hold, for
// unfollow; after unfollow it calls stop at once.
func (h *hold) follow(stop func()) {
	h.mu.Lock()
	if !h.unfollowed {
		h.stops = append(h.stops, stop)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	stop()
}

// unfollow ends the calls of the connection's state and of the session's
// end, those registered and those to come (see follow).
func (h *hold) unfollow() {
	h.mu.Lock()
	stops := h.stops
	h.stops, h.unfollowed = nil, true
	h.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

func (h *hold) Key() string              { return h.path }
func (h *hold) Token() baton.Token       { return baton.Token(h.czxid) }
func (h *hold) Context() context.Context { return h.life }

// Deadline is the session's local deadline: the send time of a request
// the leader is known to have heard of (see the package doc), plus the
// session timeout, minus the drift margin. The server cannot expire the
// session before it.
func (h *hold) Deadline() time.Time { return h.s.k.Deadline() }

func (h *hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// lose marks the hold ended (once) and cancels its Context; it reports whether
// this call ended it.
func (h *hold) lose(cause error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return false
	}
	h.err = cause
	h.end()
	return true
}

// check says why the hold must end in connection state v, or nil.
func (h *hold) check(v snap) error {
	if err := h.b.lost(h.s, v); err != nil {
		return err
	}
	if !h.b.set.ContinueWhileSuspended && (v.mark.drops != h.mark.drops || !v.connected()) {
		return fmt.Errorf("%w: %w: the holder can no longer know that it holds the lock", baton.ErrLeaseLost, ErrSuspended)
	}
	return nil
}

// look ends the hold, at once, when the connection's state or the
// session's end says it must. It never blocks.
func (h *hold) look() {
	if err := h.check(h.b.cs.snapshot()); err != nil && h.lose(err) {
		// The session may live on (a disconnection survived, or only the
		// local deadline passed): our node must not keep the lock.
		h.b.reaper.add(h.path)
		h.forget()
	}
}

// shut stops following the connection and ends the hold with cause,
// unless it had already ended; it reports whether this call ended it.
func (h *hold) shut(cause error) bool {
	h.unfollow()
	return h.lose(cause)
}

// forget stops following the connection and drops the hold from the
// backend's, once it was lost: a lease dropped without a Release costs
// nothing from then on (its node, if the session kept it, is the
// reaper's). A Release that comes later does the same again, harmlessly.
func (h *hold) forget() {
	h.unfollow()
	h.b.untrack(h)
}

// Release deletes our node (by its unique path, so never another holder's)
// and ends the hold. Releasing a lost hold returns its loss (see
// baton.Hold); its node is still deleted if the session kept it. A Release
// that finds the node already gone (deleted by another client, a forced
// release, or gone with the session) before the hold saw it reports the
// loss, if the answer came before the local deadline as it is then (the
// session's renewals go on meanwhile), or a renewal found the node gone:
// else the session may simply have expired while the release was on its
// way, the work having stopped before. A release that fails while a
// renewal found the node gone reports that loss too.
func (h *hold) Release(ctx context.Context) error {
	// Counted before the hold ends, so that a Close that finds it ended
	// waits for its delete.
	settled := h.b.settling()
	defer settled()
	if !h.shut(baton.ErrReleased) {
		// Lost before, or ended by Close, which deletes the node.
		h.b.untrack(h)
		if errors.Is(h.Err(), baton.ErrClosed) {
			return nil
		}
		if h.b.cs.snapshot().connected() {
			_, _ = h.b.deleteNode(ctx, h.path) // lost: nothing for the caller to act on
		} else {
			// Cut off (a hold lost as SUSPENDED): a delete would wait for
			// the connection for nothing; the reaper, which the hold gave
			// its node when it was lost, deletes it once it is back.
			h.b.reaper.add(h.path)
		}
		if err := h.Err(); errors.Is(err, baton.ErrLeaseLost) {
			return err // the Lease may have marked itself released first
		}
		return nil
	}
	h.b.untrack(h)
	if hk := h.b.hooks.Load(); hk != nil && hk.releaseDelete != nil {
		hk.releaseDelete()
	}
	found, err := h.b.deleteNode(ctx, h.path)
	gone := h.gone.Load()
	switch {
	case err != nil && gone != nil:
		// The node may have been deleted while the work ran (or this
		// release's delete ran and its answer was lost).
		return fmt.Errorf("%w (and the release failed: %v)", *gone, err)
	case err == nil && !found && (time.Now().Before(h.Deadline()) || gone != nil):
		return fmt.Errorf("%w: node %s was already gone at release: deleted by another client, or gone with the session", baton.ErrLeaseLost, h.path)
	}
	return err
}
