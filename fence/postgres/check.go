package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
	"github.com/baton-go/baton/internal/nilval"
)

// Check raises the fence for resource to token inside the caller's
// transaction tx, when token is at least as new as the newest token seen,
// and otherwise returns a *baton.StaleTokenError. Run it before the
// transaction's writes, and commit them only if it returned nil: the fence
// row stays locked until tx ends, so no newer holder can raise the fence
// while these writes are uncommitted, and a newer holder that already raised
// it makes this check fail. resource must be a valid lock name
// (baton.ValidateName) and token positive.
//
// When the fence already holds exactly token, the usual case for a holder's
// second and later writes, Check only share-locks the row (SELECT ... FOR
// SHARE): transactions with the current token then run side by side, and a
// raise waits for all of them. Otherwise it runs the upsert described in
// the package documentation.
//
// tx must be the transaction the writes run in: a *pgxpool.Pool, or a
// *pgx.Conn or *pgxpool.Conn not in a transaction, is refused with an error matching
// baton.ErrInvalidOption, as the check would end with its own statement;
// so is a nil tx.
// A check that must raise the fence also needs tx to run at READ
// COMMITTED, and is refused the same way in a REPEATABLE READ or
// SERIALIZABLE transaction, whose snapshot, taken at its first statement,
// would not hold what the older holder committed while the raise waited
// for it: raise the fence before such a transaction begins (Raise, or
// FencedLease.Raise), and its checks find the token already there. (Such
// a check asks the transaction's isolation level: a statement more, only
// when it raises the fence.)
func (s *Store) Check(ctx context.Context, tx Querier, resource string, token baton.Token) error {
	if err := needTx(tx); err != nil {
		return err
	}
	if err := fencesql.ValidateToken(resource, token); err != nil {
		return err
	}
	return s.check(ctx, tx, resource, token, false)
}

// check is Check, in a transaction known to run at READ COMMITTED when rc
// is true (WithTx's).
func (s *Store) check(ctx context.Context, tx Querier, resource string, token baton.Token, rc bool) error {
	var one int32
	return s.afterHold(ctx, tx, resource, token, tx.QueryRow(ctx, s.sql.hold, resource, int64(token)).Scan(&one), rc)
}

// needTx refuses the queriers that are known not to be in a transaction,
// and a nil one.
func needTx(q Querier) error {
	what, isNil := nilval.Of(q)
	if isNil {
		return &baton.OptionError{Option: "fence check querier", Value: what, Reason: "pass the pgx.Tx the writes run in, or use WithTx"}
	}
	switch c := q.(type) {
	case *pgxpool.Pool:
		what = "*pgxpool.Pool"
	case *pgx.Conn:
		if c.PgConn().TxStatus() == 'I' {
			what = "*pgx.Conn not in a transaction"
		}
	case *pgxpool.Conn:
		if c.Conn().PgConn().TxStatus() == 'I' {
			what = "*pgxpool.Conn not in a transaction"
		}
	}
	if what == "" {
		return nil
	}
	return &baton.OptionError{Option: "fence check querier", Value: what, Reason: "pass the pgx.Tx the writes run in: outside a transaction the check ends with its own statement, and the writes after it are not fenced (or use WithTx)"}
}

// afterHold finishes a check in tx once the share-locking SELECT (s.sql.hold)
// has run there and its one row was scanned with error holdErr: nil when the
// fence holds exactly token; otherwise the upsert decides, in a
// transaction that runs at READ COMMITTED (rc says it is known to; else it
// is asked).
func (s *Store) afterHold(ctx context.Context, tx Querier, resource string, token baton.Token, holdErr error, rc bool) error {
	switch {
	case holdErr == nil:
		return nil
	case !errors.Is(holdErr, pgx.ErrNoRows):
		return s.wrap(ctx, checkOp(resource, token), holdErr, hintNotDone)
	}
	// The fence holds another token, or none: raise it or be refused.
	if err := s.raise(ctx, tx, resource, token); err != nil || rc {
		return err
	}
	return s.needReadCommitted(ctx, tx, resource, token)
}

// needReadCommitted refuses a raise of the fence in a transaction that
// does not run at READ COMMITTED, for the caller to roll back (a stale
// token was refused before: the raise judged it). Its snapshot was taken
// at its first statement: when the raise then waits for a transaction of
// the older holder to commit, what that one wrote stays out of the
// snapshot, and the caller's writes would build on a state without it.
// The fence's order would hold (those writes committed before the raise),
// but the newer holder would redo or overwrite them unseen.
func (s *Store) needReadCommitted(ctx context.Context, tx Querier, resource string, token baton.Token) error {
	var level string
	if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&level); err != nil {
		return s.wrap(ctx, checkOp(resource, token), err, hintNotDone)
	}
	if level == "read committed" || level == "read uncommitted" { // PostgreSQL runs the latter as the former
		return nil
	}
	return &baton.OptionError{Option: "fence check transaction", Value: level, Reason: fmt.Sprintf("token %d is new to fence %q, and raising it inside a %s transaction would leave the transaction's snapshot without the older holder's last writes; raise the fence before the transaction begins (FencedLease.Raise, or Store.Raise), or run the transaction at READ COMMITTED (WithTx does)", token, resource, strings.ToUpper(level))}
}

// checkOp names a check in error messages.
func checkOp(resource string, token baton.Token) string {
	return fmt.Sprintf("check fence %q for token %d", resource, token)
}

// raise runs the fence upsert in tx: nil when token was accepted, a
// *baton.StaleTokenError when refused.
func (s *Store) raise(ctx context.Context, tx Querier, resource string, token baton.Token) error {
	tag, err := tx.Exec(ctx, s.sql.raise, resource, int64(token))
	if err != nil {
		return s.wrap(ctx, fmt.Sprintf("raise fence %q to token %d", resource, token), err, stmtHint(tx))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return s.stale(ctx, tx, resource, token)
}

// stale builds the *baton.StaleTokenError for a refused token, reading the
// newest token with q: in the same transaction, a READ COMMITTED read that
// sees the raise that refused us.
func (s *Store) stale(ctx context.Context, q Querier, resource string, token baton.Token) error {
	var newest int64
	if err := q.QueryRow(ctx, s.sql.newest, resource).Scan(&newest); err != nil {
		return fencesql.StaleUnread(resource, token,
			s.wrap(ctx, fmt.Sprintf("read the newest token of fence %q", resource), err, hintNotDone))
	}
	return &baton.StaleTokenError{Resource: resource, Got: token, Newest: baton.Token(newest)}
}

// Raise raises the fence for resource to token in a transaction of its own:
// token is accepted when it is at least as new as the newest token seen,
// and otherwise gets a *baton.StaleTokenError. It implements baton.Fence:
// FencedLocker.Run calls it before its work starts, so that from then on no
// older holder's fenced write succeeds.
//
// Unlike Check it goes straight to the upsert, without the share-locking
// SELECT first: a raise usually brings a new token, which the SELECT would
// not find, and with no transaction around it a share lock would protect
// nothing. A refused token costs a second statement, reading the newest
// token for the error. The upsert locks the row exclusively even for the
// token the fence already holds, so such a raise waits for the fenced
// transactions that hold the row share-locked, as any raise does: do not
// call Raise from inside a WithTx on the same resource (it would wait for
// itself).
func (s *Store) Raise(ctx context.Context, resource string, token baton.Token) error {
	if err := fencesql.ValidateToken(resource, token); err != nil {
		return err
	}
	return s.raise(ctx, s.db, resource, token)
}

// Newest returns the newest token the fence for resource has accepted, or
// zero if it has never been raised.
func (s *Store) Newest(ctx context.Context, resource string) (baton.Token, error) {
	if err := baton.ValidateName(resource); err != nil {
		return 0, err
	}
	var newest int64
	err := s.db.QueryRow(ctx, s.sql.newest, resource).Scan(&newest)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, s.wrap(ctx, fmt.Sprintf("read the newest token of fence %q", resource), err, hintConnect)
	}
	return baton.Token(newest), nil
}
