package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
	"github.com/baton-go/baton/internal/nilval"
)

// Check raises the fence for resource to token inside the caller's
// transaction tx, when token is at least as new as the newest token seen,
// and otherwise returns a *baton.StaleTokenError. Run it before the
// transaction's writes, and commit them only if it returned nil; when one
// of them fails, roll tx back and run nothing more in it (SQLite may have
// rolled it back already: see WithTx). SQLite has
// one writer at a time: from this write until tx ends, tx holds the
// database's write lock, so no other holder can raise the fence while these
// writes are uncommitted. resource must be a valid lock name
// (baton.ValidateName) and token positive. tx must be the transaction the
// writes run in: a *sql.DB or a *sql.Conn is refused with an error
// matching baton.ErrInvalidOption, as the check would end with its own
// statement (database/sql cannot tell whether a *sql.Conn is in a
// transaction begun with a BEGIN statement, so none is taken), and so is
// a nil tx.
func (s *Store) Check(ctx context.Context, tx Querier, resource string, token baton.Token) error {
	if what, isNil := nilval.Of(tx); isNil {
		return &baton.OptionError{Option: "fence check querier", Value: what, Reason: "pass the *sql.Tx the writes run in (db.BeginTx), or use WithTx"}
	}
	switch tx.(type) {
	case *sql.DB:
		return &baton.OptionError{Option: "fence check querier", Value: "*sql.DB", Reason: "pass the *sql.Tx the writes run in: on a *sql.DB the check ends with its own statement, and the writes after it are not fenced (or use WithTx)"}
	case *sql.Conn:
		return &baton.OptionError{Option: "fence check querier", Value: "*sql.Conn", Reason: "pass the *sql.Tx the writes run in (conn.BeginTx): outside a transaction the check ends with its own statement, and the writes after it are not fenced (or use WithTx)"}
	}
	return s.check(ctx, tx, resource, token)
}

// check is Check on any querier: in a transaction, or alone (Raise).
func (s *Store) check(ctx context.Context, tx Querier, resource string, token baton.Token) error {
	if err := fencesql.ValidateToken(resource, token); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, s.sql.raise, resource, int64(token))
	if err != nil {
		return s.wrap(ctx, fmt.Sprintf("check fence %q for token %d", resource, token), err, hintNotDone)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("check fence %q for token %d: count the changed rows: %w", resource, token, err)
	}
	if n == 1 {
		return nil
	}
	return s.stale(ctx, tx, resource, token)
}

// stale builds the *baton.StaleTokenError for a refused token, reading the
// newest token with q. If that read fails, the error still matches
// baton.ErrStaleToken, and says that the newest token is unknown.
func (s *Store) stale(ctx context.Context, q Querier, resource string, token baton.Token) error {
	var newest int64
	if err := q.QueryRowContext(ctx, s.sql.newest, resource).Scan(&newest); err != nil {
		return fencesql.StaleUnread(resource, token,
			s.wrap(ctx, fmt.Sprintf("read the newest token of fence %q", resource), err, hintNotDone))
	}
	return &baton.StaleTokenError{Resource: resource, Got: token, Newest: baton.Token(newest)}
}

// Raise raises the fence for resource to token in a transaction of its own:
// token is accepted when it is at least as new as the newest token seen,
// and otherwise gets a *baton.StaleTokenError. It implements baton.Fence.
func (s *Store) Raise(ctx context.Context, resource string, token baton.Token) error {
	return s.check(ctx, s.db, resource, token)
}

// WithTx runs fn in a transaction that begins with Check(resource, token)
// and commits when fn returns nil. A stale token returns the
// *baton.StaleTokenError without calling fn. When the check or fn fails, or
// fn panics, the transaction is rolled back, so nothing fn wrote is kept. fn
// must use tx for its writes, and must not commit or roll it back. fn's
// error is returned as is.
//
// fn must return the error of any statement of tx that fails, and run no
// more statements after one. Some failures (a statement interrupted
// because its context ended, an I/O error, a full disk, no memory) make
// SQLite roll back the whole transaction, fence check included, while
// database/sql still takes tx for open: statements fn runs after that
// commit each on their own, outside the fence, and nothing can stop them.
// WithTx then finds no transaction to commit, and returns an error that
// says so and that those writes may have been committed.
//
// Inside fn, use tx for every write of the database. SQLite locks the
// whole database for a writer, and fn's transaction holds that lock from
// its start: a call of the Store's made inside fn (Raise, Insert,
// MarkDone, a nested WithTx) runs on another connection and waits for fn's
// transaction, until the busy timeout ends it with an error wrapping
// baton.ErrUnavailable. On a *sql.DB limited to one connection
// (SetMaxOpenConns(1)) even the Store's reads (Newest, Done, List) made
// inside fn wait, for a connection, until their ctx ends.
func (s *Store) WithTx(ctx context.Context, resource string, token baton.Token, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := fencesql.ValidateToken(resource, token); err != nil {
		return err
	}
	op := fmt.Sprintf("fenced transaction on %q with token %d", resource, token)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(ctx, op+": begin", err, hintNotDone)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback() // only fails if the transaction already ended
		}
	}()
	if err := s.Check(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		if noTransaction(err) {
			return fmt.Errorf("%s: commit: %w; %s", op, err, hintRolledBack)
		}
		return s.wrap(ctx, op+": commit", err, hintNotDone)
	}
	return nil
}

// Newest returns the newest token the fence for resource has accepted, or
// zero if it has never been raised.
func (s *Store) Newest(ctx context.Context, resource string) (baton.Token, error) {
	if err := baton.ValidateName(resource); err != nil {
		return 0, err
	}
	var newest int64
	err := s.db.QueryRowContext(ctx, s.sql.newest, resource).Scan(&newest)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, s.wrap(ctx, fmt.Sprintf("read the newest token of fence %q", resource), err, hintOpen)
	}
	return baton.Token(newest), nil
}
