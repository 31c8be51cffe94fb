package zk

import (
	"context"
	"errors"
	"fmt"

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
func (b *backend) Acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	s, err := b.session(ctx)
	if err != nil {
		return nil, err
	}
	// No request may hold an acquisition past its session's end.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.k.Context(), func() { cancel(errSessionEnded) })
	defer stop()
	h, err := b.acquire(sctx, s, req)
	if err != nil && errors.Is(context.Cause(sctx), errSessionEnded) {
		return nil, fmt.Errorf("ZooKeeper session ended while acquiring: %w", s.k.Err())
	}
	return h, err
}

// errSessionEnded cancels the requests of an acquisition whose session
// ended.
var errSessionEnded = errors.New("ZooKeeper session ended")

func (b *backend) acquire(ctx context.Context, s *session, req baton.Request) (baton.Hold, error) {
	dir := b.lockDir(req.Name)
	listed := b.observe()
	own, cands, err := b.createAndList(ctx, dir, holderval.Encode(req.Holder))
	if own.path == "" {
		return nil, err
	}
	ours := own.path[len(dir)+1:]
	kept := false // our node is a hold's, or already deleted
	defer func() {
		if !kept {
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
			if err := b.lost(s, b.observe()); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: our node %s was deleted by another client while acquiring", baton.ErrLeaseLost, own.path)
		case pos == 0:
			h, err := b.grant(ctx, s, req.Name, own, listed)
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
		if cands, err = b.listCandidates(ctx, dir); err != nil {
			return nil, err
		}
	}
}

// grant makes the hold once our node is first. It returns a nil hold,
// asking for another look, when the connection dropped since we listed:
// unless ContinueWhileSuspended is set, a lock is only granted on a
// connection that has not dropped since the look that showed it free.
func (b *backend) grant(ctx context.Context, s *session, name string, own created, listed snap) (baton.Hold, error) {
	v := b.observe()
	if err := b.lost(s, v); err != nil {
		return nil, err
	}
	if !b.set.ContinueWhileSuspended {
		if !v.connected() {
			if hk := b.hooks.Load(); hk != nil && hk.awaitingConnection != nil {
				hk.awaitingConnection()
			}
			if err := b.waitConnected(ctx, s.k.Deadline()); err != nil {
				switch {
				case ctx.Err() != nil:
					return nil, context.Cause(ctx) // the caller's, not a loss
				case errors.Is(err, zkgo.ErrClosing):
					return nil, baton.ErrClosed
				}
				return nil, fmt.Errorf("%w: %w: the connection did not come back while acquiring", baton.ErrLeaseLost, ErrSuspended)
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
// again), and with an error when ctx ends or the session is lost. A
// disconnection alone does not end the wait: go-zookeeper sets the watch
// again on reconnection, and the session may well survive.
func (b *backend) waitPredecessor(ctx context.Context, s *session, ours, pred string) (gone bool, err error) {
	w, ok, err := b.watchNode(ctx, pred)
	if err != nil {
		return false, err
	}
	if !ok {
		return true, nil // gone already
	}
	start := b.observe()
	for {
		v := b.observe()
		if err := b.lost(s, v); err != nil {
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
				if err := b.lost(s, b.observe()); err != nil {
					return false, err
				}
			}
			return ev.Type == zkgo.EventNodeDeleted, nil
		case <-v.changed:
		case <-s.k.Done():
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
}
