package zk

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

	unlisten func()      // stops the connection state's calls
	unhook   func() bool // stops the session end's call
}

func newHold(b *backend, s *session, own created, m mark) *hold {
	h := &hold{
		b: b, s: s, path: own.path,
		czxid: own.czxid,
		mark:  m,
	}
	h.life, h.end = context.WithCancel(context.Background())
	h.unlisten = b.cs.listen(h.look)
	h.unhook = context.AfterFunc(s.k.Context(), h.look)
	h.look() // a change may have come before we listened
	return h
}

func (h *hold) Key() string              { return h.path }
func (h *hold) Token() baton.Token       { return baton.Token(h.czxid) }
func (h *hold) Context() context.Context { return h.life }

// Deadline is the session's local deadline: the send time of the last
// request the session answered, plus the session timeout, minus the drift
// margin. The server cannot expire the session before it.
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
	}
}

// shut stops following the connection and ends the hold with cause,
// unless it had already ended; it reports whether this call ended it.
func (h *hold) shut(cause error) bool {
	h.unlisten()
	h.unhook()
	return h.lose(cause)
}

// Release deletes our node (by its unique path, so never another holder's)
// and ends the hold. Releasing a lost hold returns nil; its node is still
// deleted if the session kept it. A Release that finds the node already
// gone (deleted by another client, a forced release, or gone with the
// session) before the hold saw it reports the loss, if the answer came
// before the local deadline: after it, the session may simply have expired
// while the release was on its way, the work having stopped before.
func (h *hold) Release(ctx context.Context) error {
	deadline := h.Deadline()
	if !h.shut(baton.ErrReleased) {
		// Lost before, or ended by Close, which deletes the node.
		h.b.untrack(h)
		if errors.Is(h.Err(), baton.ErrClosed) {
			return nil
		}
		_, _ = h.b.deleteNode(ctx, h.path) // lost: nothing for the caller to act on
		return nil
	}
	h.b.untrack(h)
	found, err := h.b.deleteNode(ctx, h.path)
	if err == nil && !found && time.Now().Before(deadline) {
		return fmt.Errorf("%w: node %s was already gone at release: deleted by another client, or gone with the session", baton.ErrLeaseLost, h.path)
	}
	return err
}
