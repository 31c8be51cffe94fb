package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
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
