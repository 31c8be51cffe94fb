package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/sqlite"
)

// TestCheck_AfterARead_SaysBeginImmediate: in a transaction that read
// before Check (on a handle without _txlock=immediate), another
// connection's write meanwhile makes Check's write fail at once with
// SQLITE_BUSY_SNAPSHOT, which no busy timeout waits out: the error says
// how to begin the transaction instead (it said the lock was held longer
// than the busy timeout, and to retry, which fails the same way).
func TestCheck_AfterARead_SaysBeginImmediate(t *testing.T) {
	ctx := context.Background()
	s, _, path := newStore(t)
	if err := s.Raise(ctx, "r", 1); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(1000)") // deferred transactions
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	user, err := sqlite.New(ctx, db, sqlite.WithCreate(false))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+sqlite.DefaultTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(ctx, "r", 2); err != nil { // another connection writes
		t.Fatal(err)
	}
	err = user.Check(ctx, tx, "r", 3)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "BEGIN IMMEDIATE") {
		t.Fatalf("Check after a read and another's write = %v; want an error saying to begin with BEGIN IMMEDIATE", err)
	}
}
