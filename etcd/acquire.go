package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/holderval"
)

// Acquire implements baton.Backend.
//
// Every acquisition creates its own key, PREFIX/NAME/LEASE-SEQ, on the
// session's lease, so two acquisitions in one process exclude each other
// like two processes (concurrency.Mutex keys by lease alone, which lets two
// goroutines sharing a session both "hold" it: etcd issue 11360). The key
// with the lowest create revision holds the lock; the others wait in create
// revision order, each watching only its predecessor.
func (b *backend) Acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	h, err := b.acquireOnSession(ctx, req)
	if errors.Is(err, errStaleSession) {
		// The session's lease was gone before our create (revoked by
		// another client, or ended unseen): we held nothing, so once
		// more, on a new session.
		h, err = b.acquireOnSession(ctx, req)
	}
	return h, err
}

// errStaleSession marks an acquisition whose create found its session's
// lease gone.
var errStaleSession = errors.New("the session lease ended before the lock key was created")

// acquireOnSession is one acquisition on the current session.
func (b *backend) acquireOnSession(ctx context.Context, req baton.Request) (baton.Hold, error) {
	s, err := b.session(ctx)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// Ended as the session came: sending the create now would only
		// fail, and abandoning a key never sent retires the session.
		b.leave(s)
		return nil, context.Cause(ctx)
	}
	// No request may hold an acquisition past its session's end.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.k.Context(), func() { cancel(errSessionEnded) })
	defer stop()
	var h baton.Hold
	defer func() {
		if h == nil {
			b.leave(s) // a hold stays a user of s until released
		}
	}()
	h, err = b.acquire(sctx, s, req)
	if err != nil && !errors.Is(err, errStaleSession) && errors.Is(context.Cause(sctx), errSessionEnded) {
		return nil, fmt.Errorf("session ended while acquiring: %w", s.k.Err())
	}
	return h, err
}

// errSessionEnded cancels the requests of an acquisition whose session
// ended.
var errSessionEnded = errors.New("session ended")

func (b *backend) acquire(ctx context.Context, s *session, req baton.Request) (baton.Hold, error) {
	pfx := b.lockPrefix(req.Name)
	key := fmt.Sprintf("%s%x-%d", pfx, int64(s.id), b.seq.Add(1))

	// One round trip: create our key and read the first key by create
	// revision. When that is ours, the lock is held.
	put := clientv3.OpPut(key, string(holderval.Encode(req.Holder)), clientv3.WithLease(s.id))
	first := clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)
	octx, cancel := b.op(ctx)
	txn := b.client.Txn(octx)
	if req.Wait {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(put, first)
	} else {
		// Only on a lock without keys (a range compare on no key holds): a
		// TryAcquire that finds the lock held writes nothing. Its key
		// queued for a moment would be first in line once the holder left,
		// and an observer, Leader or a forced release would take it for
		// the holder's. Else read the holder, and whether our key is there
		// (a retry of our own create, whose first answer was lost).
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()).
			Then(put, first).
			Else(first, clientv3.OpGet(key, clientv3.WithCountOnly()))
	}
	resp, err := txn.Commit()
	cancel()
	if err != nil {
		if isLeaseGone(err) {
			s.k.Lose(fmt.Errorf("etcd lease %x not found when creating %s", int64(s.id), key))
			return nil, fmt.Errorf("%w: %w", baton.ErrLeaseLost, errStaleSession)
		}
		// The create may have been applied though its answer was lost
		// (the caller gave up, the connection broke): the key would then
		// hold or queue for the lock until the session ends. It is ours
		// alone, so delete it either way, unless the session ended: the
		// lease's end takes the key with it, and a delete through the
		// connection that just failed would hold the caller up to the
		// release timeout. A copy of the create held up in the network
		// may still be applied after that delete (see abandonKey).
		// A refusal (permission denied, a request too large) applied
		// nothing: no key to abandon, and no session to retire for it.
		if ctx.Err() == nil {
			if rerr := b.refusal("create lock key", err); rerr != nil {
				return nil, rerr
			}
		}
		select {
		case <-s.k.Done():
		default:
			b.abandonKey(ctx, s, key)
		}
		return nil, b.fail(ctx, "create lock key", err)
	}
	if !resp.Succeeded && (req.Wait || resp.Responses[1].GetResponseRange().Count > 0) {
		// The key is unique to this attempt, so only a retry of our own
		// create (whose first answer was lost) finds it: it is ours, and
		// another copy may still come (see above).
		b.abandonKey(ctx, s, key)
		return nil, b.fail(ctx, "create lock key", fmt.Errorf("key %s already exists (a retried request?); deleted it", key))
	}
	if !resp.Succeeded { // a TryAcquire on a held lock: nothing written
		owner := resp.Responses[0].GetResponseRange().Kvs
		if len(owner) == 0 { // the compare saw a key in the same revision: never
			return nil, b.fail(ctx, "create lock key", fmt.Errorf("no key under %s, though the transaction found one", pfx))
		}
		return nil, &baton.NotAcquiredError{Name: req.Name, Holder: decodeValue(owner[0].Value).Holder, Token: baton.Token(owner[0].CreateRevision)}
	}
	rev := resp.Header.Revision
	owner := resp.Responses[1].GetResponseRange().Kvs
	if len(owner) == 0 || owner[0].CreateRevision == rev {
		return b.held(s, key, rev)
	}
	if err := b.wait(ctx, s, pfx, key, rev); err != nil {
		select {
		case <-s.k.Done(): // the lease's end takes the key with it
		default:
			b.deleteKey(ctx, s, key)
		}
		return nil, err
	}
	return b.held(s, key, rev)
}

// held makes the hold for key, unless the session ended meanwhile.
func (b *backend) held(s *session, key string, rev int64) (baton.Hold, error) {
	select {
	case <-s.k.Done():
		b.deleteKey(context.Background(), s, key)
		return nil, fmt.Errorf("session ended as the lock was granted: %w", s.k.Err())
	default:
	}
	h := newHold(b, s, key, rev)
	if !b.track(h) { // Close, which ran, did not see this hold: nothing follows it yet
		h.lose(baton.ErrClosed)
		h.cancel()
		b.deleteKey(context.Background(), s, key)
		return nil, baton.ErrClosed
	}
	if hk := b.hooks.Load(); hk != nil && hk.tracked != nil {
		hk.tracked(key, s.k.Done())
	}
	if hk := b.hooks.Load(); hk != nil && hk.made != nil {
		hk.made(h)
	}
	h.start()
	return h, nil
}

// wait blocks until no key on pfx has a create revision below rev. It
// returns an error matching baton.ErrLeaseLost as soon as the session ends
// or our key disappears, never "acquired" on a dead session (etcd issue
// 19597), and context.Cause(ctx) when ctx ends.
//
// concurrency.Mutex watches its predecessor from a revision the server
// already has, so the server serves that watch from its 100ms catch-up loop
// and every handoff waits for it. Here the watch starts at the current
// revision (served at once when the key is deleted), and only then do we
// check that the predecessor still exists, so no deletion is missed; that
// check is skipped (one round trip less) when the watch started at the
// revision at which we saw the predecessor, since it then sees everything
// that happened to it after.
func (b *backend) wait(ctx context.Context, s *session, pfx, key string, rev int64) error {
	for tries := 0; ; {
		// Our key must still be there; find the last key before it.
		octx, cancel := b.op(ctx)
		resp, err := b.client.Txn(octx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpGet(pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...)).
			Commit()
		cancel()
		if err != nil {
			// A read, safe to send again: a waiter keeps its place in
			// line while its session lives, through a read that had no
			// answer (an endpoint gone silent, a leader election).
			ferr := b.fail(ctx, "find predecessor", err)
			if !errors.Is(ferr, baton.ErrUnavailable) {
				return ferr
			}
			if err := b.readAgain(ctx, s, tries); err != nil {
				return err
			}
			tries++
			continue
		}
		tries = 0
		if !resp.Succeeded {
			select {
			case <-s.k.Done():
				return fmt.Errorf("session ended while waiting: %w", s.k.Err())
			default:
				return fmt.Errorf("%w: lock key %s was deleted while waiting", baton.ErrLeaseLost, key)
			}
		}
		preds := resp.Responses[0].GetResponseRange().Kvs
		if len(preds) == 0 {
			return nil
		}
		if err := b.waitDelete(ctx, s, string(preds[0].Key), preds[0].CreateRevision, resp.Header.Revision); err != nil {
			return err
		}
	}
}

// readAgain waits before a waiter's read that failed for want of an
// answer is sent again: 50ms, doubling with each try, at most RenewEvery.
// It fails when ctx or the session ends first.
func (b *backend) readAgain(ctx context.Context, s *session, tries int) error {
	t := time.NewTimer(min(b.cfg.RenewEvery, 50*time.Millisecond<<min(tries, 10)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-s.k.Done():
		return fmt.Errorf("session ended while waiting: %w", s.k.Err())
	}
}

// waitDelete returns when key (created at rev, and still there at revision
// seen) is gone, or may be: the caller looks again.
//
// It also looks at key itself every RenewEvery. clientv3 puts all of a
// client's watches on one gRPC stream, to one endpoint: when that endpoint
// goes silent (a host that died, packets dropped with no reset), the watch
// hears nothing, and WithRequireLeader cannot end it, for as long as TCP
// takes to give up (minutes), while reads go to the other endpoints. A
// Locker from Dial pings its connections (see keepAliveTime); one from
// New has what the caller's client has.
func (b *backend) waitDelete(ctx context.Context, s *session, key string, rev, seen int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := b.client.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithCreatedNotify())
	look := time.NewTicker(b.cfg.RenewEvery)
	defer look.Stop()

	created := false
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-s.k.Done():
			return fmt.Errorf("session ended while waiting: %w", s.k.Err())
		case <-look.C:
			if gone, err := b.gone(ctx, key, rev); err != nil || gone {
				return nil // the caller looks again, and reads again after a failure
			}
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return nil // the caller looks again
			}
			if wr.Created && !created {
				created = true
				// The watch sees every change after the revision its
				// created response reports. When that is no later than
				// seen, it covers all that can have happened to the key
				// since we saw it; otherwise check the key was not
				// deleted before the watch started, nor deleted and made
				// again (etcd's concurrency.Mutex, which shares the
				// layout, keeps one key name per session: a holder that
				// locks again makes the name anew, behind us).
				if wr.Header.Revision > seen {
					if gone, err := b.gone(ctx, key, rev); err != nil || gone {
						return nil // the caller looks again, and reads again after a failure
					}
				}
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != rev {
					return nil
				}
			}
		}
	}
}

// gone reports whether key, created at rev, is gone (or was made again).
func (b *backend) gone(ctx context.Context, key string, rev int64) (bool, error) {
	octx, cancel := b.op(ctx)
	defer cancel()
	g, err := b.client.Get(octx, key, clientv3.WithKeysOnly())
	if err != nil {
		return false, err
	}
	return len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != rev, nil
}

// abandonKey cleans up after a create of key on s whose outcome is
// unknown: a copy of it held up in the network may still be applied after
// the delete. So s is retired (its lease goes once its other users are
// done), and key is deleted now and again for one TTL (sweepLate).
func (b *backend) abandonKey(ctx context.Context, s *session, key string) {
	b.retire(s)
	b.deleteKey(ctx, s, key)
	b.sweepLate(s, key)
}

// sweepLate deletes key again every RenewEvery for one TTL, in the
// background: a copy of its create held up in the network may be applied
// after the delete that cleaned up after it, while s, retired, still
// lives on for the other locks it holds.
func (b *backend) sweepLate(s *session, key string) {
	b.redelete(s, key, 0, b.cfg.TTL+b.cfg.RenewEvery) // the last tick too
}

// deleteKey removes key, on session s, on a detached, bounded context:
// cleanup must happen even when the caller gave up. When it fails, s is
// retired, so that the key goes with s's lease once s has no other user.
func (b *backend) deleteKey(ctx context.Context, s *session, key string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := b.client.Delete(dctx, key); err != nil {
		b.retire(s)
		b.retryDelete(s, key, 0)
		b.cfg.Logger.Warn("could not delete lock key; trying again while its session lives", "key", key, "err", err)
	}
}

// retryDelete deletes key again every RenewEvery, in the background, until
// a delete gets through, the session ends (its lease takes the key with
// it) or the backend closes: a delete that failed (an outage) would
// otherwise leave key first in line for as long as another lock of the
// Locker keeps s alive (a leader's, for days). With rev, only while the
// key is the one made at rev; without, the key name is s's, retired, which
// no later acquisition uses again.
func (b *backend) retryDelete(s *session, key string, rev int64) {
	b.redelete(s, key, rev, 0)
}

// redelete deletes key (by create revision rev, unless 0) every
// RenewEvery in a goroutine the backend owns, until the session ends or
// the backend closes; and then for span when not 0, or else until a
// delete gets through.
func (b *backend) redelete(s *session, key string, rev int64, span time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.bg.Go(func() {
		tick := time.NewTicker(b.cfg.RenewEvery)
		defer tick.Stop()
		var end <-chan time.Time // nil: no end but success
		if span > 0 {
			t := time.NewTimer(span)
			defer t.Stop()
			end = t.C
		}
		for {
			select {
			case <-b.bgCtx.Done():
				return
			case <-s.k.Done(): // the lease's end takes the key with it
				return
			case <-end:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(b.bgCtx, b.cfg.RequestTimeout)
			var err error
			if rev != 0 {
				_, err = b.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
			} else {
				_, err = b.client.Delete(ctx, key)
			}
			cancel()
			if err == nil && span == 0 {
				return
			}
		}
	})
}
