package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
	"github.com/baton-go/baton/internal/pgkit"
)

// rollbackTimeout bounds the rollback that ends a failed transaction; it
// runs detached from the caller's context, which may be what ended it.
const rollbackTimeout = 5 * time.Second

// WithTx runs fn in a transaction that begins with Check(resource, token)
// and commits when fn returns nil. A stale token returns the
// *baton.StaleTokenError without calling fn. When the check or fn fails, or
// fn panics, the transaction is rolled back, so nothing fn wrote is kept. fn
// must use tx for its writes, and must not commit or roll it back. Make
// fn's fenced writes of resource in tx: a WithTx or Check of the same
// resource on another connection, from inside fn, waits behind a newer
// holder's queued raise, which waits for fn's transaction, until a ctx
// ends (Insert and MarkDone do not wait so; see the package doc). fn's
// error is returned as is, unless it is a connection failure, which is
// wrapped in a *baton.UnavailableError like the Store's own.
//
// On the Store's DB, when it is a *pgxpool.Pool, a *pgxpool.Conn or a
// *pgx.Conn, the check costs no round trip of its own: BEGIN and the
// check's share lock reach the server together, as one pgx batch
// (pgx.Batch.BeginTx), so a transaction with the token the fence already
// holds (a holder's second and later transactions) makes as many round
// trips as the same transaction without the fence:
//
//  1. BEGIN; SELECT 1 FROM baton_fence WHERE resource = $1 AND <last_token = $2, then the queue lock> FOR SHARE
//  2. fn's statements, one round trip each as usual
//  3. COMMIT
//
// When the SELECT finds no row (a new token, a stale one, or no fence row
// yet), the upsert of Check follows in a round trip of its own, before fn
// is called; a refused token then costs reading the newest token and
// ROLLBACK. With any other DB, BEGIN and the SELECT are two round trips.
//
// Sending the two together is as safe as sending them one by one. The
// server runs them in order, the SELECT inside the transaction BEGIN
// opened, so its lock is held until COMMIT or ROLLBACK; if BEGIN fails the
// server skips the SELECT, and either failure ends WithTx without calling
// fn. fn is called only after the check has passed, by the share lock or
// by the upsert, so none of its statements ever runs in a transaction
// whose token was refused.
func (s *Store) WithTx(ctx context.Context, resource string, token baton.Token, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := fencesql.ValidateToken(resource, token); err != nil {
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
		if pgkit.ConnFailure(err) && !errors.Is(err, baton.ErrUnavailable) && ctx.Err() == nil {
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
	if s.sendBatch != nil {
		return s.beginBatch(ctx, resource, token, op)
	}
	tx, err := s.beginReadCommitted(ctx)
	if err != nil {
		return nil, s.wrap(ctx, op+": begin", err, hintNotDone)
	}
	if err := s.check(ctx, tx, resource, token, true); err != nil {
		rollback(ctx, tx)
		return nil, err
	}
	return tx, nil
}

// readCommitted is how WithTx begins its transactions, whatever the
// database's or the session's default: at READ COMMITTED, every statement
// reads what was committed before it began. Under REPEATABLE READ or
// SERIALIZABLE, a transaction whose check raises the fence would read
// with a snapshot taken at its first statement, before the raise waited
// for the older holder's transactions to commit: fn would not see their
// last writes (see Check).
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// beginReadCommitted begins a READ COMMITTED transaction on the Store's DB:
// in the BEGIN itself where the DB takes options (pgx's own types do), or
// else with SET TRANSACTION before anything else runs in it.
func (s *Store) beginReadCommitted(ctx context.Context) (pgx.Tx, error) {
	if db, ok := s.db.(interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	}); ok {
		return db.BeginTx(ctx, readCommitted)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		rollback(ctx, tx)
		return nil, err
	}
	return tx, nil
}

// beginBatch is begin in one round trip when the fence holds token: BEGIN
// and the share-locking SELECT go as one batch, and the upsert follows
// only when the SELECT finds no row.
func (s *Store) beginBatch(ctx context.Context, resource string, token baton.Token, op string) (pgx.Tx, error) {
	var b pgx.Batch
	b.BeginTx(readCommitted)
	b.Queue(s.sql.hold, resource, int64(token))
	br := s.sendBatch(ctx, &b)
	tx := br.Tx()
	_, beginErr := br.Exec()
	holdErr := beginErr
	if beginErr == nil {
		var one int32
		holdErr = br.QueryRow().Scan(&one)
	}
	// The batch must be closed before tx is used, even to roll it back.
	closeErr := br.Close()
	if tx == nil { // not from pgx's own types, which sendBatch is only set for
		return nil, fmt.Errorf("%s: begin: %T.SendBatch began no transaction", op, s.db)
	}
	var err error
	switch {
	case beginErr != nil:
		err = s.wrap(ctx, op+": begin", beginErr, hintNotDone)
	case holdErr != nil && !errors.Is(holdErr, pgx.ErrNoRows):
		err = s.wrap(ctx, checkOp(resource, token), holdErr, hintNotDone)
	case closeErr != nil:
		err = s.wrap(ctx, checkOp(resource, token), closeErr, hintNotDone)
	default:
		err = s.afterHold(ctx, tx, resource, token, holdErr, true)
	}
	if err != nil {
		rollback(ctx, tx) // also releases a pool's connection when BEGIN failed
		return nil, err
	}
	return tx, nil
}

// batchSender returns db's SendBatch when db is one of the pgx types that
// begin a transaction queued with pgx.Batch.BeginTx and return it from
// BatchResults.Tx, and nil otherwise: a DB of another type might run the
// BEGIN without handing back a transaction to end.
func batchSender(db DB) func(context.Context, *pgx.Batch) pgx.BatchResults {
	switch db := db.(type) {
	case *pgxpool.Pool:
		return db.SendBatch
	case *pgxpool.Conn:
		return db.SendBatch
	case *pgx.Conn:
		return db.SendBatch
	}
	return nil
}

// rollback ends tx on a context detached from ctx, bounded by
// rollbackTimeout. If it fails, pgx closes the connection, which ends the
// transaction too.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}
