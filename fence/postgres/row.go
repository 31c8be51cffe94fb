package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
	"github.com/baton-go/baton/internal/nilval"
	"github.com/baton-go/baton/internal/pgkit"
)

// Row is one row to insert at most once: the guide's idempotent write,
// INSERT ... ON CONFLICT (Key) DO NOTHING, so that a redo by the next holder
// cannot create a duplicate.
type Row struct {
	// Table is the table's name, optionally schema-qualified, with the
	// rules of WithTable.
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

// insertSQL writes the row's INSERT with its values as parameters numbered
// from first, taken from VALUES, or with SELECT ... FROM from when from is
// not empty.
func (r Row) insertSQL(first int, from string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(quoteTable(r.Table))
	b.WriteString(" (")
	for i, c := range r.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgxIdent(c))
	}
	if from == "" {
		b.WriteString(") VALUES (")
	} else {
		b.WriteString(") SELECT ")
	}
	for i := range r.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(first + i))
	}
	if from == "" {
		b.WriteString(")")
	} else {
		b.WriteString(" FROM ")
		b.WriteString(from)
	}
	b.WriteString(" ON CONFLICT ")
	if len(r.Key) > 0 {
		b.WriteString("(")
		for i, c := range r.Key {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pgxIdent(c))
		}
		b.WriteString(") ")
	}
	b.WriteString("DO NOTHING")
	return b.String()
}

// InsertOnce inserts row with q, doing nothing if a row with the same key
// exists: inserted is false then, and err nil. Use it inside WithTx, with
// its tx, so that the insert is fenced:
//
//	err := store.WithTx(ctx, "invoices", token, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := postgres.InsertOnce(ctx, tx, postgres.Row{
//			Table:   "invoices",
//			Columns: []string{"client_id", "month", "amount", "token"},
//			Values:  []any{clientID, month, amount, token},
//			Key:     []string{"client_id", "month"},
//		})
//		return err
//	})
//
// Key must match a unique constraint or index of the table, or PostgreSQL
// refuses the statement (SQLSTATE 42P10).
func InsertOnce(ctx context.Context, q Querier, row Row) (inserted bool, err error) {
	if err := row.validate(); err != nil {
		return false, err
	}
	if what, isNil := nilval.Of(q); isNil {
		return false, &baton.OptionError{Option: "InsertOnce querier", Value: what, Reason: "pass the pgx.Tx or a pool to insert with"}
	}
	tag, err := q.Exec(ctx, row.insertSQL(1, ""), row.Values...)
	if err != nil {
		s := Store{where: pgkit.WhereOf(q)}
		return false, s.wrap(ctx, fmt.Sprintf("insert into %q", row.Table), err, stmtHint(q))
	}
	return tag.RowsAffected() == 1, nil
}

// Insert raises the fence for resource to token and inserts row in one
// statement, which is its own transaction: the fastest fenced write. A
// stale token returns a *baton.StaleTokenError and inserts nothing; a row
// whose key exists already returns inserted false and a nil error.
//
// When the fence holds exactly token (a holder's second and later writes),
// one round trip does it:
//
//	WITH f AS (
//		SELECT 1 FROM baton_fence WHERE resource = $1 AND last_token = $2 FOR SHARE
//	), ins AS (
//		INSERT INTO invoices (client_id, month, amount, token) SELECT $3, $4, $5, $6 FROM f
//		ON CONFLICT (client_id, month) DO NOTHING
//		RETURNING 1
//	)
//	SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM ins)
//
// (without the queue lock of a transaction's check: see the package doc).
// The share lock keeps a newer holder's raise waiting until the insert has
// committed; if a raise committed first, READ COMMITTED re-checks the WHERE
// clause against the raised row, and f is empty. The counts tell the
// fence's answer from the row's: (1, 0) is a duplicate row, and returns
// false at once, so that a holder's write made again waits for nothing
// (not even for its own open WithTx of the same resource). Only when f is
// empty (a new token, or a stale one) does a second statement raise the
// fence, taking the queue lock as the package doc shows, and insert:
//
//	WITH f AS (
//		INSERT INTO baton_fence AS cur (resource, last_token) SELECT $1, $2 FROM <the queue lock>
//		ON CONFLICT (resource) DO UPDATE SET last_token = EXCLUDED.last_token, updated_at = ...
//		WHERE cur.last_token <= EXCLUDED.last_token
//		RETURNING 1
//	), ins AS (
//		INSERT INTO invoices (client_id, month, amount, token) SELECT $3, $4, $5, $6 FROM f
//		ON CONFLICT (client_id, month) DO NOTHING
//		RETURNING 1
//	)
//	SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM ins)
//
// Both data-modifying CTEs run to completion whatever the outer query
// reads; the row's INSERT selects FROM f, so it inserts only when the fence
// accepted the token, and the counts tell a stale token (0, 0) from a
// duplicate row (1, 0). In both statements the values' parameter types come
// from the table's columns.
func (s *Store) Insert(ctx context.Context, resource string, token baton.Token, row Row) (inserted bool, err error) {
	if err := fencesql.ValidateToken(resource, token); err != nil {
		return false, err
	}
	if err := row.validate(); err != nil {
		return false, err
	}
	return s.insert(ctx, resource, token, row,
		fmt.Sprintf("fenced insert into %q on %q with token %d", row.Table, resource, token))
}

// insert runs the fenced single-statement insert of a validated row.
func (s *Store) insert(ctx context.Context, resource string, token baton.Token, row Row, op string) (bool, error) {
	args := make([]any, 0, 2+len(row.Values))
	args = append(args, resource, int64(token))
	args = append(args, row.Values...)

	var fenced, inserted int64
	err := s.db.QueryRow(ctx, s.sql.heldInsertHead+row.insertSQL(3, "f")+s.sql.fencedInsertTail, args...).Scan(&fenced, &inserted)
	if err != nil {
		return false, s.wrap(ctx, op, err, hintUnknown)
	}
	if fenced == 1 {
		return inserted == 1, nil // the fence holds token: nothing else to do
	}
	err = s.db.QueryRow(ctx, s.sql.fencedInsertHead+row.insertSQL(3, "f")+s.sql.fencedInsertTail, args...).Scan(&fenced, &inserted)
	if err != nil {
		return false, s.wrap(ctx, op, err, hintUnknown)
	}
	if fenced == 0 {
		return false, s.stale(ctx, s.db, resource, token)
	}
	return inserted == 1, nil
}
