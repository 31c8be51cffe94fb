package sqlite_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/sqlite"
	msqlite "modernc.org/sqlite"
)

// connector opens connections of d, a driver of the test's own.
type connector struct {
	d   *msqlite.Driver
	dsn string
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.d }

// TestStore_WithTx_RolledBackByFailedStatement: a statement interrupted
// because its context ended makes SQLite roll back the whole transaction,
// fence check included, while database/sql takes it for open. fn ignores
// the error and inserts a row, which SQLite commits on its own; WithTx's
// commit then finds no transaction, and its error says what happened
// instead of "nothing was written". The statement cancels its own context
// (baton_test_cancel) and never ends by itself, so it is interrupted
// without any timing.
func TestStore_WithTx_RolledBackByFailedStatement(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "fence.db")
	dsn, err := sqlite.DSN(path)
	if err != nil {
		t.Fatal(err)
	}
	var stop context.CancelFunc // set by fn, called by the statement
	d := &msqlite.Driver{}
	if err := d.RegisterScalarFunction("baton_test_cancel", 0, func(*msqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		stop()
		return int64(0), nil
	}); err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector{d, dsn})
	defer db.Close()
	s, err := sqlite.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "CREATE TABLE t (x INTEGER)")

	var stmtErr error
	err = s.WithTx(ctx, "invoices", 3, func(ctx context.Context, tx *sql.Tx) error {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop = cancel
		_, stmtErr = tx.ExecContext(sctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)
INSERT INTO t (x) SELECT x + baton_test_cancel() FROM c`)
		// Wrong: goes on after a failed statement.
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (x) VALUES (-1)`); err != nil {
			return err
		}
		return nil
	})
	if stmtErr == nil {
		t.Fatal("the endless statement was not interrupted")
	}
	var se *msqlite.Error
	if err == nil || !errors.As(err, &se) || !strings.Contains(err.Error(), "rolled back by an earlier statement") || !strings.Contains(err.Error(), "outside the fence") {
		t.Fatalf("WithTx = %v; want the commit's error saying an earlier statement rolled the transaction back", err)
	}
	t.Log(err)
	// What the message says: the check was rolled back, the write after
	// the failed statement was committed on its own.
	if n, err := s.Newest(ctx, "invoices"); err != nil || n != 0 {
		t.Errorf("fence holds %d (%v); want the check rolled back", n, err)
	}
	if n := count(t, db, "SELECT count(*) FROM t"); n != 1 {
		t.Errorf("%d rows in t; want only the one inserted after the failed statement", n)
	}
}

// TestStore_Check_Nil: a nil querier, or a nil *sql.Tx, is refused, not a
// panic.
func TestStore_Check_Nil(t *testing.T) {
	s, _, _ := newStore(t)
	for _, q := range []sqlite.Querier{nil, (*sql.Tx)(nil), (*sql.DB)(nil)} {
		if err := s.Check(t.Context(), q, "invoices", 3); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "nil") {
			t.Errorf("Check(%#v): %v; want an invalid option naming nil", q, err)
		}
		row := sqlite.Row{Table: "invoices", Columns: []string{"id"}, Values: []any{1}, Key: []string{"id"}}
		if ok, err := sqlite.InsertOnce(t.Context(), q, row); ok || !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "nil") {
			t.Errorf("InsertOnce(%#v): %v, %v; want an invalid option naming nil", q, ok, err)
		}
	}
}

// TestStore_Raise_StaleNewestUnread: when the newest token cannot be read
// after a refusal, the error is still a stale token, and does not claim
// the newest token is 0. last_token '10x' casts to 10 for the raise's
// comparison, but does not scan as a number.
func TestStore_Raise_StaleNewestUnread(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "fence.db")
	db := openDB(t, path)
	mustExec(t, db, `CREATE TABLE baton_fence (resource TEXT NOT NULL PRIMARY KEY, last_token TEXT NOT NULL, updated_at TEXT NOT NULL DEFAULT '')`)
	mustExec(t, db, `INSERT INTO baton_fence (resource, last_token) VALUES ('invoices', '10x')`)
	s, err := sqlite.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Raise(ctx, "invoices", 9)
	var stale *baton.StaleTokenError
	if !errors.Is(err, baton.ErrStaleToken) || !errors.As(err, &stale) || stale.Got != 9 {
		t.Fatalf("Raise(9) = %v; want a stale token error for 9", err)
	}
	if msg := err.Error(); strings.Contains(msg, "token 0") || !strings.Contains(msg, "newest token is unknown") || !strings.Contains(msg, `read the newest token of fence "invoices"`) {
		t.Fatalf("Raise(9) = %q; want it to say the newest token is unknown, and why, not 0", msg)
	}
}
