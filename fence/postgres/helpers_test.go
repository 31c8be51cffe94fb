package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/fence/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// newStore returns a Store with its tables on a fresh database, and a pool
// on that database for the test's own SQL.
func newStore(t testing.TB, opts ...postgres.Option) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	dsn := pg.Database(t)
	ctx := context.Background()
	s, err := postgres.Open(ctx, dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return s, pool
}

// freshDatabase returns a fresh database's DSN, a pool on it for the
// test's own SQL, and a context that ends within a minute: a bug that
// leaves a transaction open, holding the fence row, then fails the test
// instead of hanging it.
func freshDatabase(t *testing.T) (dsn string, admin *pgxpool.Pool, ctx context.Context) {
	t.Helper()
	dsn = pg.Database(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return dsn, admin, ctx
}

// exec runs sql outside any fence.
func mustExec(t testing.TB, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// count runs a SELECT count(*) ... .
func count(t testing.TB, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

const invoicesDDL = `CREATE TABLE invoices (
	client_id int,
	month     text,
	amount    numeric(12,2),
	token     bigint NOT NULL,
	PRIMARY KEY (client_id, month)
)`

func invoice(client int, token int64) postgres.Row {
	return postgres.Row{
		Table:   "invoices",
		Columns: []string{"client_id", "month", "amount", "token"},
		Values:  []any{client, "2026-10", "12.50", token},
		Key:     []string{"client_id", "month"},
	}
}
