package postgres_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	fencepg "github.com/baton-go/baton/fence/postgres"
	"github.com/baton-go/baton/postgres"
)

// The guide's invoice job on one PostgreSQL database: the lock, its token
// and the fence live together, and each invoice is written in a
// transaction that checks both the fence and the lease.
func ExampleCheckLease() {
	ctx := context.Background()
	// statement_timeout at most half the request timeout (5s by default),
	// so that the server gives up on a statement the client gave up on (see
	// New).
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/billing?statement_timeout=2500")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	locker, err := postgres.New(ctx, pool, baton.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	fence, err := fencepg.New(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}

	err = locker.Run(ctx, "invoices", fence, func(ctx context.Context, lease *baton.FencedLease) error {
		for client := 1; client <= 600; client++ {
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
	if err != nil {
		log.Print(err)
	}
}
