package baton_test

import (
	"context"
	"database/sql"
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
	dir, _ := os.MkdirTemp("", "baton-example-*")
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
	_ = db.QueryRow(`SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	// Output: invoices: 3
}
