package warehouse

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/baton-go/baton"
	fencepg "github.com/baton-go/baton/fence/postgres"
	fencesqlite "github.com/baton-go/baton/fence/sqlite"
)

// Job is the fence resource and lock name of the invoice job.
const Job = "invoices"

// Invoice is one client's bill for one month.
type Invoice struct {
	ClientID int
	Month    string
	Amount   string // decimal, such as "120.00"
}

// Ledger is where invoices are written.
type Ledger interface {
	// Raise raises the job's fence to token: the job's first step.
	Raise(ctx context.Context, token baton.Token) error
	// Save writes inv in one transaction with the fence check. It returns
	// inserted=false when the client was already billed for the month,
	// and a *baton.StaleTokenError, writing nothing, when a newer holder
	// has raised the fence.
	Save(ctx context.Context, token baton.Token, inv Invoice) (inserted bool, err error)
	// SaveUnfenced writes inv without the fence check, as the guide's team
	// first did; the primary key still stops a duplicate row.
	SaveUnfenced(ctx context.Context, token baton.Token, inv Invoice) (inserted bool, err error)
	// Billed returns, per client, the token that billed it for month.
	Billed(ctx context.Context, month string) (map[int]baton.Token, error)
	// Close frees the ledger's connections.
	Close() error
}

// Schema is the guide's invoices table, in SQL both PostgreSQL and SQLite
// take; the fence table is the fence store's.
const Schema = `CREATE TABLE IF NOT EXISTS invoices (
    client_id int,
    month     text,
    amount    numeric(12,2),
    token     bigint NOT NULL,
    PRIMARY KEY (client_id, month)
)`

// OpenLedger opens a ledger at a postgres:// URL or an sqlite:PATH, creating
// the tables if they are missing.
func OpenLedger(ctx context.Context, rawURL string) (Ledger, error) {
	u, err := baton.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return openPG(ctx, rawURL)
	case "sqlite":
		path, err := sqlitePath(u)
		if err != nil {
			return nil, &baton.OptionError{Option: "ledger URL", Value: baton.Redact(rawURL), Reason: err.Error()}
		}
		return openSQLite(ctx, path)
	}
	return nil, &baton.OptionError{Option: "ledger URL", Value: baton.Redact(rawURL), Reason: "use postgres://... or sqlite:PATH"}
}

// sqlitePath returns the file path of an sqlite: URL, read as fence.Open
// reads it: sqlite:rel/path.db (percent-decoded), sqlite:/abs/path.db,
// sqlite:///abs/path.db.
func sqlitePath(u *url.URL) (string, error) {
	if u.Opaque != "" {
		return url.PathUnescape(u.Opaque)
	}
	return u.Host + u.Path, nil
}

func row(token baton.Token, inv Invoice) (string, []string, []any, []string) {
	return "invoices", []string{"client_id", "month", "amount", "token"},
		[]any{inv.ClientID, inv.Month, inv.Amount, int64(token)}, []string{"client_id", "month"}
}

// pgLedger keeps invoices in PostgreSQL through fence/postgres.
type pgLedger struct {
	pool  *pgxpool.Pool
	fence *fencepg.Store
}

func openPG(ctx context.Context, dsn string) (*pgLedger, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, &baton.UnavailableError{Where: baton.Redact(dsn), Err: err}
	}
	fence, err := fencepg.New(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := pool.Exec(ctx, Schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create invoices table: %w", err)
	}
	return &pgLedger{pool: pool, fence: fence}, nil
}

func (l *pgLedger) pgRow(token baton.Token, inv Invoice) fencepg.Row {
	t, c, v, k := row(token, inv)
	return fencepg.Row{Table: t, Columns: c, Values: v, Key: k}
}

func (l *pgLedger) Raise(ctx context.Context, token baton.Token) error {
	return l.fence.Raise(ctx, Job, token)
}

func (l *pgLedger) Save(ctx context.Context, token baton.Token, inv Invoice) (inserted bool, err error) {
	err = l.fence.WithTx(ctx, Job, token, func(ctx context.Context, tx pgx.Tx) error {
		inserted, err = fencepg.InsertOnce(ctx, tx, l.pgRow(token, inv))
		return err
	})
	return inserted, err
}

func (l *pgLedger) SaveUnfenced(ctx context.Context, token baton.Token, inv Invoice) (bool, error) {
	return fencepg.InsertOnce(ctx, l.pool, l.pgRow(token, inv))
}

func (l *pgLedger) Billed(ctx context.Context, month string) (map[int]baton.Token, error) {
	rows, err := l.pool.Query(ctx, `SELECT client_id, token FROM invoices WHERE month = $1`, month)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]baton.Token{}
	for rows.Next() {
		var c int
		var tok int64
		if err := rows.Scan(&c, &tok); err != nil {
			return nil, err
		}
		out[c] = baton.Token(tok)
	}
	return out, rows.Err()
}

func (l *pgLedger) Close() error {
	l.pool.Close()
	return nil
}

// sqliteLedger keeps invoices in an SQLite file through fence/sqlite.
type sqliteLedger struct {
	db    *sql.DB
	fence *fencesqlite.Store
}

func openSQLite(ctx context.Context, path string) (*sqliteLedger, error) {
	if path == "" {
		return nil, &baton.OptionError{Option: "ledger URL", Value: "sqlite:", Reason: "name a file, such as sqlite:ledger.db"}
	}
	// The settings fence/sqlite.Open uses: WAL, a busy timeout,
	// synchronous FULL, and BEGIN IMMEDIATE so a fenced transaction holds
	// the write lock from its start.
	dsn, err := fencesqlite.DSN(path)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, &baton.UnavailableError{Where: path, Err: err}
	}
	fence, err := fencesqlite.New(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	if _, err := db.ExecContext(ctx, Schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create invoices table in %s: %w", path, err)
	}
	return &sqliteLedger{db: db, fence: fence}, nil
}

func (l *sqliteLedger) sqliteRow(token baton.Token, inv Invoice) fencesqlite.Row {
	t, c, v, k := row(token, inv)
	return fencesqlite.Row{Table: t, Columns: c, Values: v, Key: k}
}

func (l *sqliteLedger) Raise(ctx context.Context, token baton.Token) error {
	return l.fence.Raise(ctx, Job, token)
}

func (l *sqliteLedger) Save(ctx context.Context, token baton.Token, inv Invoice) (inserted bool, err error) {
	err = l.fence.WithTx(ctx, Job, token, func(ctx context.Context, tx *sql.Tx) error {
		inserted, err = fencesqlite.InsertOnce(ctx, tx, l.sqliteRow(token, inv))
		return err
	})
	return inserted, err
}

func (l *sqliteLedger) SaveUnfenced(ctx context.Context, token baton.Token, inv Invoice) (bool, error) {
	return fencesqlite.InsertOnce(ctx, l.db, l.sqliteRow(token, inv))
}

func (l *sqliteLedger) Billed(ctx context.Context, month string) (map[int]baton.Token, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT client_id, token FROM invoices WHERE month = ?`, month)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]baton.Token{}
	for rows.Next() {
		var c int
		var tok int64
		if err := rows.Scan(&c, &tok); err != nil {
			return nil, err
		}
		out[c] = baton.Token(tok)
	}
	return out, rows.Err()
}

func (l *sqliteLedger) Close() error { return l.db.Close() }
