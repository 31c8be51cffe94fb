package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/fence/postgres"
	"github.com/baton-go/baton/fence/sqlite"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The cases below run against every store: fence.Store through fence.Open,
// and each store's WithTx, InsertOnce and Insert through a driver.

// row has the fields of postgres.Row and sqlite.Row, so it converts to both.
type row struct {
	Table   string
	Columns []string
	Values  []any
	Key     []string
}

// driver is what the cases need from a concrete store beyond fence.Store.
type driver interface {
	// withTx runs WithTx(resource, token) and, in it, InsertOnce for each
	// row, then returns fnErr.
	withTx(ctx context.Context, resource string, token baton.Token, rows []row, fnErr error) ([]bool, error)
	insert(ctx context.Context, resource string, token baton.Token, r row) (bool, error)
	// exec and count run SQL outside the fence.
	exec(t *testing.T, query string)
	count(t *testing.T, query string) int
}

// env is one store under test.
type env struct {
	url   string
	store fence.Store // through fence.Open
	d     driver      // the same database through the concrete store
}

type backend struct {
	name string
	url  func(t *testing.T) string           // a fresh, empty database
	open func(t *testing.T, u string) driver // creates the tables
}

var backends = []backend{
	{
		name: "postgres",
		url:  func(t *testing.T) string { return pg.Database(t) },
		open: func(t *testing.T, u string) driver {
			s, err := postgres.Open(t.Context(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			db, err := pgxpool.New(t.Context(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(db.Close)
			return pgDriver{s, db}
		},
	},
	{
		name: "sqlite",
		// An empty file: an SQLite database without tables (a missing file
		// is sqlite's TestOpen_MissingFile). Writers wait up to a minute
		// for the write lock, not the default 5s: SQLite's busy handler
		// retries on a timer, so it serves no writer in turn, and under
		// -race on a loaded machine one of TestStore_Raise_Concurrent's 16
		// could wait out 5s while the others took the lock.
		url: func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "fence.db")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return "sqlite:" + path + "?busy_timeout=" + sqliteBusy.String()
		},
		open: func(t *testing.T, u string) driver {
			path, _, _ := strings.Cut(strings.TrimPrefix(u, "sqlite:"), "?")
			s, err := sqlite.Open(t.Context(), path, sqlite.WithBusyTimeout(sqliteBusy))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			db, err := sql.Open("sqlite", fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)", path, sqliteBusy.Milliseconds()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return sqliteDriver{s, db}
		},
	},
}

// sqliteBusy is the SQLite stores' busy timeout in these tests.
const sqliteBusy = time.Minute

// forEach runs test against every backend, each on a fresh database with
// the fence tables and the guide's invoices table.
func forEach(t *testing.T, test func(t *testing.T, e env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			u := b.url(t)
			d := b.open(t, u)
			s, err := fence.Open(t.Context(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			d.exec(t, invoicesDDL)
			test(t, env{url: u, store: s, d: d})
		})
	}
}

const invoicesDDL = `CREATE TABLE invoices (
	client_id int,
	month     text,
	amount    numeric(12,2),
	token     bigint NOT NULL,
	PRIMARY KEY (client_id, month)
)`

func invoice(client int, token baton.Token) row {
	return row{
		Table:   "invoices",
		Columns: []string{"client_id", "month", "amount", "token"},
		Values:  []any{client, "2026-10", "12.50", int64(token)},
		Key:     []string{"client_id", "month"},
	}
}

func wantStale(t *testing.T, err error, resource string, got, newest baton.Token) {
	t.Helper()
	var stale *baton.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, baton.ErrStaleToken) {
		t.Fatalf("err = %v, want a *baton.StaleTokenError", err)
	}
	if *stale != (baton.StaleTokenError{Resource: resource, Got: got, Newest: newest}) {
		t.Fatalf("stale error %+v, want resource %q, got %d, newest %d", *stale, resource, got, newest)
	}
}

func wantNewest(t *testing.T, e env, resource string, want baton.Token) {
	t.Helper()
	if n, err := e.store.Newest(t.Context(), resource); err != nil || n != want {
		t.Fatalf("Newest(%q) = %d, %v; want %d", resource, n, err, want)
	}
}

func TestStore_Raise_EqualAndHigher(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		wantNewest(t, e, "invoices", 0)
		// updated_at says when the current token was first accepted.
		var (
			lastTok baton.Token
			since   time.Time
		)
		for _, tok := range []baton.Token{3, 3, 4, 10, 10} {
			if err := e.store.Raise(ctx, "invoices", tok); err != nil {
				t.Fatalf("Raise(%d): %v", tok, err)
			}
			wantNewest(t, e, "invoices", tok)
			entries, err := e.store.List(ctx)
			if err != nil || len(entries) != 1 {
				t.Fatalf("List = %v, %v; want one entry", entries, err)
			}
			u := entries[0].UpdatedAt
			switch {
			case tok == lastTok && !u.Equal(since):
				t.Errorf("Raise(%d) again moved updated_at from %v to %v", tok, since, u)
			case tok != lastTok && u.Before(since):
				t.Errorf("Raise(%d) moved updated_at back from %v to %v", tok, since, u)
			}
			lastTok, since = tok, u
		}
		// updated_at moves to about now when the token rises, and only
		// then: set it back by hand, so that neither can pass unseen.
		old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		e.d.exec(t, "UPDATE baton_fence SET updated_at = '2001-02-03T04:05:06.000Z' WHERE resource = 'invoices'")
		updatedAt := func() time.Time {
			t.Helper()
			entries, err := e.store.List(ctx)
			if err != nil || len(entries) != 1 {
				t.Fatalf("List = %v, %v; want one entry", entries, err)
			}
			return entries[0].UpdatedAt
		}
		if u := updatedAt(); !u.Equal(old) {
			t.Fatalf("updated_at %v after setting it, want %v", u, old)
		}
		if err := e.store.Raise(ctx, "invoices", 10); err != nil {
			t.Fatal(err)
		}
		if u := updatedAt(); !u.Equal(old) {
			t.Errorf("Raise(10) again moved updated_at from %v to %v", old, u)
		}
		before := time.Now().Add(-time.Minute) // the server's clock may differ a little
		if err := e.store.Raise(ctx, "invoices", 11); err != nil {
			t.Fatal(err)
		}
		if u := updatedAt(); u.Before(before) || u.After(time.Now().Add(time.Minute)) {
			t.Errorf("Raise(11) left updated_at at %v; want about now", u)
		}
		// Resources are independent.
		if err := e.store.Raise(ctx, "stock", 1); err != nil {
			t.Fatal(err)
		}
		entries, err := e.store.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 || entries[0].Resource != "invoices" || entries[0].Token != 11 || entries[1].Resource != "stock" || entries[1].Token != 1 {
			t.Errorf("List = %+v, want invoices at 11 and stock at 1", entries)
		}
	})
}

func TestStore_Raise_Stale(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		if err := e.store.Raise(ctx, "invoices", 42); err != nil {
			t.Fatal(err)
		}
		wantStale(t, e.store.Raise(ctx, "invoices", 41), "invoices", 41, 42)
		wantNewest(t, e, "invoices", 42)
	})
}

func TestStore_WithTx_StaleLeavesNoRow(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		if err := e.store.Raise(ctx, "invoices", 10); err != nil {
			t.Fatal(err)
		}
		_, err := e.d.withTx(ctx, "invoices", 9, []row{invoice(1, 9), invoice(2, 9)}, nil)
		wantStale(t, err, "invoices", 9, 10)
		if n := e.d.count(t, "SELECT count(*) FROM invoices"); n != 0 {
			t.Errorf("%d invoices written with a stale token, want none", n)
		}
		got, err := e.d.withTx(ctx, "invoices", 10, []row{invoice(1, 10), invoice(2, 10)}, nil)
		if err != nil || !slices.Equal(got, []bool{true, true}) {
			t.Fatalf("withTx(10) = %v, %v; want both inserted", got, err)
		}
		if n := e.d.count(t, "SELECT count(*) FROM invoices"); n != 2 {
			t.Errorf("%d invoices, want 2", n)
		}
	})
}

func TestStore_WithTx_ErrorRollsBack(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		if err := e.store.Raise(ctx, "invoices", 5); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		if _, err := e.d.withTx(ctx, "invoices", 6, []row{invoice(1, 6)}, boom); !errors.Is(err, boom) {
			t.Fatalf("withTx = %v, want fn's error", err)
		}
		if n := e.d.count(t, "SELECT count(*) FROM invoices"); n != 0 {
			t.Errorf("%d invoices kept after fn failed, want none", n)
		}
		wantNewest(t, e, "invoices", 5) // the raise to 6 was rolled back too
	})
}

// The guide's scenario: holder 41 bills, is frozen, holder 42 takes over
// and raises the fence, 41 wakes and its next write is refused.
func TestStore_Guide_FrozenHolder(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		if err := e.store.Raise(ctx, "invoices", 41); err != nil { // run_invoice_job's first step
			t.Fatal(err)
		}
		for c := 1; c <= 3; c++ {
			if _, err := e.d.withTx(ctx, "invoices", 41, []row{invoice(c, 41)}, nil); err != nil {
				t.Fatalf("holder 41, client %d: %v", c, err)
			}
		}
		// 41 freezes; 42 takes the lock and raises the fence first thing.
		if err := e.store.Raise(ctx, "invoices", 42); err != nil {
			t.Fatal(err)
		}
		// 41 wakes: its next write is refused.
		_, err := e.d.withTx(ctx, "invoices", 41, []row{invoice(4, 41)}, nil)
		wantStale(t, err, "invoices", 41, 42)
		_, err = e.d.insert(ctx, "invoices", 41, invoice(5, 41))
		wantStale(t, err, "invoices", 41, 42)
		// 42 bills everyone from the start; the redo of 1-3 does nothing.
		for c := 1; c <= 6; c++ {
			got, err := e.d.withTx(ctx, "invoices", 42, []row{invoice(c, 42)}, nil)
			if err != nil || got[0] != (c > 3) {
				t.Fatalf("holder 42, client %d: inserted %v, %v; want %v", c, got, err, c > 3)
			}
		}
		if n := e.d.count(t, "SELECT count(*) FROM invoices WHERE token = 41"); n != 3 {
			t.Errorf("%d invoices from holder 41, want the 3 written before the raise", n)
		}
		if n := e.d.count(t, "SELECT count(*) FROM invoices"); n != 6 {
			t.Errorf("%d invoices, want 6", n)
		}
	})
}

func TestStore_InsertOnce_Duplicate(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		got, err := e.d.withTx(t.Context(), "invoices", 1, []row{invoice(1, 1), invoice(1, 1), invoice(2, 1)}, nil)
		if err != nil || !slices.Equal(got, []bool{true, false, true}) {
			t.Fatalf("InsertOnce results %v, %v; want [true false true]", got, err)
		}
	})
}

func TestStore_Insert_StaleVsDuplicate(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		for _, step := range []struct {
			token  baton.Token
			client int
			want   bool
		}{{5, 1, true}, {5, 1, false}, {8, 1, false}, {8, 2, true}} {
			got, err := e.d.insert(ctx, "invoices", step.token, invoice(step.client, step.token))
			if err != nil || got != step.want {
				t.Fatalf("Insert(token %d, client %d) = %v, %v; want %v, nil", step.token, step.client, got, err, step.want)
			}
		}
		wantNewest(t, e, "invoices", 8)
		_, err := e.d.insert(ctx, "invoices", 7, invoice(3, 7))
		wantStale(t, err, "invoices", 7, 8)
		_, err = e.d.insert(ctx, "invoices", 7, invoice(1, 7)) // stale and duplicate: stale
		wantStale(t, err, "invoices", 7, 8)
		if n := e.d.count(t, "SELECT count(*) FROM invoices"); n != 2 {
			t.Errorf("%d invoices, want 2", n)
		}
	})
}

func TestStore_Raise_Concurrent(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		const workers, each = 16, 20
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			max baton.Token
		)
		errs := make(chan error, workers*each)
		for range workers {
			wg.Go(func() {
				for range each {
					tok := baton.Token(rand.IntN(100_000) + 1)
					mu.Lock()
					max = baton.Token(slices.Max([]int64{int64(max), int64(tok)}))
					mu.Unlock()
					err := e.store.Raise(ctx, "r", tok)
					var stale *baton.StaleTokenError
					switch {
					case err == nil:
					case errors.As(err, &stale):
						if stale.Newest <= tok {
							errs <- err // refused without a newer token
						}
					default:
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		wantNewest(t, e, "r", max)
	})
}

func TestStore_MarkDone_Stale(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		if err := e.store.Raise(ctx, "invoices", 5); err != nil {
			t.Fatal(err)
		}
		wantStale(t, e.store.MarkDone(ctx, "invoices", "2026-10", 4), "invoices", 4, 5)
		if done, err := e.store.Done(ctx, "invoices", "2026-10"); err != nil || done {
			t.Fatalf("Done after a stale MarkDone = %v, %v; want false", done, err)
		}
		if n := e.d.count(t, "SELECT count(*) FROM baton_runs"); n != 0 {
			t.Fatalf("%d runs recorded by a stale holder, want none", n)
		}
		if err := e.store.MarkDone(ctx, "invoices", "2026-10", 6); err != nil {
			t.Fatal(err)
		}
		if err := e.store.MarkDone(ctx, "invoices", "2026-10", 6); err != nil { // again: fine
			t.Fatal(err)
		}
		if done, err := e.store.Done(ctx, "invoices", "2026-10"); err != nil || !done {
			t.Fatalf("Done = %v, %v; want true", done, err)
		}
		if done, err := e.store.Done(ctx, "invoices", "2026-11"); err != nil || done {
			t.Fatalf("Done(another run) = %v, %v; want false", done, err)
		}
		wantNewest(t, e, "invoices", 6) // MarkDone raised the fence
	})
}

func TestStore_Open_MissingTables(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			u := b.url(t)
			_, err := fence.Open(ctx, u)
			if err == nil || !strings.Contains(err.Error(), "baton fence init --store URL") || !strings.Contains(err.Error(), `"baton_fence"`) {
				t.Fatalf("Open without tables: %v, want an error naming baton_fence and saying to run baton fence init", err)
			}
			s, err := fence.Open(ctx, u, fence.WithCreate(true))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Init(ctx); err != nil { // again: fine
				t.Fatal(err)
			}
			s.Close()
			s, err = fence.Open(ctx, u)
			if err != nil {
				t.Fatalf("Open after init: %v", err)
			}
			s.Close()
		})
	}
}

func TestStore_BadNames(t *testing.T) {
	forEach(t, func(t *testing.T, e env) {
		ctx := t.Context()
		for _, err := range []error{
			e.store.Raise(ctx, "", 1),
			e.store.Raise(ctx, "a/b", 1),
			e.store.Raise(ctx, "a", 0),
			e.store.Raise(ctx, "a", -1),
			e.store.MarkDone(ctx, "a", "", 1),
			e.store.MarkDone(ctx, "a", "run\x00", 1),
			func() error { _, err := e.store.Done(ctx, "a b", "r"); return err }(),
			func() error { _, err := e.store.Newest(ctx, ""); return err }(),
			func() error {
				_, err := e.d.insert(ctx, "a", 1, row{Table: "invoices; --", Columns: []string{"x"}, Values: []any{1}})
				return err
			}(),
			func() error {
				_, err := e.d.withTx(ctx, "a", 1, []row{{Table: "invoices", Columns: []string{`x"`}, Values: []any{1}}}, nil)
				return err
			}(),
		} {
			if !errors.Is(err, baton.ErrInvalidOption) {
				t.Errorf("err = %v, want ErrInvalidOption", err)
			}
		}
		if entries, err := e.store.List(ctx); err != nil || len(entries) != 0 {
			t.Errorf("List = %v, %v; refused calls must not write", entries, err)
		}
	})
}

// pgDriver drives a *postgres.Store, with its own pool for test SQL.
type pgDriver struct {
	s  *postgres.Store
	db *pgxpool.Pool
}

func (d pgDriver) withTx(ctx context.Context, resource string, token baton.Token, rows []row, fnErr error) ([]bool, error) {
	var got []bool
	err := d.s.WithTx(ctx, resource, token, func(ctx context.Context, tx pgx.Tx) error {
		for _, r := range rows {
			ok, err := postgres.InsertOnce(ctx, tx, postgres.Row(r))
			if err != nil {
				return err
			}
			got = append(got, ok)
		}
		return fnErr
	})
	return got, err
}

func (d pgDriver) insert(ctx context.Context, resource string, token baton.Token, r row) (bool, error) {
	return d.s.Insert(ctx, resource, token, postgres.Row(r))
}

func (d pgDriver) exec(t *testing.T, query string) {
	t.Helper()
	if _, err := d.db.Exec(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (d pgDriver) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	if err := d.db.QueryRow(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// sqliteDriver drives a *sqlite.Store, with its own handle for test SQL.
type sqliteDriver struct {
	s  *sqlite.Store
	db *sql.DB
}

func (d sqliteDriver) withTx(ctx context.Context, resource string, token baton.Token, rows []row, fnErr error) ([]bool, error) {
	var got []bool
	err := d.s.WithTx(ctx, resource, token, func(ctx context.Context, tx *sql.Tx) error {
		for _, r := range rows {
			ok, err := sqlite.InsertOnce(ctx, tx, sqlite.Row(r))
			if err != nil {
				return err
			}
			got = append(got, ok)
		}
		return fnErr
	})
	return got, err
}

func (d sqliteDriver) insert(ctx context.Context, resource string, token baton.Token, r row) (bool, error) {
	return d.s.Insert(ctx, resource, token, sqlite.Row(r))
}

func (d sqliteDriver) exec(t *testing.T, query string) {
	t.Helper()
	if _, err := d.db.ExecContext(t.Context(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (d sqliteDriver) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	if err := d.db.QueryRowContext(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
