package sqlite_test

import (
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/sqlite"
)

// A handle opened with DSN has Open's settings, and finds the file at
// exactly the path given, whatever URI characters it holds.
func TestDSN(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "led?ger #1 %41.db")
	dsn, err := sqlite.DSN(path, sqlite.WithBusyTimeout(7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlite.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(ctx, "invoices", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database is not at %q: %v", path, err)
	}
	for pragma, want := range map[string]string{"busy_timeout": "7000", "journal_mode": "wal", "synchronous": "2"} {
		var got string
		if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
}

func TestDSN_Bad(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db"} {
		if _, err := sqlite.DSN(path); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("DSN(%q): %v, want ErrInvalidOption", path, err)
		}
	}
	// Zero given is refused too, not taken for the default: it would mean
	// "never wait" to SQLite.
	for _, d := range []time.Duration{-time.Second, 0} {
		if _, err := sqlite.DSN("x.db", sqlite.WithBusyTimeout(d)); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("DSN with busy timeout %v: %v, want ErrInvalidOption", d, err)
		}
	}
}

// TestDSN_BusyTimeoutLimit: SQLite reads busy_timeout as a 32-bit count of
// milliseconds and takes a longer one for 0, never wait: it is refused,
// and the longest it takes is kept as given.
func TestDSN_BusyTimeoutLimit(t *testing.T) {
	const max = (1<<31 - 1) * time.Millisecond
	dsn, err := sqlite.DSN("x.db", sqlite.WithBusyTimeout(max))
	if err != nil || !strings.Contains(dsn, url.QueryEscape("busy_timeout(2147483647)")) {
		t.Fatalf("DSN with busy timeout %v = %q, %v; want busy_timeout(2147483647)", max, dsn, err)
	}
	for _, d := range []time.Duration{max + time.Millisecond, 1000 * time.Hour} {
		_, err := sqlite.DSN("x.db", sqlite.WithBusyTimeout(d))
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "2147483647ms") {
			t.Errorf("DSN with busy timeout %v: %v; want ErrInvalidOption naming the limit", d, err)
		}
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), sqlite.WithBusyTimeout(d))
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("Open with busy timeout %v: %v; want ErrInvalidOption", d, err)
		}
	}
}

// Open without WithCreate, as baton fence show and baton run --fence do,
// leaves a file's journal mode as it is: looking at a fence, or using it,
// must not change a file another program keeps in rollback journaling.
// Before, every Open put the file in WAL mode, for good.
func TestOpen_NoCreate_KeepsJournalMode(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sql.Open("sqlite", path) // rollback journaling, SQLite's default
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.New(ctx, db); err != nil { // creates the tables
		t.Fatal(err)
	}
	// Closed while Open runs: SQLite keeps a file's journal mode while
	// another connection has it open, which would hide a change.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(ctx, path, sqlite.WithCreate(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(ctx, "invoices", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = sql.Open("sqlite", path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "delete" {
		t.Errorf("journal_mode = %s after Open without WithCreate, want delete, as before", mode)
	}
}
