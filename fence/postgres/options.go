package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-go/baton"
)

// Default table names.
const (
	// DefaultTable is the fence table's default name.
	DefaultTable = "baton_fence"
	// DefaultRunsTable is the runs table's default name.
	DefaultRunsTable = "baton_runs"
)

// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN - 1); longer
// names would be silently truncated.
const maxIdentLen = 63

// Option configures a Store.
type Option func(*config)

type config struct {
	table  string
	runs   string
	create bool
}

func newConfig(opts []Option) (config, error) {
	c := config{table: DefaultTable, runs: DefaultRunsTable, create: true}
	for _, o := range opts {
		o(&c)
	}
	if err := validateTable("fence table", c.table); err != nil {
		return config{}, err
	}
	if err := validateTable("runs table", c.runs); err != nil {
		return config{}, err
	}
	if c.table == c.runs {
		return config{}, &baton.OptionError{Option: "runs table", Value: strconv.Quote(c.runs), Reason: "is the same as the fence table; give them different names"}
	}
	return c, nil
}

// WithTable sets the fence table's name. Default "baton_fence". The name is
// a table, optionally qualified by a schema ("ops.fence"); each part is
// letters, digits and underscores, not starting with a digit, at most 63
// bytes. It is quoted in SQL, so its case is kept.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithRunsTable sets the runs table's name, with the rules of WithTable.
// Default "baton_runs".
func WithRunsTable(name string) Option { return func(c *config) { c.runs = name } }

// WithCreate says whether New creates the tables when they are missing.
// Default true: New runs CREATE TABLE IF NOT EXISTS. With false, New only
// checks that both tables exist and otherwise returns a *MissingTableError;
// use it where the database user may not create tables, after running
// `baton fence init --store URL` once.
func WithCreate(create bool) Option { return func(c *config) { c.create = create } }

// validateTable checks a possibly schema-qualified table name.
func validateTable(what, name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return &baton.OptionError{Option: what, Value: strconv.Quote(name), Reason: "has more than one dot; write table or schema.table"}
	}
	for _, p := range parts {
		if err := validateIdent(what, name, p); err != nil {
			return err
		}
	}
	return nil
}

// validateIdent checks one part of an SQL identifier: name is the whole
// value, for the message.
func validateIdent(what, name, part string) error {
	bad := func(reason string) error {
		return &baton.OptionError{Option: what, Value: strconv.Quote(name), Reason: reason}
	}
	switch {
	case part == "":
		return bad("is empty; use letters, digits and underscores")
	case len(part) > maxIdentLen:
		return bad(fmt.Sprintf("has a part of %d bytes; PostgreSQL's limit is %d", len(part), maxIdentLen))
	case '0' <= part[0] && part[0] <= '9':
		return bad("starts with a digit; start it with a letter or an underscore")
	}
	for i := 0; i < len(part); i++ {
		b := part[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_') {
			return bad(fmt.Sprintf("has %q; use letters, digits and underscores", b))
		}
	}
	return nil
}

// quoteTable quotes a validated, possibly schema-qualified table name.
func quoteTable(name string) string {
	return pgxIdent(strings.Split(name, ".")...)
}
