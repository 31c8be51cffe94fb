package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/baton-go/baton"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// MissingTableError says that one of the store's tables does not exist, or
// (NoFile) the database file itself.
type MissingTableError struct {
	Table  string // the table's name, as configured
	Where  string // the database file
	NoFile bool   // the file itself does not exist
}

func (e *MissingTableError) Error() string {
	if e.NoFile {
		return fmt.Sprintf("%s does not exist; create it and baton's fence tables with `baton fence init --store URL` (or WithCreate(true))", e.Where)
	}
	return fmt.Sprintf("table %q does not exist in %s; create baton's fence tables with `baton fence init --store URL` (or Store.Init, or WithCreate(true))", e.Table, e.Where)
}

// ForeignTableError says that a table of the store's name lacks a column
// the store's statements use, or the PRIMARY KEY or UNIQUE constraint on
// exactly the key their ON CONFLICT names ((resource) for the fence table,
// (resource, run_id) for the runs table): something other than baton made
// it. Other columns and keys are fine.
type ForeignTableError struct {
	Table  string // the table's name, as configured
	Where  string // the database file
	Column string // the first column missing; for a missing key, the key's columns ("resource, run_id")
	// Problem is what is wrong, as the message says it:
	// `has no column "last_token"`.
	Problem string
}

func (e *ForeignTableError) Error() string {
	return fmt.Sprintf("table %q in %s %s: it was not made by baton; give the store another table name (WithTable, WithRunsTable), or rename or drop it, then create baton's with `baton fence init --store URL` (or Store.Init)", e.Table, e.Where, e.Problem)
}

// Hints appended to an error's cause: an *baton.UnavailableError's, or
// (hintOpen) a wrong path's.
const (
	hintOpen    = "check that the file's directory exists and is writable, and that the file is an SQLite database"
	hintNotDone = "the transaction was not committed, so nothing was written; retry"
	hintBusy    = "another connection or process held the database's write lock for longer than the busy timeout (WithBusyTimeout, or busy_timeout in a sqlite: URL), or a store call (Raise, Insert, MarkDone, WithTx) made inside WithTx's fn waited for fn's own transaction, which holds it (use fn's tx for writes there); nothing was written; retry"
	// hintRolledBack is for a COMMIT that finds no transaction: SQLite
	// rolled it back when one of fn's statements failed (interrupted by
	// its context, an I/O error, a full disk, no memory), fn did not
	// return that error, and fn's later statements ran on their own.
	hintRolledBack = "the transaction was rolled back by an earlier statement in fn that failed (interrupted, I/O error, disk full, out of memory) and whose error fn did not return: the fence check and fn's writes before that statement were not kept, and writes fn made after it may have committed on their own, outside the fence; check them, and return a failed statement's error from fn"
	// hintSnapshot is for SQLITE_BUSY_SNAPSHOT, which no busy timeout
	// waits out: a retry that reads first fails the same way.
	hintSnapshot = "the transaction read before it wrote, and another connection wrote meanwhile; nothing was written; begin the transaction with BEGIN IMMEDIATE (_txlock=immediate in the driver's DSN, as Open does), or Check before any read, and retry"
)

// wrap adds op's context to err, classifying it: the cause of a cancelled
// ctx, an *baton.UnavailableError when the file cannot be used or stays
// locked, a *MissingTableError when one of the store's tables is missing.
func (s *Store) wrap(ctx context.Context, op string, err error, hint string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, context.Cause(ctx))
	}
	if errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrStaleToken) || errors.Is(err, baton.ErrInvalidOption) {
		return fmt.Errorf("%s: %w", op, err)
	}
	ext, isUnavailable := unavailable(err)
	code := ext & 0xff // the primary code; extended codes add bits above
	if isUnavailable {
		switch {
		case ext == sqlite3.SQLITE_BUSY_SNAPSHOT:
			hint = hintSnapshot
		case code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED:
			hint = hintBusy
		}
		return fmt.Errorf("%s: %w", op, &baton.UnavailableError{Where: s.where, Err: fmt.Errorf("%w; %s", err, hint)})
	}
	if table, ok := s.missingTable(err); ok {
		return fmt.Errorf("%s: %w", op, &MissingTableError{Table: table, Where: s.where})
	}
	if code == sqlite3.SQLITE_CANTOPEN || code == sqlite3.SQLITE_NOTADB {
		// The path names no directory, or no database: a mistake in the
		// store's URL, which trying again will not mend (so not
		// unavailable, which wrappers retry).
		return fmt.Errorf("%s: %s: %w; %s", op, s.where, err, hintOpen)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// unavailable reports whether err means the database file cannot be used
// now, rather than a statement being refused, and its extended result
// code (SQLite's, whenever err is one; the primary code is its low byte). A file that cannot be opened at all
// (CANTOPEN: its directory is missing) or is no database (NOTADB) is not
// unavailable: it is a wrong path.
func unavailable(err error) (int, bool) {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED,
		sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY,
		sqlite3.SQLITE_FULL:
		return se.Code(), true
	}
	return se.Code(), false
}

// noTransaction reports whether err is SQLite's refusal of a COMMIT
// outside a transaction ("cannot commit - no transaction is active"), which
// SQLite reports with the generic SQLITE_ERROR code, so only its message
// tells it.
func noTransaction(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_ERROR && strings.Contains(se.Error(), "no transaction is active")
}

// missingTable reports which of the store's tables err says is missing.
func (s *Store) missingTable(err error) (string, bool) {
	const prefix = "no such table: "
	msg := err.Error()
	i := strings.Index(msg, prefix)
	if i < 0 {
		return "", false
	}
	name := msg[i+len(prefix):]
	if end := strings.IndexFunc(name, func(r rune) bool {
		return !(r == '_' || r == '.' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}); end >= 0 {
		name = name[:end]
	}
	for _, t := range []string{s.cfg.table, s.cfg.runs} {
		// SQLite names are case-insensitive; it may add "main.".
		if strings.EqualFold(name, t) || strings.EqualFold(name, "main."+t) {
			return t, true
		}
	}
	return "", false
}
