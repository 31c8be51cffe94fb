package postgres_test

import (
	"context"
	"log"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	fencepg "github.com/baton-go/baton/fence/postgres"
	"github.com/baton-go/baton/postgres"
)

// The guide's invoice job on one PostgreSQL database: the lock, its token
// and the fence live together, and each invoice is written in a
// transaction that checks both the fence and the lease. (TestExampleCheckLease
// runs billInvoices against the tests' server.)
func ExampleCheckLease() {
	// statement_timeout at most half the request timeout (5s by default),
	// so that the server gives up on a statement the client gave up on (see
	// New).
	if err := billInvoices(context.Background(), "postgres://app@db.internal/billing?statement_timeout=2500", 600); err != nil {
		log.Print(err)
	}
}

// billInvoices bills clients 1 to n for October under the lock
// "invoices", fenced.
func billInvoices(ctx context.Context, dsn string, n int) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	locker, err := postgres.New(ctx, pool, baton.WithTTL(15*time.Second))
	if err != nil {
		return err
	}
	defer locker.Close()
	fence, err := fencepg.New(ctx, pool)
	if err != nil {
		return err
	}

	return locker.Run(ctx, "invoices", fence, func(ctx context.Context, lease *baton.FencedLease) error {
		for client := 1; client <= n; client++ {
			err := fence.WithTx(ctx, "invoices", lease.Token(), func(ctx context.Context, tx pgx.Tx) error {
				// Refused once the lease has ended by the database's clock,
				// even before the next holder has raised the fence.
				if err := postgres.CheckLease(ctx, tx, lease); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO invoices (client_id, month, token)
					VALUES ($1, '2026-10', $2) ON CONFLICT (client_id, month) DO NOTHING`, client, int64(lease.Token()))
				return err
			})
			if err != nil {
				return err // a stale token or a lost lease: stop billing
			}
		}
		return nil
	})
}

// TestExampleCheckLease runs ExampleCheckLease's job twice on a test
// database and reads back what it wrote: every client billed once, by the
// first run's token; the second run, a redo with a higher token, bills
// nobody twice.
func TestExampleCheckLease(t *testing.T) {
	dsn := pg.Database(t) + "&statement_timeout=2500"
	admin := newPool(t, dsn)
	execSQL(t, admin, `CREATE TABLE invoices (client_id int, month text, token bigint NOT NULL, PRIMARY KEY (client_id, month))`)
	const n = 20
	for range 2 {
		if err := billInvoices(timeout(t, 30*time.Second), dsn, n); err != nil {
			t.Fatalf("billInvoices: %v", err)
		}
	}
	var rows, tokens int
	var first, fenced int64
	if err := admin.QueryRow(timeout(t, 10*time.Second), `SELECT count(*), count(DISTINCT token), min(token) FROM invoices`).Scan(&rows, &tokens, &first); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(timeout(t, 10*time.Second), `SELECT last_token FROM baton_fence WHERE resource = 'invoices'`).Scan(&fenced); err != nil {
		t.Fatal(err)
	}
	if rows != n || tokens != 1 {
		t.Errorf("invoices: %d rows with %d distinct tokens; want %d rows, all of the first run's token", rows, tokens, n)
	}
	if fenced <= first {
		t.Errorf("the fence holds token %d, want the second run's, above the first's %d", fenced, first)
	}
}
