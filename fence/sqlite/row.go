package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
	"github.com/baton-go/baton/internal/nilval"
)

// Row is one row to insert at most once: the guide's idempotent write,
// INSERT ... ON CONFLICT (Key) DO NOTHING, so that a redo by the next holder
// cannot create a duplicate.
type Row struct {
	// Table is the table's name, optionally qualified by an attached
	// database's name, with the rules of WithTable.
	Table string
	// Columns are the columns to set, with the rules of WithTable for one
	// part; Values holds their values, in the same order.
	Columns []string
	Values  []any
	// Key names the columns of the unique constraint that makes the row
	// unique, such as client_id and month. Empty means any unique
	// constraint (ON CONFLICT DO NOTHING).
	Key []string
}

// validate checks the row's shape and names.
func (r Row) validate() error { return fencesql.Row(r).Validate(qualifier) }

// insertSQL is the row's INSERT ... ON CONFLICT DO NOTHING.
func (r Row) insertSQL() string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(quoteTable(r.Table))
	b.WriteString(" (")
	for i, c := range r.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(c))
	}
	b.WriteString(") VALUES (")
	for i := range r.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("?")
	}
	b.WriteString(") ON CONFLICT ")
	if len(r.Key) > 0 {
		b.WriteString("(")
		for i, c := range r.Key {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(quoteIdent(c))
		}
		b.WriteString(") ")
	}
	b.WriteString("DO NOTHING")
	return b.String()
}

// InsertOnce inserts row with q, doing nothing if a row with the same key
// exists: inserted is false then, and err nil. Use it inside WithTx, with
// its tx, so that the insert is fenced. Key must match a PRIMARY KEY or
// UNIQUE constraint of the table, or SQLite refuses the statement.
func InsertOnce(ctx context.Context, q Querier, row Row) (inserted bool, err error) {
	if err := row.validate(); err != nil {
		return false, err
	}
	if what, isNil := nilval.Of(q); isNil {
		return false, &baton.OptionError{Option: "InsertOnce querier", Value: what, Reason: "pass the *sql.Tx or *sql.DB to insert with"}
	}
	return insertOnce(ctx, q, row, "")
}

func insertOnce(ctx context.Context, q Querier, row Row, where string) (bool, error) {
	res, err := q.ExecContext(ctx, row.insertSQL(), row.Values...)
	if err != nil {
		s := Store{where: where}
		return false, s.wrap(ctx, fmt.Sprintf("insert into %q", row.Table), err, hintNotDone)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("insert into %q: count the inserted rows: %w", row.Table, err)
	}
	return n == 1, nil
}

// Insert raises the fence for resource to token and inserts row, in one
// transaction. A stale token returns a *baton.StaleTokenError and inserts
// nothing; a row whose key exists already returns inserted false and a nil
// error. Any error returns inserted false, even one from the commit after
// the row's INSERT succeeded: the transaction was not committed.
//
// Unlike fence/postgres, this takes two statements: SQLite has no
// data-modifying common table expressions, and one INSERT writes one table,
// so the fence upsert and the row's INSERT cannot share a statement. They
// run in one transaction that holds the write lock from BEGIN (with Open's
// _txlock=immediate); SQLite runs in-process, so the extra statement costs
// no round trip.
func (s *Store) Insert(ctx context.Context, resource string, token baton.Token, row Row) (inserted bool, err error) {
	if err := row.validate(); err != nil {
		return false, err
	}
	err = s.WithTx(ctx, resource, token, func(ctx context.Context, tx *sql.Tx) error {
		inserted, err = insertOnce(ctx, tx, row, s.where)
		return err
	})
	if err != nil {
		return false, err
	}
	return inserted, nil
}
