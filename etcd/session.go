package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/keeper"
)

// session is one etcd lease that many lock keys may share, kept alive by a
// keeper.Keeper.
//
// Why not concurrency.Session: it renews through the client's KeepAlive
// stream, which reports a lease's end only after the deadline computed from
// the *receipt* of the last keep-alive response, checked every 500ms. By
// then the server may already have expired the lease and handed the lock to
// someone else. The keeper renews with KeepAliveOnce and counts the deadline
// from the *send* time of the last confirmed renewal, minus the drift
// margin, so the holder learns of the end before the server can act on it.
//
// A session is retired when a request on it may still land and leave a key
// nobody tracks: a create whose answer was lost (a copy held up in the
// network can be applied after the delete that cleaned up after it), or a
// delete that failed. A retired session takes no new acquisition, and once
// its last user is gone (the acquisitions in progress on it, and the holds
// not yet released) its lease is revoked, which deletes every key on it,
// strays included. A session lost by its local deadline is revoked the
// same way: a renewal nobody heard back from may have kept its lease alive
// on the server for a whole TTL.
type session struct {
	id   clientv3.LeaseID
	sent time.Time // when its grant was sent
	k    *keeper.Keeper

	// Guarded by the backend's mu.
	users   int  // acquisitions in progress on it, and holds not yet released
	retired bool // no new acquisition joins it
	revoked bool // its revoke was sent, or it needs none
}

// errRetired stops the keeper of a retired session whose last user left.
var errRetired = errors.New("session retired: a request on it had an unknown outcome")

// session returns the live session, granting a new lease when there is none
// or the last one ended or was retired, and counts the caller among its
// users until it calls leave. A dead session is never reused (etcd issue
// 19597). One grant is in flight at a time, sent without b.mu held: the
// acquisitions that come meanwhile wait for it, each for as long as its
// own ctx lets it, and share its failure unless the failure was its
// sender's ctx ending; a release or a Close does not wait behind it.
func (b *backend) session(ctx context.Context) (*session, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, baton.ErrClosed
		}
		if s := b.sess; s != nil {
			select {
			case <-s.k.Done():
				b.revokeIfDone(s) // dead, perhaps unused: let it go
				b.sess = nil
			default:
				s.users++
				b.mu.Unlock()
				return s, nil
			}
		}
		if g := b.granting; g != nil {
			b.mu.Unlock()
			select {
			case <-g.done:
				if g.err != nil {
					return nil, g.err
				}
				continue // granted, or its sender gave up: look again
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		gctx, cancel := context.WithCancel(ctx)
		g := &grant{done: make(chan struct{}), cancel: cancel}
		b.granting = g
		b.mu.Unlock()
		s, err := b.grant(gctx)
		cancel()
		b.mu.Lock()
		b.granting = nil
		if b.closed {
			// Close began meanwhile, did not see s, and waits for done:
			// the lease must not outlive it, nor the client it closes.
			b.mu.Unlock()
			if s != nil {
				b.revokeLease(ctx, s.id)
			}
			close(g.done)
			return nil, baton.ErrClosed
		}
		if err != nil && ctx.Err() == nil {
			g.err = err // the service's failure, not the sender's leaving
		}
		close(g.done)
		if err != nil {
			b.mu.Unlock()
			return nil, err
		}
		s.users = 1
		s.k = keeper.Start(s.sent, b.cfg, b.renewer(s.id))
		b.sess = s
		b.sessions[s] = struct{}{}
		b.mu.Unlock()
		return s, nil
	}
}

// grant is a lease grant in flight (see session).
type grant struct {
	done   chan struct{}      // closed when it ended
	err    error              // set before done closes: the service's failure, shared with the waiters
	cancel context.CancelFunc // ends it, for Close
}

// grant asks for a new lease of the backend's TTL and returns it as a
// session not yet kept alive, with the grant's send time.
func (b *backend) grant(ctx context.Context) (*session, error) {
	octx, cancel := b.op(ctx)
	defer cancel()
	if hk := b.hooks.Load(); hk != nil && hk.grantSent != nil {
		hk.grantSent()
	}
	sent := time.Now()
	resp, err := b.client.Grant(octx, b.ttlSec)
	if err != nil {
		return nil, b.fail(ctx, "grant lease", err)
	}
	if resp.TTL != b.ttlSec {
		b.revokeLease(ctx, resp.ID)
		return nil, &baton.OptionError{Option: "ttl", Value: b.cfg.TTL.String(), Reason: fmt.Sprintf("the etcd server at %s grants leases of at least %ds; use --ttl %ds or more", b.where, resp.TTL, resp.TTL)}
	}
	return &session{id: resp.ID, sent: sent}, nil
}

// revokeLease revokes a lease no session keeps, bounded by the request
// timeout, also when ctx has ended: unrevoked, it would last its TTL.
func (b *backend) revokeLease(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := b.op(context.WithoutCancel(ctx))
	defer cancel()
	_, _ = b.client.Revoke(rctx, id)
}

// retire takes s out of service: the next acquisition gets a new lease,
// and s is revoked once its last user leaves.
func (b *backend) retire(s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !s.retired {
		b.cfg.Logger.Debug("retiring the etcd session: a request on it had an unknown outcome", "lease", int64(s.id))
	}
	s.retired = true
	if b.sess == s {
		b.sess = nil
	}
	b.revokeIfDone(s)
}

// leave drops one user of s (an acquisition that ended without a hold, a
// released hold), and revokes s in the background when that was its last
// one and it is retired or lost by its local deadline.
func (b *backend) leave(s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s.users--
	b.revokeIfDone(s)
}

// revokeIfDone starts revoking s when it has no user left and must not
// live on: retired, or lost by its local deadline. A session whose lease
// the server refused (expired, revoked) needs nothing. b.mu is held.
func (b *backend) revokeIfDone(s *session) {
	if s.users > 0 || s.revoked || b.closed {
		return
	}
	dead := false
	select {
	case <-s.k.Done():
		dead = true
	default:
	}
	if !dead && !s.retired {
		return // in service
	}
	s.revoked = true
	delete(b.sessions, s)
	if b.sess == s {
		b.sess = nil
	}
	if dead && !errors.Is(s.k.Err(), keeper.ErrDeadline) {
		return // refused by the server: nothing left to revoke
	}
	// Close lets the revoke of a retired session finish, but not that of
	// one lost by its deadline: its server let the renewals go unanswered,
	// and would most likely only make Close wait (see close).
	ctx := context.Background()
	if dead {
		ctx = b.bgCtx
	}
	b.bg.Go(func() {
		if err := s.revoke(ctx, b, errRetired); err != nil && ctx.Err() == nil {
			b.cfg.Logger.Warn("could not revoke a retired etcd session; its keys end with its lease, within one TTL", "lease", int64(s.id), "err", err)
		}
	})
}

// renewer renews the session's lease. Each renewal is bounded by the
// request timeout as well as by the local deadline (ctx): a member that
// holds it (one cut off from its leader waits for its own request timeout,
// about 7s) fails that renewal only, and the Keeper's next try, soon after,
// goes out on the client's next endpoint, while the deadline leaves time.
func (b *backend) renewer(id clientv3.LeaseID) keeper.RenewFunc {
	return func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
		defer cancel()
		_, err := b.client.KeepAliveOnce(rctx, id)
		switch {
		case err == nil:
			return nil
		case isLeaseGone(err):
			return fmt.Errorf("%w: etcd lease %x not found: it expired or was revoked", baton.ErrLeaseLost, int64(id))
		case ctx.Err() != nil:
			return fmt.Errorf("renew lease: no answer before the local deadline: %w", err)
		default:
			return b.unavailable(context.Background(), "renew lease", err)
		}
	}
}

// close stops renewing and revokes the lease, deleting every key on it. A
// session already lost is not revoked: its lease was refused or could not
// be renewed in time, and a server that did not answer then would only
// make Close wait.
func (s *session) close(b *backend) error {
	select {
	case <-s.k.Done():
		return nil
	default:
	}
	return s.revoke(context.Background(), b, baton.ErrClosed)
}

// revoke stops renewing with cause and revokes the lease, within the
// release timeout or until ctx ends. A revoke given up leaves the
// session's keys, and so their locks, taken until the lease runs out.
func (s *session) revoke(ctx context.Context, b *backend, cause error) error {
	s.k.Stop(cause)
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := b.client.Revoke(ctx, s.id); err != nil && !isLeaseGone(err) {
		return b.failWithin(context.Background(), "revoke lease", err, b.cfg.ReleaseTimeout)
	}
	return nil
}
