package baton_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	_ "modernc.org/sqlite"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/fence/sqlite"
)

// billInvoices is the README's tour: the guide's invoice job, fenced.
func billInvoices(ctx context.Context, endpoint string, db *sql.DB) error {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}})
	if err != nil {
		return err
	}
	defer client.Close()

	// A fenced lock on etcd: each grant carries a token higher than any before it.
	locker, err := etcd.New(client, baton.WithTTL(15*time.Second))
	if err != nil {
		return err
	}
	defer locker.Close()

	// The fence lives in the database the job writes to.
	ledger, err := sqlite.New(ctx, db)
	if err != nil {
		return err
	}

	// Run: acquire, raise the fence to the token, run, release.
	return locker.Run(ctx, "invoices", ledger, func(ctx context.Context, lease *baton.FencedLease) error {
		for client := 1; client <= 3; client++ {
			// One transaction: the fence check, then the idempotent insert.
			err := ledger.WithTx(ctx, "invoices", lease.Token(), func(ctx context.Context, tx *sql.Tx) error {
				_, err := sqlite.InsertOnce(ctx, tx, sqlite.Row{
					Table:   "invoices",
					Columns: []string{"client_id", "month", "amount", "token"},
					Values:  []any{client, "2026-10", "120.00", int64(lease.Token())},
					Key:     []string{"client_id", "month"},
				})
				return err
			})
			if err != nil {
				return err // a *baton.StaleTokenError once a newer holder has raised the fence
			}
		}
		return nil
	})
}

// ExampleFencedLocker_Run runs the README's tour against the embedded etcd
// this package's tests share, writing to an SQLite file.
func ExampleFencedLocker_Run() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "baton-example-*")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "ledger.db")+"?_txlock=immediate")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE invoices (client_id int, month text, amount numeric(12,2), token bigint NOT NULL, PRIMARY KEY (client_id, month))`); err != nil {
		fmt.Println(err)
		return
	}

	if err := billInvoices(ctx, etcdEndpoint, db); err != nil {
		fmt.Println(err)
		return
	}
	// Twice: the second run's inserts do nothing, and its higher token is fine.
	if err := billInvoices(ctx, etcdEndpoint, db); err != nil {
		fmt.Println(err)
		return
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM invoices`).Scan(&n); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("invoices:", n)

	// A holder from before the second run (token 1 is older than any etcd
	// grants here) writes nothing: the fence has seen a newer token.
	ledger, err := sqlite.New(ctx, db, sqlite.WithCreate(false))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = ledger.WithTx(ctx, "invoices", 1, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM invoices`)
		return err
	})
	fmt.Println("stale holder refused:", errors.Is(err, baton.ErrStaleToken))
	if err := db.QueryRow(`SELECT count(*) FROM invoices`).Scan(&n); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("invoices:", n)
	// Output:
	// invoices: 3
	// stale holder refused: true
	// invoices: 3
}

// runScheduler is the README's election example: one replica runs the
// nightly scheduler for as long as it leads; the others wait their turn.
func runScheduler(ctx context.Context, locker *baton.FencedLocker, schedule func(ctx context.Context, token baton.Token) error) error {
	pause := 250 * time.Millisecond
	for {
		// Run campaigns (blocks until this replica leads), runs schedule in
		// a context cancelled when leadership is lost or ctx ends, waits
		// for it to return, and resigns.
		err := locker.Run(ctx, "scheduler", nil, func(ctx context.Context, lease *baton.FencedLease) error {
			return schedule(ctx, lease.Token())
		})
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case errors.Is(err, baton.ErrLeaseLost):
			pause = 250 * time.Millisecond
			continue // leadership lost: campaign again
		case errors.Is(err, baton.ErrUnavailable):
			// The lock service is unreachable (as during a partition, which
			// is also when leases are lost): campaign again after a pause
			// that grows while it stays so.
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(pause):
			}
			pause = min(2*pause, 10*time.Second)
		default:
			return err
		}
	}
}

// Example_leaderElection runs the scheduler on one replica and
// watches who leads from another.
func Example_leaderElection() {
	ctx := context.Background()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdEndpoint}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	locker, err := etcd.New(client, baton.WithTTL(15*time.Second), baton.WithHolder("replica-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	// Anyone can watch the election: every change of leader, in order.
	watch, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	terms, err := locker.Observe(watch, "scheduler")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("leader:", describe(terms))

	night, endNight := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runScheduler(night, locker, func(ctx context.Context, token baton.Token) error {
			<-ctx.Done() // schedule jobs until leadership or the night ends
			return nil
		})
	}()
	fmt.Println("leader:", describe(terms))
	endNight()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			fmt.Println("the scheduler ended:", err)
		}
	case <-time.After(30 * time.Second):
		fmt.Println("the scheduler did not end within 30s of the night's end")
	}
	fmt.Println("leader:", describe(terms))
	// Output:
	// leader: none
	// leader: replica-1
	// leader: none
}

// describe reads the next term: its leader, "none", that the observation
// ended (a closed channel's zero Term would read as "none"), or that none
// came within 30s.
func describe(terms <-chan baton.Term) string {
	var t baton.Term
	var ok bool
	select {
	case t, ok = <-terms:
	case <-time.After(30 * time.Second):
		return "no term within 30s"
	}
	switch {
	case !ok:
		return "observation ended"
	case t.NoLeader():
		return "none"
	}
	return t.Leader
}
