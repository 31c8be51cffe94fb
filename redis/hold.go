package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/keeper"
)

// hold is one held lock key, renewed by its own keeper.
type hold struct {
	b     *backend
	k     keys
	value string
	kp    *keeper.Keeper

	refused atomic.Pointer[error] // a renewal's refusal, answered before the local deadline: the key was not ours

	endOnce sync.Once
	endErr  error
}

func newHold(b *backend, k keys, value string, sent time.Time) *hold {
	h := &hold{b: b, k: k, value: value}
	h.kp = b.sched.Start(sent, b.cfg, h.renew, keeper.OnLoss(func() { b.untrack(h) }))
	return h
}

func (h *hold) Key() string        { return h.k.lock }
func (h *hold) Token() baton.Token { return 0 }
func (h *hold) Err() error         { return h.kp.Err() }

// Context is cancelled when the hold is lost or released: the keeper's.
func (h *hold) Context() context.Context { return h.kp.Context() }
func (h *hold) Deadline() time.Time      { return h.kp.Deadline() }

// renew is the keeper's RenewFunc: compare-and-PEXPIRE. A refusal (the key
// expired, was deleted, or holds another value) or a failure (an error, no
// answer within the request timeout) ends the lease at once: without a
// fencing token, a holder that cannot confirm its key stops rather than
// hope. The keeper bounds a renewal by the local deadline, even on a client
// that does not honour context deadlines.
func (h *hold) renew(ctx context.Context) error {
	octx, cancel := h.b.op(ctx)
	defer cancel()
	n, err := renewScript.Run(octx, h.b.client, []string{h.k.lock}, h.value, h.b.ttlMS()).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("%w: renewal failed: %w", baton.ErrLeaseLost, h.b.unavailable(ctx, "renew "+h.k.lock, err, h.b.cfg.RequestTimeout))
	case n != 1:
		err := fmt.Errorf("%w: key %s no longer holds this lease's value: it expired, or was deleted or taken by another client", baton.ErrLeaseLost, h.k.lock)
		if d, bounded := ctx.Deadline(); !bounded || time.Now().Before(d) { // the keeper's: the local deadline; after it, the key may just have run out
			h.refused.Store(&err)
		}
		return err
	}
	return nil
}

// Release deletes the key if it still holds our value (compare-and-delete)
// and hands the lock to the first waiter. Releasing a lost hold returns its loss
// (see baton.Hold).
func (h *hold) Release(ctx context.Context) error { return h.end(ctx, baton.ErrReleased) }

// end frees the key if it is still ours, then stops renewing with cause
// (unless the lease was already lost). The key goes first so the next
// waiter is handed the lock without waiting for the keeper's goroutine to
// exit; a renewal racing with the release is refused and changes nothing
// on the server. A Release that finds the key no longer ours (deleted or
// taken by another client, or expired early, and no renewal has said so
// yet) reports the loss, if its answer came before the local deadline (as
// a renewal confirmed during the release moved it on), or a renewal was
// refused before it: else the key may simply have run out while the
// release was on its way, the work having stopped before. A release that
// fails while a renewal is refused reports that loss too: the key may have
// been gone while the work ran. It runs once.
func (h *hold) end(ctx context.Context, cause error) error {
	h.endOnce.Do(func() {
		lostBefore := h.kp.Err() != nil
		ours, err := h.b.release(ctx, h.k, h.value)
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
				// A renewal found the key not ours while the release,
				// which failed, was on its way: it may have been gone
				// while the work ran (or this release's delete ran and
				// its answer was lost). Report the loss, which may be.
				h.endErr = fmt.Errorf("%w (and the release failed: %v)", *r, err)
			}
		case !ours && cause == baton.ErrReleased && (answered.Before(deadline) || h.refused.Load() != nil):
			h.endErr = fmt.Errorf("%w: key %s no longer held this lease's value at release: it was deleted or taken by another client, or expired early", baton.ErrLeaseLost, h.k.lock)
		}
	})
	return h.endErr
}
