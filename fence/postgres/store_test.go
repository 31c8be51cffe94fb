package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestStore_Raise_Stale(t *testing.T) {
	s, _ := newStore(t)
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

func TestStore_New_Conn(t *testing.T) {
	dsn := pg.Database(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s, err := postgres.New(ctx, conn, postgres.WithTable("Fence"), postgres.WithRunsTable("public.runs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	var tok int64
	if err := conn.QueryRow(ctx, `SELECT last_token FROM "Fence" WHERE resource = 'a'`).Scan(&tok); err != nil || tok != 3 {
		t.Fatalf(`"Fence" holds %d, %v; want 3`, tok, err)
	}
	if err := s.MarkDone(ctx, "a", "run-1", 3); err != nil {
		t.Fatal(err)
	}
	if done, err := s.Done(ctx, "a", "run-1"); err != nil || !done {
		t.Fatalf("Done = %v, %v; want true", done, err)
	}
}

func TestStore_List(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	if got, err := s.List(ctx); err != nil || len(got) != 0 {
		t.Fatalf("List on an empty store = %v, %v; want none", got, err)
	}
	start := time.Now().Add(-time.Minute) // the server's clock may differ a little
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
	want := []postgres.Entry{{Resource: "a", Token: 9}, {Resource: "b", Token: 2}, {Resource: "c", Token: 4}}
	if len(got) != len(want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	for i := range got {
		if got[i].Resource != want[i].Resource || got[i].Token != want[i].Token || got[i].UpdatedAt.Before(start) {
			t.Errorf("List[%d] = %+v, want %+v updated after %v", i, got[i], want[i], start)
		}
	}
}

func TestStore_New_MissingTable(t *testing.T) {
	dsn := pg.Database(t)
	ctx := t.Context()
	_, err := postgres.Open(ctx, dsn, postgres.WithCreate(false))
	var missing *postgres.MissingTableError
	if !errors.As(err, &missing) || missing.Table != "baton_fence" {
		t.Fatalf("Open without tables: %v, want a *MissingTableError for baton_fence", err)
	}
	for _, want := range []string{`"baton_fence"`, "/" + dbName(dsn), "baton fence init --store URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	// With the fence table but not the runs table, the runs table is named.
	s, err := postgres.Open(ctx, dsn, postgres.WithRunsTable("other_runs"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = postgres.Open(ctx, dsn, postgres.WithCreate(false))
	if !errors.As(err, &missing) || missing.Table != "baton_runs" {
		t.Fatalf("Open without the runs table: %v, want a *MissingTableError for baton_runs", err)
	}

	// A table dropped after New is reported the same way.
	s, err = postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.List(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP TABLE baton_fence"); err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(ctx, "a", 1); !errors.As(err, &missing) || missing.Table != "baton_fence" {
		t.Fatalf("Raise after DROP TABLE: %v, want a *MissingTableError", err)
	}
}

func dbName(dsn string) string { return dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")] }

// TestStore_Open_Unavailable: a server that does not answer is
// unavailable; one that answers but refuses the URL's database or user is
// a configuration error (the CLI's exit 2), which trying again cannot mend.
func TestStore_Open_Unavailable(t *testing.T) {
	admin := pg.Admin(t) // the server is up: only the DSN is wrong
	port := strings.TrimPrefix(admin[strings.LastIndex(admin, ":"):strings.LastIndex(admin, "/")], ":")
	for _, tc := range []struct {
		name, dsn string
		refused   bool
		advice    string // what the refusal says to check
	}{
		{"closed port", "postgres://postgres:s3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", false, ""},
		{"no such database", "postgres://postgres:s3cret@127.0.0.1:" + port + "/no_such_db?sslmode=disable&connect_timeout=2", true, "check the database name"},
		{"no such user", "postgres://nobody:s3cret@127.0.0.1:" + port + "/postgres?sslmode=disable&connect_timeout=2", true, "check the user"},
		{"TLS required", "postgres://postgres:s3cret@127.0.0.1:" + port + "/postgres?sslmode=require&connect_timeout=2", true, "sslmode=prefer or disable"},
		{"unknown parameter", "postgres://postgres:s3cret@127.0.0.1:" + port + "/postgres?sslmode=disable&bogus=1&connect_timeout=2", true, "the URL's parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			s, err := postgres.Open(ctx, tc.dsn)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if tc.refused {
				if !errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "refused") {
					t.Errorf("Open: %v, want an invalid option the server refused", err)
				}
				// One piece of advice: not also the unreachable server's.
				if !strings.Contains(err.Error(), tc.advice) || strings.Contains(err.Error(), "check that PostgreSQL is running") {
					t.Errorf("Open: %v; want it to say %q, and nothing of a server not running", err, tc.advice)
				}
			} else if !errors.Is(err, baton.ErrUnavailable) || !strings.HasPrefix(err.Error(), "connect: ") {
				t.Errorf("Open: %v, want ErrUnavailable, failing to connect (not to check the tables)", err)
			}
			if !strings.Contains(err.Error(), "127.0.0.1:") {
				t.Errorf("Open: %v, want it to name 127.0.0.1", err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows the password: %v", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Open took %v", d)
			}
		})
	}
}

func TestStore_Open_BadURL(t *testing.T) {
	_, err := postgres.Open(t.Context(), "postgres://u:s3cret@127.0.0.1:notaport/db")
	if !errors.Is(err, baton.ErrInvalidOption) {
		t.Fatalf("Open: %v, want ErrInvalidOption", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
}

func TestStore_New_BadIdentifiers(t *testing.T) {
	ctx := t.Context()
	for _, opt := range []postgres.Option{
		postgres.WithTable(""),
		postgres.WithTable("fence; DROP TABLE x"),
		postgres.WithTable(`fe"nce`),
		postgres.WithTable("1fence"),
		postgres.WithTable("a.b.c"),
		postgres.WithTable(strings.Repeat("x", 64)),
		postgres.WithRunsTable("runs-table"),
		postgres.WithRunsTable("baton_fence"), // the same as the fence table
	} {
		// The options are checked before the database is touched.
		if _, err := postgres.New(ctx, nil, opt); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("New: %v, want ErrInvalidOption", err)
		}
	}
	if _, err := postgres.New(ctx, nil); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("New(nil db): %v, want ErrInvalidOption", err)
	}
}

func TestStore_Row_BadIdentifiers(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustExec(t, pool, invoicesDDL)
	for _, r := range []postgres.Row{
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
		if _, err := postgres.InsertOnce(ctx, pool, r); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("InsertOnce(%+v): %v, want ErrInvalidOption", r, err)
		}
	}
	if n, err := s.Newest(ctx, "r"); err != nil || n != 0 {
		t.Errorf("a refused Insert raised the fence to %d (%v)", n, err)
	}
}

// TestStore_Check_NeedsTx: Check on a pool, or on a connection outside a
// transaction, would fence nothing (the row's lock ends with the check's
// statement): it is refused, and the fence is not raised. In a
// transaction of the connection it runs.
func TestStore_Check_NeedsTx(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	if err := s.Check(ctx, pool, "invoices", 3); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "pgx.Tx") {
		t.Fatalf("Check on a pool: %v; want an invalid option asking for the transaction", err)
	}
	conn, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := s.Check(ctx, conn, "invoices", 3); !errors.Is(err, baton.ErrInvalidOption) {
		t.Fatalf("Check on a connection outside a transaction: %v; want an invalid option", err)
	}
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	if err := s.Check(ctx, pc, "invoices", 3); !errors.Is(err, baton.ErrInvalidOption) {
		t.Fatalf("Check on a pool's connection outside a transaction: %v; want an invalid option", err)
	}
	if n, err := s.Newest(ctx, "invoices"); err != nil || n != 0 {
		t.Fatalf("after the refused checks the fence holds %d (%v); want nothing raised", n, err)
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, conn, "invoices", 3); err != nil {
		t.Fatalf("Check in the connection's transaction: %v", err)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Newest(ctx, "invoices"); err != nil || n != 3 {
		t.Fatalf("fence holds %d (%v); want 3", n, err)
	}
}

// TestStore_Check_Nil: a nil querier, or a nil pointer of one of pgx's
// types, is refused, not a panic.
func TestStore_Check_Nil(t *testing.T) {
	s, _ := newStore(t)
	for _, q := range []postgres.Querier{nil, (*pgx.Conn)(nil), (*pgxpool.Conn)(nil), (*pgxpool.Tx)(nil), (*pgxpool.Pool)(nil)} {
		if err := s.Check(t.Context(), q, "invoices", 3); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "nil") {
			t.Errorf("Check(%#v): %v; want an invalid option naming nil", q, err)
		}
		row := postgres.Row{Table: "invoices", Columns: []string{"id"}, Values: []any{1}, Key: []string{"id"}}
		if ok, err := postgres.InsertOnce(t.Context(), q, row); ok || !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "nil") {
			t.Errorf("InsertOnce(%#v): %v, %v; want an invalid option naming nil", q, ok, err)
		}
	}
}
