package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton"
	"github.com/jackc/pgx/v5"
)

// rollbackTimeout bounds the rollback that ends a failed transaction; it
// runs detached from the caller's context, which may be what ended it.
const rollbackTimeout = 5 * time.Second

// WithTx runs fn in a transaction that begins with Check(resource, token)
// and commits when fn returns nil. A stale token returns the
// *baton.StaleTokenError without calling fn. When the check or fn fails, or
// fn panics, the transaction is rolled back, so nothing fn wrote is kept. fn
// must use tx for its writes, and must not commit or roll it back. fn's
// error is returned as is, unless it is a connection failure, which is
// wrapped in a *baton.UnavailableError like the Store's own.
//
// The fence costs one statement in the transaction, and so one round trip:
// BEGIN, the check, fn's statements, COMMIT. Where that round trip matters
// and the write is one row, use Insert.
func (s *Store) WithTx(ctx context.Context, resource string, token baton.Token, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	op := fmt.Sprintf("fenced transaction on %q with token %d", resource, token)
	tx, err := s.begin(ctx, resource, token, op)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			rollback(ctx, tx)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		if connFailure(err) && !errors.Is(err, baton.ErrUnavailable) && ctx.Err() == nil {
			return s.wrap(ctx, op, err, hintNotDone)
		}
		return err
	}
	done = true // Commit ends the transaction whatever it returns
	switch err := tx.Commit(ctx); {
	case errors.Is(err, pgx.ErrTxCommitRollback):
		return fmt.Errorf("%s: commit: %w; a statement in the transaction failed and fn did not return its error, so nothing was written", op, err)
	case err != nil:
		return s.wrap(ctx, op+": commit", err, hintAmbiguous)
	}
	return nil
}

// begin begins a transaction that has passed the fence check.
func (s *Store) begin(ctx context.Context, resource string, token baton.Token, op string) (pgx.Tx, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, s.wrap(ctx, op+": begin", err, hintNotDone)
	}
	if err := s.Check(ctx, tx, resource, token); err != nil {
		rollback(ctx, tx)
		return nil, err
	}
	return tx, nil
}

// rollback ends tx on a context detached from ctx, bounded by
// rollbackTimeout. If it fails, pgx closes the connection, which ends the
// transaction too.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}
