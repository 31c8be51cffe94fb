package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/keeper"
)

// hold is one held lease row, renewed by its own keeper. It is lost when a
// renewal is refused (the row holds another token, or its expiry passed by
// the database's clock) or when the local deadline passes without a
// confirmed renewal.
type hold struct {
	b     *backend
	name  string
	token baton.Token
	kp    *keeper.Keeper

	endOnce sync.Once
	endErr  error
}

func newHold(b *backend, name string, token baton.Token, sent time.Time) *hold {
	h := &hold{b: b, name: name, token: token}
	h.kp = b.sched.Start(sent, b.cfg, h.renew, keeper.OnLoss(func() { b.untrack(h) }))
	return h
}

func (h *hold) Key() string        { return h.b.n.key(h.name) }
func (h *hold) Token() baton.Token { return h.token }
func (h *hold) Err() error         { return h.kp.Err() }

// Context is cancelled when the hold is lost or released: the keeper's.
func (h *hold) Context() context.Context { return h.kp.Context() }
func (h *hold) Deadline() time.Time      { return h.kp.Deadline() }

// renew is the keeper's RenewFunc: one UPDATE that extends the row's expiry
// from the database's clock, only while the row still holds our token and
// has not expired. ctx ends at the local deadline.
func (h *hold) renew(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, h.b.cfg.RequestTimeout)
	defer cancel()
	tag, err := h.b.pool.Exec(octx, h.b.sql.renew, h.name, int64(h.token), h.b.cfg.TTL)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("renew %q: no answer before the local deadline: %w", h.name, err)
	case err != nil:
		return h.b.unavailable(context.Background(), fmt.Sprintf("renew %q", h.name), err)
	case tag.RowsAffected() == 0:
		return fmt.Errorf("%w: renewal refused: the lease row of %q in %s no longer holds token %d, or its expiry passed by the database's clock", baton.ErrLeaseLost, h.name, h.b.n.table, h.token)
	}
	return nil
}

// Release frees the row if it still holds our token and wakes the first
// waiter. Releasing a lost hold returns its loss (see baton.Hold). A hold whose renewal was
// refused is not freed: its row has expired or holds another token. One
// lost by the local deadline is, as far as the server can be reached
// within the release timeout: the last renewal the holder heard back from
// still keeps the row for the drift margin or longer, and one it never
// heard back from may have committed and keep it for a whole TTL.
func (h *hold) Release(ctx context.Context) error { return h.end(ctx, baton.ErrReleased, true) }

// end stops renewing with cause and, unless the hold was already lost,
// frees the row; a hold lost by its local deadline too when freeLost is
// set (Release; Close does not wait on a server that may be out of reach,
// once per such hold). It runs once.
func (h *hold) end(ctx context.Context, cause error, freeLost bool) error {
	h.endOnce.Do(func() {
		h.kp.Stop(cause)
		h.b.untrack(h)
		lost := !errors.Is(h.kp.Err(), cause)
		if lost && cause == baton.ErrReleased {
			h.endErr = h.kp.Err() // the Lease may have marked itself released first
		}
		if lost && (!freeLost || !errors.Is(h.kp.Err(), keeper.ErrDeadline)) {
			return // refused, or left to expire: nothing to free
		}
		fctx, cancel := context.WithTimeout(ctx, h.b.cfg.ReleaseTimeout)
		defer cancel()
		ours, err := h.b.free(fctx, h.name, h.token)
		switch {
		case lost:
			if err != nil {
				h.b.cfg.Logger.Warn("could not free the row of a lease lost by its local deadline; it ends within one TTL", "lock", h.name, "token", int64(h.token), "err", err)
			}
		case err != nil:
			h.endErr = err
		case !ours && cause == baton.ErrReleased:
			// Found by the release, before any renewal said so.
			h.endErr = fmt.Errorf("%w: the row of %q no longer held token %d at release: it was freed by force, or taken by another holder", baton.ErrLeaseLost, h.name, int64(h.token))
		}
	})
	return h.endErr
}

// free releases the row (name, token) and hands the lock to the first
// waiter, in one round trip and one transaction that holds the row's lock
// throughout: the waiter it picks is read after every queued waiter has
// committed its place, and its NOTIFY is sent when the hand-off commits.
//
// It reports whether the row was still ours: false when it was freed by
// force or held another token (see releaseSQL).
func (b *backend) free(ctx context.Context, name string, token baton.Token) (ours bool, err error) {
	var batch pgx.Batch
	batch.Queue(b.sql.release, name, int64(token)).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&ours); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return nil
	})
	batch.Queue(b.sql.handOff, name)
	if err := b.pool.SendBatch(ctx, &batch).Close(); err != nil {
		return false, b.failWithin(context.Background(), fmt.Sprintf("release %q", name), fmt.Errorf("%w; the lock stays taken until its TTL runs out", err), b.cfg.ReleaseTimeout)
	}
	return ours, nil
}
