package postgres_test

import (
	"context"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The benchmarks compare plain writes with fenced ones, in the same
// database, through the same pool, into a table of the same shape emptied
// before each: a plain insert runs the same INSERT ... ON CONFLICT DO
// NOTHING as a fenced one, without the fence.
//
//	go test -run '^$' -bench . -count 5 ./fence/postgres/

const benchBatch = 100

func benchSetup(b testing.TB) (*postgres.Store, *pgxpool.Pool, func(baton.Token) postgres.Row) {
	b.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.Database(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	s, err := postgres.New(ctx, pool)
	if err != nil {
		b.Fatal(err)
	}
	mustExec(b, pool, `CREATE TABLE items (id bigint PRIMARY KEY, payload text NOT NULL, token bigint NOT NULL)`)
	if err := s.Raise(ctx, "items", 1); err != nil {
		b.Fatal(err)
	}
	var id int64
	next := func(token baton.Token) postgres.Row {
		id++
		return postgres.Row{
			Table:   "items",
			Columns: []string{"id", "payload", "token"},
			Values:  []any{id, "invoice for client", int64(token)},
			Key:     []string{"id"},
		}
	}
	return s, pool, next
}

func BenchmarkInsert(b *testing.B) {
	s, pool, next := benchSetup(b)
	ctx := context.Background()
	const token = baton.Token(1)
	run := func(name string, op func() error) {
		b.Run(name, func(b *testing.B) {
			mustExec(b, pool, `TRUNCATE items`)
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	plainTx := func(rows int) func() error {
		return func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for range rows {
					if _, err := postgres.InsertOnce(ctx, tx, next(token)); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	fencedTx := func(rows int) func() error {
		return func() error {
			return s.WithTx(ctx, "items", token, func(ctx context.Context, tx pgx.Tx) error {
				for range rows {
					if _, err := postgres.InsertOnce(ctx, tx, next(token)); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}

	run("tx/plain", plainTx(1))
	run("tx/fenced", fencedTx(1))
	run("batch100/plain", plainTx(benchBatch))
	run("batch100/fenced", fencedTx(benchBatch))
	run("stmt/plain", func() error {
		_, err := postgres.InsertOnce(ctx, pool, next(token))
		return err
	})
	run("stmt/fenced", func() error {
		_, err := s.Insert(ctx, "items", token, next(token))
		return err
	})
}
