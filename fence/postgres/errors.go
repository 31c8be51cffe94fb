package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/pgkit"
)

// MissingTableError says that one of the store's tables does not exist.
type MissingTableError struct {
	Table string // the table's name, as configured
	Where string // host:port/database
}

func (e *MissingTableError) Error() string {
	return fmt.Sprintf("table %q does not exist in %s; create baton's fence tables with `baton fence init --store URL` (or Store.Init, or WithCreate(true))", e.Table, e.Where)
}

// ForeignTableError says that a table of one of the store's names is not
// one the store can use: it lacks a column the store's statements use,
// has one of another type (text or varchar for the names, bigint for the
// tokens, timestamptz for the times), leaves a time without a default,
// has a NOT NULL column without a default that the store's inserts leave
// out, or lacks the primary key or unique constraint their ON CONFLICT
// needs. Something other than baton made it, such as a hand-made
// job_fence (job, last_token). Other columns are fine.
type ForeignTableError struct {
	Table   string // the table's name, as configured
	Where   string // host:port/database
	Column  string // the column at fault; for a missing key, the key's columns ("resource, run_id")
	Problem string // what is wrong, as the message says it: `has no column "resource"`
	Runs    bool   // the table is the runs table, not the fence table
}

func (e *ForeignTableError) Error() string {
	spec := fenceSpec
	if e.Runs {
		spec = runsSpec
	}
	return fmt.Sprintf("table %q in %s %s, so it is not a baton %s table (%s); give the store another table name (%s), or rename or drop this one and create baton's with `baton fence init --store URL` (or Store.Init)",
		e.Table, e.Where, e.Problem, spec.kind, spec.ddl, spec.option)
}

// Hints appended to an *baton.UnavailableError's cause, saying what happened
// to the write and what to do.
const (
	hintConnect   = "check that PostgreSQL is running and that the store URL (host, port, database, user) is right"
	hintNotDone   = "the transaction was not committed, so nothing was written; retry when the server is back"
	hintAmbiguous = "the connection failed during COMMIT, so the transaction may or may not have been committed; check before retrying"
	hintUnknown   = "the statement, a transaction of its own, was cut short by a failed connection or an ended context, so it may or may not have been committed; check before retrying (a retried insert finds its own row there already)"
	hintGaveUp    = "PostgreSQL gave up on it (a lock_timeout or statement_timeout ran out, or a serialization failure or deadlock aborted it; another transaction, such as an older holder's, may hold the fence row), so nothing was written; retry"
)

// stmtHint is the hint for a statement run on q that failed: in a
// transaction, nothing of it was committed; on its own (a pool, a bare
// connection), it may have been.
func stmtHint(q Querier) string {
	if _, ok := q.(pgx.Tx); ok {
		return hintNotDone
	}
	return hintUnknown
}

// wrap adds op's context to err from a statement, classifying it: the
// cause of a cancelled ctx, an *baton.UnavailableError for a connection
// failure, a *MissingTableError when one of the store's tables is missing.
// Errors already classified (stale token, unavailable, invalid option) are
// only given context.
func (s *Store) wrap(ctx context.Context, op string, err error, hint string) error {
	if ctx.Err() != nil {
		if hint != hintNotDone && hint != hintConnect {
			return fmt.Errorf("%s: %w (%s)", op, context.Cause(ctx), hint)
		}
		return fmt.Errorf("%s: %w", op, context.Cause(ctx))
	}
	if errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrStaleToken) || errors.Is(err, baton.ErrInvalidOption) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if pgkit.ConnFailure(err) {
		return fmt.Errorf("%s: %w", op, &baton.UnavailableError{Where: s.where, Err: fmt.Errorf("%w; %s", err, hint)})
	}
	if pgkit.GaveUp(err) {
		return fmt.Errorf("%s: %w", op, &baton.UnavailableError{Where: s.where, Err: fmt.Errorf("%w; %s", err, hintGaveUp)})
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		for _, t := range []string{s.cfg.table, s.cfg.runs} {
			if t != "" && strings.Contains(pgErr.Message, strconv.Quote(t)) {
				return fmt.Errorf("%s: %w", op, &MissingTableError{Table: t, Where: s.where})
			}
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}
