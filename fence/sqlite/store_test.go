package sqlite_test

import (
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/sqlite"
)

func TestStore_Raise_Stale(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := t.Context()
	for _, tok := range []baton.Token{5, 5, 7} {
		if err := s.Raise(ctx, "invoices", tok); err != nil {
			t.Fatalf("Raise(%d): %v", tok, err)
		}
	}
	err := s.Raise(ctx, "invoices", 6)
	var stale *baton.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, baton.ErrStaleToken) {
		t.Fatalf("Raise(6) after 7: %v, want a *StaleTokenError", err)
	}
	if *stale != (baton.StaleTokenError{Resource: "invoices", Got: 6, Newest: 7}) {
		t.Errorf("stale error %+v, want resource invoices, got 6, newest 7", *stale)
	}
	if n, err := s.Newest(ctx, "invoices"); err != nil || n != 7 {
		t.Errorf("Newest = %d, %v; want 7", n, err)
	}
}

func TestStore_List(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := t.Context()
	if got, err := s.List(ctx); err != nil || len(got) != 0 {
		t.Fatalf("List on an empty store = %v, %v; want none", got, err)
	}
	start := time.Now().Add(-time.Second).UTC()
	for _, r := range []struct {
		name  string
		token baton.Token
	}{{"b", 2}, {"a", 9}, {"c", 4}} {
		if err := s.Raise(ctx, r.name, r.token); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []sqlite.Entry{{Resource: "a", Token: 9}, {Resource: "b", Token: 2}, {Resource: "c", Token: 4}}
	if len(got) != len(want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	for i := range got {
		if got[i].Resource != want[i].Resource || got[i].Token != want[i].Token || got[i].UpdatedAt.Before(start) || got[i].UpdatedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("List[%d] = %+v, want %+v updated about now", i, got[i], want[i])
		}
	}
}

func TestStore_New_DB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db := openDB(t, path)
	ctx := t.Context()
	s, err := sqlite.New(ctx, db, sqlite.WithTable("Fence"), sqlite.WithRunsTable("main.runs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkDone(ctx, "a", "run-1", 3); err != nil {
		t.Fatal(err)
	}
	if done, err := s.Done(ctx, "a", "run-1"); err != nil || !done {
		t.Fatalf("Done = %v, %v; want true", done, err)
	}
	if n := count(t, db, `SELECT last_token FROM "Fence" WHERE resource = 'a'`); n != 3 {
		t.Fatalf(`"Fence" holds %d, want 3`, n)
	}
	// The tables exist now, under any case.
	if _, err := sqlite.New(ctx, db, sqlite.WithTable("fence"), sqlite.WithRunsTable("RUNS"), sqlite.WithCreate(false)); err != nil {
		t.Fatal(err)
	}
	// Close leaves db open.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("db after the Store's Close: %v; want it open", err)
	}
	if n := count(t, db, `SELECT count(*) FROM runs`); n != 1 {
		t.Fatalf("runs holds %d rows after the Store's Close, want 1", n)
	}
}

// TestStore_New_SameTable: SQLite ignores case in names, and an
// unqualified name is in database main, so these pairs name one table,
// which would be both the fence table and the runs table.
func TestStore_New_SameTable(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "x.db"))
	db.SetMaxOpenConns(1) // for the ATTACH below, which holds for its connection only
	for _, tc := range [][2]string{{"fence", "FENCE"}, {"Fence", "main.fence"}, {"MAIN.runs", "runs"}, {"main.baton_fence", "Baton_Fence"}} {
		fence, runs := tc[0], tc[1]
		_, err := sqlite.New(t.Context(), db, sqlite.WithTable(fence), sqlite.WithRunsTable(runs))
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "same table") {
			t.Errorf("New(table %q, runs %q): %v; want ErrInvalidOption saying they are the same table", fence, runs, err)
		}
	}
	// Another attached database's table of the same name is another table.
	mustExec(t, db, "ATTACH DATABASE ? AS other", filepath.Join(t.TempDir(), "other.db"))
	if _, err := sqlite.New(t.Context(), db, sqlite.WithTable("fence"), sqlite.WithRunsTable("other.fence")); err != nil {
		t.Fatalf("New(fence, other.fence): %v", err)
	}
}

// TestOpen_MissingFile: Open without WithCreate on a file that does not
// exist says so, and leaves no empty file behind (a mistyped path in
// `baton fence show` or `baton run --fence` created one).
func TestOpen_MissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nothere.db")
	_, err := sqlite.Open(t.Context(), path, sqlite.WithCreate(false))
	var missing *sqlite.MissingTableError
	if !errors.As(err, &missing) || !missing.NoFile || !strings.Contains(err.Error(), path+" does not exist") {
		t.Fatalf("Open of a missing file: %v; want a *MissingTableError with NoFile, naming %s", err, path)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open without WithCreate left %s behind: %v", path, err)
	}
	s, err := sqlite.Open(t.Context(), path) // WithCreate(true), the default
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestStore_New_MissingTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db := openDB(t, path)
	ctx := t.Context()
	_, err := sqlite.New(ctx, db, sqlite.WithCreate(false))
	var missing *sqlite.MissingTableError
	if !errors.As(err, &missing) || missing.Table != "baton_fence" {
		t.Fatalf("New without tables: %v, want a *MissingTableError for baton_fence", err)
	}
	for _, want := range []string{`"baton_fence"`, path, "baton fence init --store URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if _, err := sqlite.New(ctx, db, sqlite.WithRunsTable("other_runs")); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.New(ctx, db, sqlite.WithCreate(false))
	if !errors.As(err, &missing) || missing.Table != "baton_runs" {
		t.Fatalf("New without the runs table: %v, want a *MissingTableError for baton_runs", err)
	}

	// A table dropped after New is reported the same way.
	s, err := sqlite.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "DROP TABLE baton_fence")
	if err := s.Raise(ctx, "a", 1); !errors.As(err, &missing) || missing.Table != "baton_fence" {
		t.Fatalf("Raise after DROP TABLE: %v, want a *MissingTableError", err)
	}
}

// TestStore_Open_WrongPath: a path whose directory is missing, a
// directory, or a file that is no database is a mistake in the store's
// URL, not the store being unavailable, which wrappers of baton run retry
// (exit 69) and would retry for ever. The error names the file and what
// to check.
func TestStore_Open_WrongPath(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "not.db")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("not a database\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path string }{
		{"no such directory", filepath.Join(dir, "missing", "fence.db")},
		{"a directory", dir},
		{"not a database", notDB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlite.Open(t.Context(), tc.path)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), tc.path+":") || !strings.Contains(err.Error(), "check that the file's directory exists") {
				t.Fatalf("Open: %v; want an error, not ErrUnavailable, naming %s and what to check", err, tc.path)
			}
			t.Log(err)
		})
	}
}

func TestStore_New_BadOptions(t *testing.T) {
	ctx := t.Context()
	for _, opt := range []sqlite.Option{
		sqlite.WithTable(""),
		sqlite.WithTable("fence; DROP TABLE x"),
		sqlite.WithTable(`fe"nce`),
		sqlite.WithTable("1fence"),
		sqlite.WithTable("a.b.c"),
		sqlite.WithRunsTable("runs-table"),
		sqlite.WithRunsTable("baton_fence"),
		sqlite.WithBusyTimeout(-time.Second),
	} {
		if _, err := sqlite.New(ctx, nil, opt); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("New: %v, want ErrInvalidOption", err)
		}
		if _, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "x.db"), opt); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("Open: %v, want ErrInvalidOption", err)
		}
	}
	for _, path := range []string{"", ":memory:", "file:x.db"} {
		if _, err := sqlite.Open(ctx, path); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption", path, err)
		}
	}
}

func TestStore_Row_BadIdentifiers(t *testing.T) {
	s, db, _ := newStore(t)
	ctx := t.Context()
	mustExec(t, db, invoicesDDL)
	for _, r := range []sqlite.Row{
		{Table: "invoices;", Columns: []string{"client_id"}, Values: []any{1}},
		{Table: "invoices", Columns: []string{"client id"}, Values: []any{1}},
		{Table: "invoices", Columns: []string{"client_id"}, Values: []any{1}, Key: []string{"month)"}},
		{Table: "invoices", Columns: []string{"client_id"}, Values: []any{1, 2}},
		{Table: "invoices", Columns: []string{"client_id", "client_id"}, Values: []any{1, 2}},
		{Table: "invoices"},
	} {
		if _, err := s.Insert(ctx, "r", 1, r); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("Insert(%+v): %v, want ErrInvalidOption", r, err)
		}
		if _, err := sqlite.InsertOnce(ctx, db, r); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("InsertOnce(%+v): %v, want ErrInvalidOption", r, err)
		}
	}
	if n, err := s.Newest(ctx, "r"); err != nil || n != 0 {
		t.Errorf("a refused Insert raised the fence to %d (%v)", n, err)
	}
}

// SQLite cannot raise the fence and insert in one statement, which is why
// Insert uses a transaction: no data-modifying CTEs. If this starts to
// pass, Insert can become one statement as in fence/postgres.
func TestSQLite_NoDataModifyingCTE(t *testing.T) {
	_, db, _ := newStore(t)
	mustExec(t, db, invoicesDDL)
	_, err := db.Exec(`WITH f AS (INSERT INTO baton_fence (resource, last_token) VALUES ('r', 1) RETURNING 1)
INSERT INTO invoices (client_id, month, amount, token) SELECT 1, '2026-10', 1, 1 FROM f`)
	if err == nil {
		t.Fatal("SQLite accepted an INSERT inside a WITH clause")
	}
}

func TestStore_Insert_StaleVsDuplicate(t *testing.T) {
	s, db, _ := newStore(t)
	ctx := t.Context()
	mustExec(t, db, invoicesDDL)
	insert := func(token int64, client int, want bool) {
		t.Helper()
		got, err := s.Insert(ctx, "invoices", baton.Token(token), invoice(client, token))
		if err != nil || got != want {
			t.Fatalf("Insert(token %d, client %d) = %v, %v; want %v, nil", token, client, got, err, want)
		}
	}
	insert(5, 1, true)
	insert(7, 1, false)
	insert(7, 2, true)
	got, err := s.Insert(ctx, "invoices", 6, invoice(3, 6))
	var stale *baton.StaleTokenError
	if !errors.As(err, &stale) || got || *stale != (baton.StaleTokenError{Resource: "invoices", Got: 6, Newest: 7}) {
		t.Fatalf("Insert(token 6) = %v, %v; want false and stale (got 6, newest 7)", got, err)
	}
	if n := count(t, db, "SELECT count(*) FROM invoices"); n != 2 {
		t.Errorf("%d invoices, want 2", n)
	}
	bad := invoice(4, 9)
	bad.Values[3] = nil
	if _, err := s.Insert(ctx, "invoices", 9, bad); err == nil || errors.Is(err, baton.ErrStaleToken) {
		t.Fatalf("Insert of a NULL token: %v, want the not-null violation", err)
	}
	if n, err := s.Newest(ctx, "invoices"); err != nil || n != 7 {
		t.Errorf("Newest = %d, %v after a failed Insert; want 7", n, err)
	}
}

// TestStore_Check_NeedsTx: Check on a *sql.DB would fence nothing (the
// write lock ends with the check's statement): it is refused, and the
// fence is not raised.
func TestStore_Check_NeedsTx(t *testing.T) {
	s, db, _ := newStore(t)
	ctx := t.Context()
	if err := s.Check(ctx, db, "invoices", 3); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "sql.Tx") {
		t.Fatalf("Check on a *sql.DB: %v; want an invalid option asking for the transaction", err)
	}
	if n, err := s.Newest(ctx, "invoices"); err != nil || n != 0 {
		t.Fatalf("after the refused check the fence holds %d (%v); want nothing raised", n, err)
	}
}

// TestStore_Check_ConnRefused: a *sql.Conn outside a transaction ends the
// check with its own statement, so the writes after it are not fenced: a
// newer holder could raise the fence in between. Check refuses it, as
// PostgreSQL's refuses a connection with no transaction open.
func TestStore_Check_ConnRefused(t *testing.T) {
	s, db, _ := newStore(t)
	ctx := t.Context()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := s.Check(ctx, conn, "invoices", 3); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "BeginTx") {
		t.Fatalf("Check on a *sql.Conn: %v; want an invalid option asking for the transaction", err)
	}
	if n, err := s.Newest(ctx, "invoices"); err != nil || n != 0 {
		t.Fatalf("after the refused check the fence holds %d (%v); want nothing raised", n, err)
	}
}

// TestStore_TableNotOurs: tables of baton's names made by something else
// are caught: one whose last_token is TEXT (tokens stored as text compare
// as strings, '10' < '9') still refuses a stale token, and one without a
// column the statements use is refused by Init and Open with one line
// naming it, not by every raise with "no such column".
func TestStore_TableNotOurs(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "text.db")
	db := openDB(t, path)
	if _, err := db.ExecContext(ctx, `CREATE TABLE baton_fence (resource TEXT NOT NULL PRIMARY KEY, last_token TEXT NOT NULL, updated_at TEXT NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Raise(ctx, "invoices", 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(ctx, "invoices", 9); !errors.Is(err, baton.ErrStaleToken) {
		t.Errorf("raise to 9 after 10 in a TEXT column: %v; want a stale token", err)
	}
	if n, _ := s.Newest(ctx, "invoices"); n != 10 {
		t.Errorf("newest %d after the stale raise, want 10", n)
	}

	path = filepath.Join(t.TempDir(), "other.db")
	db = openDB(t, path)
	if _, err := db.ExecContext(ctx, `CREATE TABLE baton_fence (resource TEXT PRIMARY KEY, token INTEGER)`); err != nil {
		t.Fatal(err)
	}
	for _, create := range []bool{true, false} {
		_, err := sqlite.Open(ctx, path, sqlite.WithCreate(create))
		var fe *sqlite.ForeignTableError
		if !errors.As(err, &fe) || fe.Column != "last_token" || !strings.Contains(err.Error(), "baton fence init") {
			t.Errorf("Open(create %v) on a table not ours: %v; want a *ForeignTableError naming the column", create, err)
		}
	}
}

// TestStore_Insert_CommitFails: a row whose INSERT succeeded but whose
// transaction did not commit was not inserted. A deferred foreign key
// fails the COMMIT, not the INSERT.
func TestStore_Insert_CommitFails(t *testing.T) {
	ctx := t.Context()
	dsn, err := sqlite.DSN(filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn+"&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlite.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, `CREATE TABLE clients (id INTEGER PRIMARY KEY)`)
	mustExec(t, db, `CREATE TABLE invoices (client_id INTEGER PRIMARY KEY REFERENCES clients (id) DEFERRABLE INITIALLY DEFERRED)`)
	inserted, err := s.Insert(ctx, "invoices", 3, sqlite.Row{Table: "invoices", Columns: []string{"client_id"}, Values: []any{7}})
	if err == nil || inserted {
		t.Fatalf("Insert with a dangling deferred foreign key = %v, %v; want false and the commit's error", inserted, err)
	}
	if n := count(t, db, "SELECT count(*) FROM invoices"); n != 0 {
		t.Fatalf("%d invoices after the failed commit, want none", n)
	}
}

// TestStore_TableWithoutKey: a table of baton's name made by something
// else with the columns but without a PRIMARY KEY or UNIQUE constraint on
// exactly the key of the store's ON CONFLICT is refused by Open and New,
// naming the table and the key, not by every raise. One with more columns
// and the key, as a UNIQUE constraint or index, is used.
func TestStore_TableWithoutKey(t *testing.T) {
	ctx := t.Context()
	const (
		fenceCols = "resource TEXT NOT NULL, last_token INTEGER NOT NULL, updated_at TEXT NOT NULL DEFAULT ''"
		runsCols  = "resource TEXT NOT NULL, run_id TEXT NOT NULL, token INTEGER NOT NULL, done_at TEXT NOT NULL DEFAULT ''"
	)
	for _, tc := range []struct {
		name  string
		ddl   []string
		table string // the table refused, "" for none
		key   string
	}{
		{"fence without a key", []string{"CREATE TABLE baton_fence (" + fenceCols + ")"}, "baton_fence", "resource"},
		{"fence keyed on more", []string{"CREATE TABLE baton_fence (" + fenceCols + ", PRIMARY KEY (resource, last_token))"}, "baton_fence", "resource"},
		{"fence with a partial index", []string{
			"CREATE TABLE baton_fence (" + fenceCols + ")",
			"CREATE UNIQUE INDEX f_res ON baton_fence (resource) WHERE last_token > 0",
		}, "baton_fence", "resource"},
		{"fence with an expression index", []string{
			"CREATE TABLE baton_fence (" + fenceCols + ")",
			"CREATE UNIQUE INDEX f_res ON baton_fence (lower(resource))",
		}, "baton_fence", "resource"},
		{"runs keyed on less", []string{"CREATE TABLE baton_runs (" + runsCols + ", PRIMARY KEY (run_id))"}, "baton_runs", "resource, run_id"},
		{"keys as constraints and indexes, more columns", []string{
			"CREATE TABLE baton_fence (id INTEGER PRIMARY KEY, note TEXT, " + fenceCols + ", UNIQUE (resource))",
			"CREATE TABLE baton_runs (" + runsCols + ", host TEXT)",
			"CREATE UNIQUE INDEX r_key ON baton_runs (run_id, resource)",
		}, "", ""},
		{"composite primary key in another order", []string{
			"CREATE TABLE baton_fence (" + fenceCols + ", PRIMARY KEY (resource)) WITHOUT ROWID",
			"CREATE TABLE baton_runs (" + runsCols + ", PRIMARY KEY (run_id, resource))",
		}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			db := openDB(t, path)
			for _, q := range tc.ddl {
				mustExec(t, db, q)
			}
			s, err := sqlite.New(ctx, db)
			if tc.table == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Raise(ctx, "a", 2); err != nil {
					t.Fatal(err)
				}
				if err := s.MarkDone(ctx, "a", "run-1", 2); err != nil {
					t.Fatal(err)
				}
				if err := s.MarkDone(ctx, "a", "run-1", 2); err != nil { // again: the key makes it nothing
					t.Fatal(err)
				}
				return
			}
			var fe *sqlite.ForeignTableError
			if !errors.As(err, &fe) || fe.Table != tc.table || fe.Column != tc.key {
				t.Fatalf("New: %v; want a *ForeignTableError for %s's key (%s)", err, tc.table, tc.key)
			}
			for _, want := range []string{`"` + tc.table + `"`, path, "no PRIMARY KEY or UNIQUE constraint on exactly (" + tc.key + ")", "baton fence init"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if _, err := sqlite.Open(ctx, path, sqlite.WithCreate(false)); !errors.As(err, &fe) {
				t.Errorf("Open: %v; want a *ForeignTableError", err)
			}
		})
	}
}
