package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/nilval"
	"github.com/baton-go/baton/internal/pgkit"
)

// Querier runs a query: pgx.Tx, *pgx.Conn and *pgxpool.Pool satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckLease checks, in the caller's transaction q, that lease (from a
// Locker of this package) still holds its lock: its row holds its token
// and has not expired by the database's clock at the moment of the check.
// It returns nil if so, and a *baton.LostError (matching
// baton.ErrLeaseLost) otherwise, so the caller rolls back. A connection
// that fails, or a statement PostgreSQL gives up on (a timeout, a
// serialization failure), is an error wrapping baton.ErrUnavailable; any
// other error (no lease table in this database, a transaction an earlier
// statement aborted) is returned as it is, with context: trying again
// would not mend it. A nil lease or q (a nil *pgxpool.Pool included), or a
// lease of another backend, is a *baton.OptionError.
//
// Run it beside a fence/postgres check in a transaction on the same
// database (inside Store.WithTx): the fence refuses a token older than one
// it has seen, and CheckLease also refuses a token whose lease has ended
// before the next holder wrote anything, the guide's first gap. It does not
// lock the lease row, so a transaction that passed it can still commit a
// little after the lease ended; the fence orders such a write before the
// next holder's, which is what makes it harmless. A lease is only checked
// here, never extended.
func CheckLease(ctx context.Context, q Querier, lease *baton.FencedLease) error {
	if lease == nil {
		return &baton.OptionError{Option: "lease", Value: "nil", Reason: "pass the *baton.FencedLease the work runs under"}
	}
	if _, isNil := nilval.Of(q); isNil {
		return &baton.OptionError{Option: "querier", Value: "nil", Reason: "pass the transaction (pgx.Tx) the work writes in"}
	}
	table, name, ok := splitKey(lease.Key())
	n, err := newNames(table)
	if !ok || err != nil || name != lease.Name() {
		return &baton.OptionError{Option: "lease", Value: strconv.Quote(lease.Key()), Reason: "is not a lease of the postgres backend"}
	}
	var live bool
	if err := q.QueryRow(ctx, checkSQL(n.lease), name, int64(lease.Token())).Scan(&live); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("check lease %q: %w", name, context.Cause(ctx))
		}
		err = fmt.Errorf("check lease %q (token %d): %w", name, lease.Token(), err)
		if pgkit.ConnFailure(err) || pgkit.GaveUp(err) {
			return &baton.UnavailableError{Where: pgkit.WhereOf(q), Err: err}
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return fmt.Errorf("%w; run CheckLease in a transaction on the lock's database, whose lease table is %s", err, table)
		}
		return err
	}
	if !live {
		return &baton.LostError{Name: name, Token: lease.Token(), Cause: fmt.Errorf("%w: its row in %s no longer holds token %d, or its expiry passed by the database's clock", baton.ErrLeaseLost, table, lease.Token())}
	}
	return nil
}
