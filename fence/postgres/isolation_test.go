package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/postgres"
)

// beginOnly is a DB with Begin and no BeginTx: WithTx sets its
// transactions' isolation with a statement of their own.
type beginOnly struct{ postgres.DB }

// TestStore_WithTx_RepeatableReadDefault: on a database whose sessions
// default to REPEATABLE READ, a new holder's WithTx, whose check raises the
// fence while the older holder's transaction still holds the row, sees
// that transaction's write once the raise goes through: WithTx runs at READ
// COMMITTED. At the default isolation, the new holder's snapshot, taken at
// its check's first statement, would not hold the older holder's row, and
// its fn would find the table empty.
func TestStore_WithTx_RepeatableReadDefault(t *testing.T) {
	dsn, admin, ctx := freshDatabase(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	kinds := []struct {
		name string
		open func(t *testing.T) postgres.DB
	}{
		{"pool", func(t *testing.T) postgres.DB { return openPool(t, cfg) }},
		{"conn", func(t *testing.T) postgres.DB { return openConn(t, cfg) }},
		{"begin-only", func(t *testing.T) postgres.DB { return beginOnly{openPool(t, cfg)} }},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			res := "rr_" + strings.ReplaceAll(kind.name, "-", "_")
			table := "w_" + res
			mustExec(t, admin, `CREATE TABLE `+table+` (id int PRIMARY KEY, token bigint NOT NULL)`)
			older, err := postgres.New(ctx, kind.open(t))
			if err != nil {
				t.Fatal(err)
			}
			newer, err := postgres.New(ctx, kind.open(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := older.Raise(ctx, res, 5); err != nil {
				t.Fatal(err)
			}
			written, commit := make(chan struct{}), make(chan struct{})
			letCommit := sync.OnceFunc(func() { close(commit) })
			olderDone, newerDone := make(chan error, 1), make(chan error, 1)
			// A failure midway lets the older transaction commit, and
			// waits for both transactions before the pools close.
			var wg sync.WaitGroup
			defer wg.Wait()
			defer letCommit()
			wg.Add(1)
			go func() {
				defer wg.Done()
				olderDone <- older.WithTx(ctx, res, 5, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES (1, 5)`); err != nil {
						return err
					}
					close(written)
					select {
					case <-commit:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
			}()
			select {
			case <-written:
			case err := <-olderDone:
				t.Fatalf("the older holder's transaction ended before its write: %v", err)
			}
			seen := make(chan int, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				newerDone <- newer.WithTx(ctx, res, 6, func(ctx context.Context, tx pgx.Tx) error {
					var n int
					if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
						return err
					}
					seen <- n
					return nil
				})
			}()
			// The newer holder's raise waits for the older holder's share
			// lock on the fence row; only then may that one commit.
			for waiting := 0; waiting == 0; {
				if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting == 0 {
					select {
					case err := <-newerDone:
						t.Fatalf("the newer holder's transaction ended without waiting for the older one: %v", err)
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
			letCommit()
			if err := <-olderDone; err != nil {
				t.Fatal(err)
			}
			if err := <-newerDone; err != nil {
				t.Fatal(err)
			}
			if n := <-seen; n != 1 {
				t.Errorf("the newer holder's transaction saw %d rows after its raise; want 1, the older holder's committed write", n)
			}
		})
	}
}

// TestStore_Check_RaiseNeedsReadCommitted: Check refuses to raise the fence
// in a REPEATABLE READ or SERIALIZABLE transaction (see Check), as an
// option error that says what to do; a stale token there is still refused
// as stale; once the fence was raised before the transaction, the check
// there passes.
func TestStore_Check_RaiseNeedsReadCommitted(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			res := "iso_" + strings.ReplaceAll(string(level), " ", "_")
			check := func(token baton.Token) error {
				t.Helper()
				tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(context.WithoutCancel(ctx))
				return s.Check(ctx, tx, res, token)
			}
			err := check(7)
			if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "READ COMMITTED") || !strings.Contains(err.Error(), "Raise") {
				t.Fatalf("raise in a %s transaction: err = %v, want an option error naming READ COMMITTED and Raise", level, err)
			}
			if n, err := s.Newest(ctx, res); err != nil || n != 0 {
				t.Fatalf("after the refused raise, rolled back: newest = %d, %v; want 0", n, err)
			}
			if err := s.Raise(ctx, res, 7); err != nil {
				t.Fatal(err)
			}
			if err := check(7); err != nil {
				t.Errorf("check of the token the fence holds, in a %s transaction: %v", level, err)
			}
			var stale *baton.StaleTokenError
			if err := check(6); !errors.As(err, &stale) || stale.Newest != 7 {
				t.Errorf("stale token in a %s transaction: err = %v, want a *StaleTokenError with newest 7", level, err)
			}
		})
	}
}
