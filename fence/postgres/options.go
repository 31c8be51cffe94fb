package postgres

import (
	"strings"

	"github.com/baton-go/baton/fence/internal/fencesql"
)

// Default table names.
const (
	// DefaultTable is the fence table's default name.
	DefaultTable = "baton_fence"
	// DefaultRunsTable is the runs table's default name.
	DefaultRunsTable = "baton_runs"
)

// qualifier is what may qualify a table name here, for messages.
const qualifier = "schema"

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
	if err := fencesql.ValidateTables(c.table, c.runs, qualifier); err != nil {
		return config{}, err
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
// Default true: New runs CREATE TABLE IF NOT EXISTS when a table is
// missing. With false, New only checks that both tables exist and
// otherwise returns a *MissingTableError; use it where the database user
// may not create tables, after running `baton fence init --store URL`
// once. Either way New checks the tables' columns and keys (see
// ForeignTableError).
func WithCreate(create bool) Option { return func(c *config) { c.create = create } }

// quoteTable quotes a validated, possibly schema-qualified table name.
func quoteTable(name string) string {
	return pgxIdent(strings.Split(name, ".")...)
}
