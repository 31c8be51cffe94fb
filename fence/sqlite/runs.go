package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/baton-go/baton"
)

// Done reports whether the run runID of resource has been marked done.
func (s *Store) Done(ctx context.Context, resource, runID string) (bool, error) {
	if err := validateRun(resource, runID); err != nil {
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
	if err := validateRun(resource, runID); err != nil {
		return err
	}
	return s.WithTx(ctx, resource, token, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.sql.markDone, resource, runID, int64(token)); err != nil {
			return s.wrap(ctx, fmt.Sprintf("mark run %q of %q done with token %d", runID, resource, token), err, hintNotDone)
		}
		return nil
	})
}

// validateRun checks a resource name and a run ID: 1 to baton.MaxNameLen
// bytes of UTF-8 without NUL.
func validateRun(resource, runID string) error {
	if err := baton.ValidateName(resource); err != nil {
		return err
	}
	switch {
	case runID == "":
		return &baton.OptionError{Option: "run ID", Value: `""`, Reason: "must not be empty; use one per scheduled run, such as 2026-10-31"}
	case len(runID) > baton.MaxNameLen:
		return &baton.OptionError{Option: "run ID", Value: strconv.Quote(runID[:20] + "…"), Reason: fmt.Sprintf("is %d bytes; the limit is %d", len(runID), baton.MaxNameLen)}
	case !utf8.ValidString(runID):
		return &baton.OptionError{Option: "run ID", Value: strconv.Quote(runID), Reason: "is not valid UTF-8"}
	}
	for i := 0; i < len(runID); i++ {
		if runID[i] == 0 {
			return &baton.OptionError{Option: "run ID", Value: strconv.Quote(runID), Reason: "contains a NUL byte"}
		}
	}
	return nil
}
