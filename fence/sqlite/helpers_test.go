package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/baton-go/baton/fence/sqlite"
)

// newStore returns a Store on a new database file, and a handle on that
// file for the test's own SQL.
func newStore(t testing.TB, opts ...sqlite.Option) (*sqlite.Store, *sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	s, err := sqlite.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, openDB(t, path), path
}

// openDB opens path the way Open does, for SQL outside the Store.
func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	dsn, err := sqlite.DSN(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func count(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
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

func invoice(client int, token int64) sqlite.Row {
	return sqlite.Row{
		Table:   "invoices",
		Columns: []string{"client_id", "month", "amount", "token"},
		Values:  []any{client, "2026-10", "12.50", token},
		Key:     []string{"client_id", "month"},
	}
}
