package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
)

// Done reports whether the run runID of resource has been marked done.
func (s *Store) Done(ctx context.Context, resource, runID string) (bool, error) {
	if err := fencesql.ValidateRun(resource, runID); err != nil {
		return false, err
	}
	var done bool
	if err := s.db.QueryRowContext(ctx, s.sql.done, resource, runID).Scan(&done); err != nil {
		return false, s.wrap(ctx, fmt.Sprintf("read run %q of %q", runID, resource), err, hintOpen)
	}
	return done, nil
}

// MarkDone records that the run runID of resource is done, raising the
// fence for resource to token in the same transaction: a holder whose token
// is stale gets a *baton.StaleTokenError and nothing is written. Marking a
// run done again is not an error.
func (s *Store) MarkDone(ctx context.Context, resource, runID string, token baton.Token) error {
	if err := fencesql.ValidateRun(resource, runID); err != nil {
		return err
	}
	return s.WithTx(ctx, resource, token, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.sql.markDone, resource, runID, int64(token)); err != nil {
			return s.wrap(ctx, fmt.Sprintf("mark run %q of %q done with token %d", runID, resource, token), err, hintNotDone)
		}
		return nil
	})
}
