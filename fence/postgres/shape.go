package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/pgkit"
)

// column is a column the store's statements use.
type column struct {
	name string
	typ  string // its type, as format_type writes it
	// written says the store's inserts set it; they leave the others
	// to their defaults.
	written bool
}

// accepts reports whether a column of type typ (as format_type writes
// it) does for c: the same type, or for text, varchar without a length
// or long enough for any name (baton.MaxNameLen characters).
func (c column) accepts(typ string) bool {
	if c.typ == "text" {
		if typ == "character varying" {
			return true
		}
		if n, ok := strings.CutPrefix(typ, "character varying("); ok {
			max, err := strconv.Atoi(strings.TrimSuffix(n, ")"))
			return err == nil && max >= baton.MaxNameLen
		}
	}
	return typ == c.typ
}

// tableSpec is what the store needs of one of its tables: the columns
// its statements use, and a unique index on exactly its key, which its
// INSERT ... ON CONFLICT (key) needs.
type tableSpec struct {
	kind    string // "fence" or "runs", for messages
	option  string // the Option that names the table
	columns []column
	key     []string // sorted
	ddl     string   // baton's definition: Init's CREATE TABLE, and the messages
}

var (
	fenceSpec = tableSpec{
		kind:   "fence",
		option: "WithTable",
		columns: []column{
			{name: "resource", typ: "text", written: true},
			{name: "last_token", typ: "bigint", written: true},
			{name: "updated_at", typ: "timestamp with time zone"},
		},
		key: []string{"resource"},
		ddl: "resource text PRIMARY KEY, last_token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now()",
	}
	runsSpec = tableSpec{
		kind:   "runs",
		option: "WithRunsTable",
		columns: []column{
			{name: "resource", typ: "text", written: true},
			{name: "run_id", typ: "text", written: true},
			{name: "token", typ: "bigint", written: true},
			{name: "done_at", typ: "timestamp with time zone"},
		},
		key: []string{"resource", "run_id"},
		ddl: "resource text, run_id text, token bigint NOT NULL, done_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (resource, run_id)",
	}
)

// keySQL is the spec's key as an SQL array literal, for shapeSQL.
func (spec tableSpec) keySQL() string {
	quoted := make([]string, len(spec.key))
	for i, k := range spec.key {
		quoted[i] = sqlString(k)
	}
	return "ARRAY[" + strings.Join(quoted, ", ") + "]::text[]"
}

// tableShape is what shapeSQL reads of one table.
type tableShape struct {
	found              bool
	names, types       []string
	defaulted, notNull []bool
	keyed              bool
}

// problem returns what keeps the store from using a table of shape t
// (which exists): the column at fault, or the key's columns, and what is
// wrong, as the error message says it. It returns "", "" when nothing
// does. Columns the spec does not name are fine unless they are NOT NULL
// without a default, which the store's inserts leave out.
func (spec tableSpec) problem(t tableShape) (col, problem string) {
	for _, c := range spec.columns {
		i := slices.Index(t.names, c.name)
		switch {
		case i < 0:
			return c.name, fmt.Sprintf("has no column %q", c.name)
		case !c.accepts(t.types[i]):
			return c.name, fmt.Sprintf("has column %q of type %s, not %s", c.name, t.types[i], c.typ)
		case !c.written && !t.defaulted[i]:
			return c.name, fmt.Sprintf("has column %q without a default, which the store's inserts rely on", c.name)
		}
	}
	for i, name := range t.names {
		named := slices.ContainsFunc(spec.columns, func(c column) bool { return c.name == name })
		if !named && t.notNull[i] && !t.defaulted[i] {
			return name, fmt.Sprintf("has column %q NOT NULL without a default, which the store's inserts leave out", name)
		}
	}
	if !t.keyed {
		key := strings.Join(spec.key, ", ")
		return key, fmt.Sprintf("has no primary key or unique constraint on exactly (%s), which the store's ON CONFLICT (%s) needs", key, key)
	}
	return "", ""
}

// checkTables returns a *MissingTableError unless both tables exist, and
// a *ForeignTableError unless they have the shape the store's statements
// need (see tableSpec.problem): a table of the same name made by
// something else would fail every raise, or every run, with "column does
// not exist" (SQLSTATE 42703) or "no unique or exclusion constraint
// matching the ON CONFLICT specification" (42P10). One statement, which
// reads only catalogs.
func (s *Store) checkTables(ctx context.Context) error {
	var db string
	var fence, runs tableShape
	err := s.db.QueryRow(ctx, s.sql.shape, quoteTable(s.cfg.table), quoteTable(s.cfg.runs)).Scan(&db,
		&fence.found, &fence.names, &fence.types, &fence.defaulted, &fence.notNull, &fence.keyed,
		&runs.found, &runs.names, &runs.types, &runs.defaulted, &runs.notNull, &runs.keyed)
	if err != nil {
		op := "check the fence tables"
		if pgkit.ConnFailure(err) {
			op = "connect" // the first statement of a Store: its connection's failure
		}
		return s.wrap(ctx, op, err, hintConnect)
	}
	where := s.where
	if where == "" {
		where = "database " + db
	}
	tables := []struct {
		name  string
		spec  tableSpec
		shape tableShape
	}{{s.cfg.table, fenceSpec, fence}, {s.cfg.runs, runsSpec, runs}}
	// A table the store cannot use first: Init, which New runs for a
	// missing one, would otherwise make the other and then refuse.
	for _, t := range tables {
		if !t.shape.found {
			continue
		}
		if col, problem := t.spec.problem(t.shape); problem != "" {
			return &ForeignTableError{Table: t.name, Where: where, Column: col, Problem: problem, Runs: t.spec.kind == "runs"}
		}
	}
	for _, t := range tables {
		if !t.shape.found {
			return &MissingTableError{Table: t.name, Where: where}
		}
	}
	return nil
}
