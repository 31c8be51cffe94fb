package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/baton-go/baton"
)

// Querier runs statements: *sql.Tx, *sql.DB and *sql.Conn satisfy it. Check
// and InsertOnce take one so that they run inside the caller's transaction;
// Check takes only a *sql.Tx (or another type of the caller's that runs in
// one).
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Store is a fence kept in an SQLite database file: one row per resource
// holding the newest token seen, and a table of finished runs. It is safe
// for concurrent use, and several processes may share the file.
type Store struct {
	db    *sql.DB
	owned bool // Close closes db
	cfg   config
	where string // the database file, for messages
	sql   statements
}

var _ baton.Fence = (*Store)(nil)

// New returns a Store on db, a database/sql handle on the modernc.org/sqlite
// driver. With the default WithCreate(true) it creates the fence and runs
// tables if they are missing; with WithCreate(false) it checks that they
// exist and returns a *MissingTableError otherwise. Either way, a table of
// one of their names made by something else, without the columns or the
// key the store's statements use, is a *ForeignTableError. For several writers,
// open db with a busy timeout and _txlock=immediate, as DSN's settings do;
// without a busy timeout, a writer that finds the database locked fails at
// once. The Store does not close db.
func New(ctx context.Context, db *sql.DB, opts ...Option) (*Store, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, &baton.OptionError{Option: "db", Value: "nil", Reason: `pass a *sql.DB opened with the "sqlite" driver`}
	}
	return newStore(ctx, db, cfg, "")
}

// newStore builds the Store and creates or checks its tables. where names
// the file in messages; empty means ask SQLite.
func newStore(ctx context.Context, db *sql.DB, cfg config, where string) (*Store, error) {
	s := &Store{db: db, cfg: cfg, where: where, sql: newStatements(cfg.table, cfg.runs)}
	if s.where == "" {
		s.where = s.file(ctx)
	}
	var err error
	if cfg.create {
		err = s.Init(ctx)
	} else {
		err = s.checkTables(ctx)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Open opens the SQLite database file at path and returns New on it; with
// WithCreate(false), a missing file is a *MissingTableError (NoFile set),
// and Open creates nothing; the Store owns the handle, so Close it. With
// WithCreate(true), the default, it puts the file in WAL journaling
// (readers do not block the writer), a setting the file keeps; with false,
// it leaves the file's journal mode as it is, so that opening a file only
// to look at it changes nothing in it. Its connections wait up to the busy
// timeout (WithBusyTimeout, default 5s) for another writer, and
// begin every transaction with BEGIN IMMEDIATE, so that a fenced
// transaction holds the write lock from its start. synchronous stays FULL:
// a fence raise must survive a power loss. A file that cannot be used now
// returns an error wrapping baton.ErrUnavailable, and a path that names
// no file in an existing directory, or no database, an error that says
// what to check (see the package doc's Errors).
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	source, err := dsn(path, cfg, cfg.create)
	if err != nil {
		return nil, err
	}
	if !cfg.create {
		source += "&mode=rw" // a missing file stays missing
	}
	db, err := sql.Open("sqlite", source)
	if err != nil {
		return nil, &baton.UnavailableError{Where: path, Err: fmt.Errorf("%w; %s", err, hintOpen)}
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		if !cfg.create && missingFile(path) {
			return nil, &MissingTableError{Table: cfg.table, Where: path, NoFile: true}
		}
		s := Store{where: path}
		return nil, s.wrap(ctx, "open SQLite database", err, hintOpen)
	}
	s, err := newStore(ctx, db, cfg, path)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// missingFile reports whether path does not exist in a directory that
// does: fence init can create it there.
func missingFile(path string) bool {
	_, err := os.Stat(path)
	dir, derr := os.Stat(filepath.Dir(path))
	return errors.Is(err, fs.ErrNotExist) && derr == nil && dir.IsDir()
}

// DSN returns the modernc.org/sqlite data source name with which Open opens
// the database file at path (without WithCreate, Open adds mode=rw, so that
// a missing file is not created, and leaves out the WAL setting): WAL journaling, the busy timeout
// (WithBusyTimeout; the other options do not change it), synchronous FULL
// and BEGIN IMMEDIATE, with path escaped so that SQLite reads it as
// written. A program that keeps its own tables in the same file opens it
// with sql.Open("sqlite", dsn) and passes the handle to New. An invalid
// option, an empty path, ":memory:" or a "file:" URI is a
// *baton.OptionError.
func DSN(path string, opts ...Option) (string, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return "", err
	}
	return dsn(path, cfg, true)
}

// dsn is DSN with a validated config; wal says whether the connections put
// the file in WAL journaling.
func dsn(path string, cfg config, wal bool) (string, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return "", &baton.OptionError{Option: "SQLite path", Value: fmt.Sprintf("%q", path),
			Reason: "must be a file path; an in-memory database cannot fence other processes"}
	}
	// An SQLite URI's path is percent-decoded, and ? and # end it.
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.busyTimeout.Milliseconds()))
	if wal {
		q.Add("_pragma", "journal_mode(WAL)")
	}
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	return "file:" + esc + "?" + q.Encode(), nil
}

// file returns the main database's file name, or a description.
func (s *Store) file(ctx context.Context) string {
	var name string
	if err := s.db.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&name); err != nil || name == "" {
		return "SQLite database"
	}
	return name
}

// Close closes the database handle if the Store opened it with Open; a
// Store built with New leaves its *sql.DB to the caller.
func (s *Store) Close() error {
	if s.owned {
		return s.db.Close()
	}
	return nil
}

// Init creates the fence and runs tables if they do not exist. It is safe to
// run again, and from several processes at once.
func (s *Store) Init(ctx context.Context) error {
	op := fmt.Sprintf("create fence tables %q and %q", s.cfg.table, s.cfg.runs)
	for _, q := range []string{s.sql.createFence, s.sql.createRuns} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return s.wrap(ctx, op, err, hintOpen)
		}
	}
	return s.checkTables(ctx) // tables of that name may have been there before
}

// checkTables returns a *MissingTableError unless both tables exist, and a
// *ForeignTableError unless they have the columns the store's statements
// use and a PRIMARY KEY or UNIQUE constraint on exactly the key their ON
// CONFLICT names: a table of the same name made by something else would
// fail every raise, or every run, with "no such column" or "ON CONFLICT
// clause does not match any PRIMARY KEY or UNIQUE constraint". A table's
// columns tell both whether it exists (a missing table has none) and its
// primary key; its unique indexes tell its other keys.
func (s *Store) checkTables(ctx context.Context) error {
	for _, t := range []struct {
		name string
		want []string
		key  []string // sorted
	}{
		{s.cfg.table, []string{"resource", "last_token", "updated_at"}, []string{"resource"}},
		{s.cfg.runs, []string{"resource", "run_id", "token", "done_at"}, []string{"resource", "run_id"}},
	} {
		schema, name := schemaAndName(t.name)
		have, pk, err := s.columns(ctx, schema, name)
		if err != nil {
			return s.wrap(ctx, fmt.Sprintf("read the columns of table %q", t.name), err, hintOpen)
		}
		if len(have) == 0 {
			return &MissingTableError{Table: t.name, Where: s.where}
		}
		for _, c := range t.want {
			if !have[c] {
				return &ForeignTableError{Table: t.name, Where: s.where, Column: c, Problem: fmt.Sprintf("has no column %q", c)}
			}
		}
		keyed := slices.Equal(pk, t.key)
		if !keyed {
			keyed, err = s.uniqueOn(ctx, schema, name, t.key)
			if err != nil {
				return s.wrap(ctx, fmt.Sprintf("read the unique indexes of table %q", t.name), err, hintOpen)
			}
		}
		if !keyed {
			key := strings.Join(t.key, ", ")
			return &ForeignTableError{Table: t.name, Where: s.where, Column: key,
				Problem: fmt.Sprintf("has no PRIMARY KEY or UNIQUE constraint on exactly (%s), which the store's ON CONFLICT (%s) needs", key, key)}
		}
	}
	return nil
}

// columns returns the lower-cased names of a table's columns, and those
// of its primary key, sorted.
func (s *Store) columns(ctx context.Context, schema, table string) (map[string]bool, []string, error) {
	rows, err := s.db.QueryContext(ctx, columnsSQL, table, schema)
	if err != nil {
		return nil, nil, err
	}
	have := map[string]bool{}
	var pk []string
	for rows.Next() {
		var (
			c     string
			inKey int
		)
		if err = rows.Scan(&c, &inKey); err != nil {
			break
		}
		c = strings.ToLower(c)
		have[c] = true
		if inKey > 0 {
			pk = append(pk, c)
		}
	}
	if err := errors.Join(err, rows.Err(), rows.Close()); err != nil {
		return nil, nil, err
	}
	slices.Sort(pk)
	return have, pk, nil
}

// uniqueOn reports whether one of a table's unique indexes is on exactly
// the columns key (sorted, lower case), in any order.
func (s *Store) uniqueOn(ctx context.Context, schema, table string, key []string) (bool, error) {
	rows, err := s.db.QueryContext(ctx, uniqueSQL, table, schema)
	if err != nil {
		return false, err
	}
	// An index on an expression has a NULL column, read as "", which is no
	// key's column: it never matches, as no ON CONFLICT column list does.
	indexes := map[string][]string{}
	for rows.Next() {
		var (
			index  string
			column sql.NullString
		)
		if err = rows.Scan(&index, &column); err != nil {
			break
		}
		indexes[index] = append(indexes[index], strings.ToLower(column.String))
	}
	if err := errors.Join(err, rows.Err(), rows.Close()); err != nil {
		return false, err
	}
	for _, cols := range indexes {
		slices.Sort(cols)
		if slices.Equal(cols, key) {
			return true, nil
		}
	}
	return false, nil
}
