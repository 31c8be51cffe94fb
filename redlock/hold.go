package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/keeper"
)

// hold is one lock held on a majority, renewed by its own keeper.
type hold struct {
	b     *backend
	k     keys
	value string
	kp    *keeper.Keeper

	// settled is closed when every node's acquire request has returned,
	// or the node timeout has passed (see eachSettled); the release waits
	// for it, or a late SET on a slow node would land after the release
	// and leave our value there for a whole TTL.
	settled <-chan struct{}

	// olds are values the acquisition gave up (see Acquire) that a node
	// may still queue, or hold the key for: the release frees them too.
	olds []string

	refused atomic.Pointer[error] // a renewal's refusal, answered before the local deadline: the key was not ours

	endOnce sync.Once
	endErr  error
}

func newHold(b *backend, k keys, value string, olds []string, start time.Time, settled <-chan struct{}) *hold {
	h := &hold{b: b, k: k, value: value, olds: olds, settled: settled}
	h.kp = b.sched.Start(start, b.cfg, h.renew, keeper.OnLoss(func() { b.untrack(h) }))
	return h
}

func (h *hold) Key() string        { return h.k.lock }
func (h *hold) Token() baton.Token { return 0 }
func (h *hold) Err() error         { return h.kp.Err() }

// Context is cancelled when the hold is lost or released: the keeper's.
func (h *hold) Context() context.Context { return h.kp.Context() }
func (h *hold) Deadline() time.Time      { return h.kp.Deadline() }

// errRefused marks a node that no longer holds our value.
var errRefused = errors.New("key no longer holds this lease's value")

// renew is the keeper's RenewFunc: compare-and-PEXPIRE on every node in
// parallel. It succeeds when a majority renewed, which extends the lease
// on each of them from a moment no earlier than the send time. It returns
// as soon as the answers settle it: a majority renewed, or so many nodes
// refused or failed that those yet to answer could no longer make one.
// When no majority renewed (so many nodes refused that no majority can
// renew any more, or too few answered), the lease is lost at once; the keeper reports
// a renewal cut off by the local deadline as the deadline.
// A node that lost our key (it restarted, or never had
// it) is not written to: renewal only extends, it never re-acquires.
func (h *hold) renew(ctx context.Context) error {
	_, errs := each(ctx, h.b, min(h.b.cfg.RequestTimeout, h.b.cfg.TTL-h.b.cfg.Drift), func(ctx context.Context, n *node) (struct{}, error) {
		v, err := renewScript.Run(ctx, n.client, []string{h.k.lock}, h.value, h.b.ttlMS()).Int64()
		switch {
		case err != nil:
			return struct{}{}, n.err("renew "+h.k.lock, err)
		case v != 1:
			return struct{}{}, fmt.Errorf("%s: %w", n.where, errRefused)
		}
		return struct{}{}, nil
	}, func(_ []struct{}, errs []error) bool {
		// Settled: a majority renewed, or the nodes yet to answer could
		// no longer make one (refused or failed, the others are enough
		// to deny it).
		ok, pending := 0, 0
		for _, err := range errs {
			switch err {
			case nil:
				ok++
			case errPending:
				pending++
			}
		}
		return ok >= h.b.quorum || ok+pending < h.b.quorum
	})
	ok, refused, pending := 0, 0, 0
	var failed []error
	for _, err := range errs {
		switch {
		case err == errPending:
			pending++
		case err == nil:
			ok++
		case errors.Is(err, errRefused):
			refused++
			failed = append(failed, err)
		default:
			failed = append(failed, err)
		}
	}
	switch {
	case ok >= h.b.quorum:
		if len(failed) > 0 {
			h.b.cfg.Logger.Debug("renewed on a majority", "key", h.k.lock, "renewed", ok, "nodes", len(h.b.nodes), "err", errors.Join(failed...))
		}
		return nil
	case refused > len(h.b.nodes)-h.b.quorum:
		err := fmt.Errorf("%w: %d of %d nodes refused the renewal of %s, so no majority holds it: %w", baton.ErrLeaseLost, refused, len(h.b.nodes), h.k.lock, errors.Join(failed...))
		if d, bounded := ctx.Deadline(); !bounded || time.Now().Before(d) { // the keeper's: the local deadline; after it, the key may just have run out
			h.refused.Store(&err)
		}
		return err
	}
	// Too few answered: without a fencing token, a holder that cannot
	// confirm a majority stops rather than hope (as on one Redis node).
	return fmt.Errorf("%w: %w", baton.ErrLeaseLost, &baton.UnavailableError{Where: h.b.where, Err: fmt.Errorf("renew %s: %d of %d nodes renewed, %d needed (%d not answered): %w", h.k.lock, ok, len(h.b.nodes), h.b.quorum, pending, errors.Join(failed...))})
}

// Release deletes the key on every node where it still holds our value
// (also nodes that failed to answer the acquisition) and wakes each node's
// first waiter. Releasing a lost hold returns its loss
// (see baton.Hold).
func (h *hold) Release(ctx context.Context) error { return h.end(ctx, baton.ErrReleased) }

// end frees the keys, then stops renewing with cause (unless the lease was
// already lost). A Release that finds the lock no longer ours on enough
// nodes to deny it a majority (deleted, taken, expired early), before any
// renewal said so, reports the loss, if the answers came before the local
// deadline (see the redis backend's end). A release that
// fails while a renewal is refused reports that loss too: the key may have
// been gone while the work ran. It runs once.
func (h *hold) end(ctx context.Context, cause error) error {
	h.endOnce.Do(func() {
		<-h.settled
		lostBefore := h.kp.Err() != nil
		notOurs, err := h.b.unlock(ctx, h.k, true, true, h.b.releaseTimeout(), slices.Concat([]string{h.value}, h.olds)...)
		answered := time.Now() // Stop may wait for a renewal in flight
		// A renewal confirmed while the release was on its way moved the
		// deadline on: the key was ours until then.
		deadline := h.kp.Deadline()
		h.kp.Stop(cause)
		h.b.untrack(h)
		switch kerr := h.kp.Err(); {
		case lostBefore:
			if cause == baton.ErrReleased {
				h.endErr = kerr // the Lease may have marked itself released first
			}
		case err != nil:
			h.endErr = err
			if r := h.refused.Load(); r != nil && cause == baton.ErrReleased {
				// Refused renewals during a failed release: the loss may
				// be (see the redis backend's end).
				h.endErr = fmt.Errorf("%w (and the release failed: %v)", *r, err)
			}
		case notOurs > len(h.b.nodes)-h.b.quorum && cause == baton.ErrReleased && (answered.Before(deadline) || h.refused.Load() != nil):
			h.endErr = fmt.Errorf("%w: %s no longer held this lease's value on %d of %d nodes at release: it expired, or was deleted or taken by another client", baton.ErrLeaseLost, h.k.lock, notOurs, len(h.b.nodes))
		}
	})
	return h.endErr
}
