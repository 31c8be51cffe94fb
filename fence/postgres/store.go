package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/pgkit"
)

// DB is what a Store needs from its connection: *pgxpool.Pool, *pgxpool.Conn
// and *pgx.Conn satisfy it, and on those three WithTx sends BEGIN and the
// fence check in one round trip (another type gets two). A *pgx.Conn is not
// safe for concurrent use, so a Store built on one is not either; use a pool
// to share a Store between goroutines.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Querier
}

// Querier runs statements: pgx.Tx, *pgx.Conn and *pgxpool.Pool satisfy it.
// Check and InsertOnce take one so that they run inside the caller's
// transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is a fence kept in PostgreSQL: one row per resource holding the
// newest token seen, and a table of finished runs. It is safe for concurrent
// use when its DB is (a pool is).
type Store struct {
	db DB
	// sendBatch is db's SendBatch when db is one of pgx's own types, which
	// begin a transaction queued with pgx.Batch.BeginTx and hand it back
	// from BatchResults.Tx; nil for any other DB. See WithTx.
	sendBatch func(context.Context, *pgx.Batch) pgx.BatchResults
	pool      *pgxpool.Pool // owned, closed by Close; nil when built by New
	cfg       config
	where     string // host:port/database, for messages
	sql       statements
}

var _ baton.Fence = (*Store)(nil)

// New returns a Store on db. With the default WithCreate(true) it creates
// the fence and runs tables if they are missing; with WithCreate(false) it
// checks that they exist and returns a *MissingTableError otherwise.
// Either way, it returns a *ForeignTableError for a table of one of the
// store's names that the store cannot use: one that lacks a column its
// statements use, has it with another type, or lacks the unique key its
// INSERT ... ON CONFLICT needs (something else made it). It
// fails with an error wrapping baton.ErrUnavailable if the server cannot be
// reached, and with a *baton.OptionError for an invalid table name or a
// login or database the server refuses. The
// Store does not close db.
func New(ctx context.Context, db DB, opts ...Option) (*Store, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, &baton.OptionError{Option: "db", Value: "nil", Reason: "pass a *pgxpool.Pool or a *pgx.Conn"}
	}
	s := &Store{
		db:        db,
		sendBatch: batchSender(db),
		cfg:       cfg,
		where:     pgkit.WhereOf(db),
		sql:       newStatements(quoteTable(cfg.table), quoteTable(cfg.runs)),
	}
	// Check first: tables already there (the usual case) cost one
	// statement, and no DDL; tables New makes are checked by Init.
	err = s.checkTables(ctx)
	var missing *MissingTableError
	if cfg.create && errors.As(err, &missing) {
		err = s.Init(ctx)
	}
	if advice, cause := pgkit.Refusal(err); advice != "" {
		// At the first contact a refusal is the settings' (exit 2 from the
		// CLI); later, a new connection refused (a rotated password, a
		// role being re-created) is the server's passing failure.
		return nil, &baton.OptionError{Option: "PostgreSQL store", Value: s.where, Reason: fmt.Sprintf("the server refused it (%v): %s", cause, advice)}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Open connects to the PostgreSQL database at dsn (a postgres:// URL or a
// key=value string, as pgx accepts) through a pool the Store owns, and
// returns New on it. Close the Store to close the pool. An unparseable dsn,
// a refused login or a missing database is a *baton.OptionError; an
// unreachable server an error wrapping baton.ErrUnavailable. To bound the
// connection attempt, give ctx a deadline or put connect_timeout in dsn.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, &baton.OptionError{Option: "PostgreSQL URL", Value: baton.Redact(dsn), Reason: pgkit.ParseReason(err)}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, &baton.UnavailableError{Where: pgkit.Where(&pcfg.ConnConfig.Config), Err: fmt.Errorf("%w; %s", err, hintConnect)}
	}
	s, err := New(ctx, pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.pool = pool
	return s, nil
}

// Close closes the pool if the Store made it with Open; a Store built with
// New leaves its DB to the caller. It always returns nil.
func (s *Store) Close() error {
	if s.pool != nil {
		s.pool.Close()
	}
	return nil
}

// Init creates the fence and runs tables if they do not exist, then checks
// them as New does: tables of those names that were there before and that
// the store cannot use (made by something else) are a *ForeignTableError.
// It is safe to run again, and from several processes at once.
func (s *Store) Init(ctx context.Context) error {
	op := fmt.Sprintf("create fence tables %q and %q", s.cfg.table, s.cfg.runs)
	_, err := s.db.Exec(ctx, s.sql.create)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		// Two CREATE TABLE IF NOT EXISTS raced for the same type name;
		// the other one created the table, so this one will find it.
		_, err = s.db.Exec(ctx, s.sql.create)
	}
	if err != nil {
		return s.wrap(ctx, op, err, hintConnect)
	}
	return s.checkTables(ctx) // tables of those names may have been there before
}
