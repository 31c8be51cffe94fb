package zk

import (
	"context"
	"errors"
	"fmt"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/holderval"
)

// Acquire implements baton.Backend with the recipe: create our candidate
// and list the candidates, in one round trip (the token, our node's czxid,
// comes with the create, and a create that finds itself alone needs no
// listing). The smallest sequence number holds the lock; a waiter watches
// only the candidate just before its own and lists again when that watch
// fires, unless that candidate was the only one ahead. An uncontended
// acquisition costs one request and a release another, where zk.Lock
// takes three in all; a handoff to the next in line costs nothing beyond
// the watch event.
func (b *backend) Acquire(ctx context.Context, req baton.Request) (_ baton.Hold, err error) {
	s, err := b.session(ctx)
	if err != nil {
		return nil, err
	}
	// waiter is the session a waiting acquisition's reads outlast an
	// outage on (see retryRead); nil for TryAcquire.
	waiter := func() *session {
		if req.Wait {
			return s
		}
		return nil
	}
	dir := b.lockDir(req.Name)
	listed := b.observe()
	own, cands, err := b.createAndList(ctx, dir, holderval.Encode(req.Holder), waiter())
	if own.path == "" {
		return nil, err
	}
	ours := own.path[len(dir)+1:]
	kept := false // our node is a hold's, or already deleted
	defer func() {
		switch {
		case kept:
		case errors.Is(err, errStayedDown):
			// The node went with the session; a delete would wait for
			// the connection. The reaper deletes it if the session
			// lived on all the same.
			b.reaper.add(own.path)
		default:
			b.dropCandidate(ctx, own.path)
		}
	}()
	if err != nil {
		return nil, err
	}
	for {
		pos, pred := predecessor(cands, ours)
		switch {
		case pos < 0:
			if err := b.changed(s, b.observe()); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: our node %s was deleted by another client while acquiring", baton.ErrLeaseLost, own.path)
		case pos == 0:
			if s.k.Err() != nil {
				// The session object ended while we waited (its local
				// deadline passed during an outage), but our node, first
				// in line, shows that the server's session lives on.
				if s, err = b.resume(ctx, s, req.Wait); err != nil {
					return nil, err
				}
			}
			h, err := b.grant(ctx, s, req, own, listed)
			if err != nil {
				return nil, err
			}
			if h != nil {
				kept = true
				return h, nil
			}
			// The connection dropped around our look: look again.
		case !req.Wait:
			kept = true
			return nil, b.notAcquired(ctx, req.Name, dir+"/"+cands[0].name, own.path)
		default:
			listed = b.observe()
			gone, err := b.waitPredecessor(ctx, s, own.path, dir+"/"+pred.name)
			if err != nil {
				return nil, err
			}
			if gone && pos == 1 {
				// The only candidate ahead of us is gone, and none can
				// be created ahead of us (sequence numbers only grow,
				// and the election node cannot be re-created while our
				// node is in it): we are first, without listing again.
				cands = cands[1:]
				continue
			}
		}
		listed = b.observe()
		if cands, err = b.listCandidates(ctx, dir, waiter()); err != nil {
			return nil, err
		}
	}
}

// grant makes the hold once our node is first. It returns a nil hold,
// asking for another look, when the connection dropped since we listed
// (unless ContinueWhileSuspended is set, a lock is only granted on a
// connection that has not dropped since the look that showed it free),
// and when s ended since (the next look resumes on a fresh one).
func (b *backend) grant(ctx context.Context, s *session, req baton.Request, own created, listed snap) (baton.Hold, error) {
	v := b.observe()
	if err := b.changed(s, v); err != nil {
		return nil, err
	}
	if s.k.Err() != nil {
		return nil, nil
	}
	if !b.set.ContinueWhileSuspended {
		if !v.connected() {
			if err := b.awaitConnection(ctx, s, req.Wait); err != nil {
				return nil, err
			}
			return nil, nil
		}
		if v.mark.drops != listed.mark.drops {
			return nil, nil
		}
	}
	h := newHold(b, s, own, v.mark)
	if !b.track(h) {
		h.shut(baton.ErrClosed)
		return nil, baton.ErrClosed // the caller deletes our node
	}
	if h.Err() != nil {
		h.forget() // lost already, before it was tracked
	}
	return h, nil
}

// awaitConnection waits until the connection has s's session again: a
// waiting acquisition for as long as waitSession does, a TryAcquire at
// most until s's local deadline.
func (b *backend) awaitConnection(ctx context.Context, s *session, wait bool) error {
	if hk := b.hooks.Load(); hk != nil && hk.awaitingConnection != nil && !b.observe().connected() {
		hk.awaitingConnection()
	}
	var err error
	if wait {
		err = b.waitSession(ctx, s)
	} else {
		err = b.waitConnected(ctx, s.k.Deadline())
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx) // the caller's, not a loss
	case errors.Is(err, zkgo.ErrClosing), errors.Is(err, baton.ErrClosed):
		return baton.ErrClosed
	case errors.Is(err, baton.ErrLeaseLost):
		return err
	}
	return fmt.Errorf("%w: %w: the connection did not come back while acquiring", baton.ErrLeaseLost, ErrSuspended)
}

// resume returns a live session object for an acquisition whose session
// object s ended while it waited, once the connection has s's session
// again (see awaitConnection), when the server's session is the same: the
// one its node lives on. Making the session object costs a request, and
// may wait for its first renewal to settle it (see session); a waiting
// acquisition whose connection fails again meanwhile waits for it again.
func (b *backend) resume(ctx context.Context, s *session, wait bool) (*session, error) {
	for {
		if err := b.awaitConnection(ctx, s, wait); err != nil {
			return nil, err
		}
		before := b.observe()
		if err := b.changed(s, before); err != nil {
			return nil, err
		}
		s2, err := b.session(ctx)
		now := b.observe()
		var ue *baton.UnavailableError
		switch {
		case err == nil && s2.id != s.id:
			return nil, fmt.Errorf("%w: %w (session 0x%x)", baton.ErrLeaseLost, ErrSessionExpired, s.id)
		case err == nil:
			return s2, nil
		case !wait || ctx.Err() != nil || !errors.As(err, &ue):
			return nil, err
		case now.connected() && now.mark == before.mark:
			return nil, err // the connection held: not an outage to wait out
		}
		b.cfg.Logger.Warn("the connection failed again as a waiting acquisition resumed its session; waiting for it", "session", fmt.Sprintf("0x%x", s.id), "err", err)
	}
}

// notAcquired deletes our node and reads the holder's, both at once, for
// TryAcquire's answer.
func (b *backend) notAcquired(ctx context.Context, name, holderPath, ours string) error {
	gc := async(b, func() (watched, error) {
		data, stat, err := b.conn.Get(holderPath)
		return watched{data: data, stat: stat}, err
	})
	b.dropCandidate(ctx, ours)
	nae := &baton.NotAcquiredError{Name: name}
	if got, err := await(b, ctx, gc); err == nil {
		nae.Holder = holderval.Decode(got.data).Holder
		nae.Token = baton.Token(got.stat.Czxid)
	}
	return nae
}

// dropCandidate deletes a candidate we are giving up, on a detached,
// bounded context: cleanup must happen even when the caller gave up, and
// before we return, or a stale candidate would stand in line ahead of later
// ones.
func (b *backend) dropCandidate(ctx context.Context, path string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := b.deleteNode(dctx, path); err != nil {
		b.cfg.Logger.Warn("could not delete our candidate; the reaper will", "path", path, "err", err)
	}
}

// waitPredecessor returns when the candidate at pred is gone (gone true)
// or changed, or the connection came back after a drop (both: look
// again), and with an error when ctx ends, the backend closes, or the
// server's session is lost: s's session expired or was replaced (our node
// went with it), or the connection stayed down for the session timeout
// (see outage). A disconnection alone does not end the wait: go-zookeeper
// sets the watch again on reconnection, and the session may well survive,
// also past s's local deadline, which bounds holds, not waits.
func (b *backend) waitPredecessor(ctx context.Context, s *session, ours, pred string) (gone bool, err error) {
	w, ok, err := b.watchNode(ctx, pred, s)
	if err != nil {
		return false, err
	}
	if !ok {
		return true, nil // gone already
	}
	if hk := b.hooks.Load(); hk != nil && hk.watching != nil {
		hk.watching(ours, pred)
	}
	start := b.observe()
	var down outage
	defer down.stop()
	for {
		v := b.observe()
		if err := b.changed(s, v); err != nil {
			return false, err
		}
		if v.connected() && v.mark.drops != start.mark.drops {
			return false, nil
		}
		select {
		case ev := <-w.watch:
			if hk := b.hooks.Load(); hk != nil && hk.predecessorEvent != nil {
				hk.predecessorEvent(ours, pred)
			}
			if ev.Type == zkgo.EventNotWatching {
				if errors.Is(ev.Err, zkgo.ErrClosing) {
					// The connection was closed: by our Close, or by the
					// caller that gave it to New. Neither comes back.
					if b.life.Err() != nil {
						return false, baton.ErrClosed
					}
					b.connGone.Store(true)
					return false, fmt.Errorf("the ZooKeeper connection given to New was closed: %w", baton.ErrClosed)
				}
				if err := b.changed(s, b.observe()); err != nil {
					return false, err
				}
			}
			return ev.Type == zkgo.EventNodeDeleted, nil
		case <-v.changed:
		case <-down.see(v, b.cfg.TTL):
			return false, down.err(b.cfg.TTL)
		case <-b.life.Done():
			return false, baton.ErrClosed
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
}

// waitSession waits until the connection has s's session again, and
// fails as waitPredecessor does when it cannot (see outlast).
func (b *backend) waitSession(ctx context.Context, s *session) error {
	var down outage
	defer down.stop()
	_, err := outlast[struct{}](b, ctx, s, nil, &down)
	return err
}

// outlast waits for ch's result, or, with ch nil, for the connection to
// have s's session again, for as long as the server's session may live.
// It fails with a loss when s's session expired or was replaced, or the
// connection stayed down for the session timeout (see outage), with
// baton.ErrClosed when the backend closes, and with ctx's cause when ctx
// ends. down times the outage; the caller stops it.
func outlast[T any](b *backend, ctx context.Context, s *session, ch <-chan result[T], down *outage) (result[T], error) {
	for {
		v := b.observe()
		if err := b.changed(s, v); err != nil {
			return result[T]{}, err
		}
		if ch == nil && v.connected() {
			return result[T]{}, nil
		}
		select {
		case r := <-ch:
			return r, nil
		case <-v.changed:
		case <-down.see(v, b.cfg.TTL):
			return result[T]{}, down.err(b.cfg.TTL)
		case <-b.life.Done():
			return result[T]{}, baton.ErrClosed
		case <-ctx.Done():
			return result[T]{}, context.Cause(ctx)
		}
	}
}

// outage times a disconnection as a waiter sees it, from the first look
// that found the connection down. Once it has lasted the session timeout,
// the server heard nothing from the session for that long, and has
// expired it (or will, as soon as a new leader's fresh timeouts run out):
// the waiter's node is gone, and its place in line with it. A look that
// finds the connection down again after a reconnection the waiter did not
// see (the drops counted since the timer started) starts it again: the
// server heard from the session when it reconnected.
type outage struct {
	t     *time.Timer
	drops uint64 // the connection's drops when t started
}

// see returns a channel that receives when the connection, found down in
// v, has been down for ttl; nil while it is up.
func (o *outage) see(v snap, ttl time.Duration) <-chan time.Time {
	if v.connected() {
		o.stop()
		return nil
	}
	if o.t != nil && o.drops != v.mark.drops {
		o.stop()
	}
	if o.t == nil {
		o.t, o.drops = time.NewTimer(ttl), v.mark.drops
	}
	return o.t.C
}

func (o *outage) stop() {
	if o.t != nil {
		o.t.Stop()
		o.t = nil
	}
}

func (o *outage) err(ttl time.Duration) error {
	return fmt.Errorf("%w: %w: %w (%v) while waiting", baton.ErrLeaseLost, ErrSuspended, errStayedDown, ttl)
}

// errStayedDown is an outage's: the server has expired the session.
var errStayedDown = errors.New("the connection stayed down for the session timeout")
