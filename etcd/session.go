package etcd

import (
	"context"
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
type session struct {
	id clientv3.LeaseID
	k  *keeper.Keeper
}

// session returns the live session, granting a new lease when there is none
// or the last one ended. A dead session is never reused (etcd issue 19597).
func (b *backend) session(ctx context.Context) (*session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, baton.ErrClosed
	}
	if s := b.sess; s != nil {
		select {
		case <-s.k.Done():
		default:
			return s, nil
		}
	}
	octx, cancel := b.op(ctx)
	defer cancel()
	sent := time.Now()
	resp, err := b.client.Grant(octx, b.ttlSec)
	if err != nil {
		return nil, b.fail(ctx, "grant lease", err)
	}
	if resp.TTL != b.ttlSec {
		rctx, rcancel := b.op(context.WithoutCancel(ctx))
		_, _ = b.client.Revoke(rctx, resp.ID)
		rcancel()
		return nil, &baton.OptionError{Option: "ttl", Value: b.cfg.TTL.String(), Reason: fmt.Sprintf("the etcd server at %s grants leases of at least %ds; use --ttl %ds or more", b.where, resp.TTL, resp.TTL)}
	}
	s := &session{id: resp.ID}
	s.k = keeper.Start(sent, b.cfg, b.renewer(resp.ID))
	b.sess = s
	return s, nil
}

func (b *backend) renewer(id clientv3.LeaseID) keeper.RenewFunc {
	return func(ctx context.Context) error {
		_, err := b.client.KeepAliveOnce(ctx, id)
		switch {
		case err == nil:
			return nil
		case isLeaseGone(err):
			return fmt.Errorf("%w: etcd lease %x not found: it expired or was revoked", baton.ErrLeaseLost, int64(id))
		case ctx.Err() != nil:
			return fmt.Errorf("renew lease: no answer before the local deadline: %w", err)
		default:
			return b.fail(context.Background(), "renew lease", err)
		}
	}
}

// close stops renewing and revokes the lease, deleting every key on it. A
// session already lost is not revoked: its lease expired or cannot be
// reached, and trying would only make Close wait.
func (s *session) close(b *backend) error {
	select {
	case <-s.k.Done():
		return nil
	default:
	}
	s.k.Stop(baton.ErrClosed)
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := b.client.Revoke(ctx, s.id); err != nil && !isLeaseGone(err) {
		return b.fail(context.Background(), "revoke lease", err)
	}
	return nil
}
