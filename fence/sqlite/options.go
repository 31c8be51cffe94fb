package sqlite

import (
	"fmt"
	"strings"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
)

// Defaults.
const (
	// DefaultTable is the fence table's default name.
	DefaultTable = "baton_fence"
	// DefaultRunsTable is the runs table's default name.
	DefaultRunsTable = "baton_runs"
	// DefaultBusyTimeout is how long Open's connections wait for another
	// connection's or process's write lock before failing with SQLITE_BUSY.
	DefaultBusyTimeout = 5 * time.Second
)

// qualifier is what may qualify a table name here, for messages.
const qualifier = "database"

// maxBusyTimeout is the longest busy timeout SQLite takes: PRAGMA
// busy_timeout reads a 32-bit count of milliseconds, and a longer one
// becomes 0, never wait.
const maxBusyTimeout = (1<<31 - 1) * time.Millisecond

// Option configures a Store.
type Option func(*config)

type config struct {
	table       string
	runs        string
	create      bool
	busyTimeout time.Duration
	busyGiven   bool
}

func newConfig(opts []Option) (config, error) {
	c := config{table: DefaultTable, runs: DefaultRunsTable, create: true}
	for _, o := range opts {
		o(&c)
	}
	if !c.busyGiven {
		c.busyTimeout = DefaultBusyTimeout
	}
	if err := fencesql.ValidateTablesFolded(c.table, c.runs, qualifier, "main"); err != nil {
		return config{}, err
	}
	switch {
	case c.busyTimeout < time.Millisecond:
		return config{}, &baton.OptionError{Option: "busy timeout", Value: c.busyTimeout.String(), Reason: "must be at least 1ms; leave it out for the default, 5s"}
	case c.busyTimeout > maxBusyTimeout:
		return config{}, &baton.OptionError{Option: "busy timeout", Value: c.busyTimeout.String(),
			Reason: fmt.Sprintf("is longer than SQLite's limit, %dms (about 24 days), beyond which it would not wait at all; give a shorter one (WithBusyTimeout, or busy_timeout in a sqlite: URL)", maxBusyTimeout.Milliseconds())}
	}
	return c, nil
}

// WithTable sets the fence table's name. Default "baton_fence". The name is
// a table, optionally qualified by the name of an attached database
// ("main.fence"); each part is letters, digits and underscores, not
// starting with a digit, at most 63 bytes. SQLite ignores case in names,
// and an unqualified name is in database main: "fence", "Fence" and
// "main.FENCE" name one table, so the fence and runs tables must differ
// in more than that.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithRunsTable sets the runs table's name, with the rules of WithTable.
// Default "baton_runs".
func WithRunsTable(name string) Option { return func(c *config) { c.runs = name } }

// WithCreate says whether New creates the tables when they are missing.
// Default true: New runs CREATE TABLE IF NOT EXISTS. With false, New only
// checks that both tables exist and otherwise returns a *MissingTableError.
// It also says whether Open puts the file in WAL journaling, a setting the
// file keeps: with false, Open leaves the journal mode as it is.
func WithCreate(create bool) Option { return func(c *config) { c.create = create } }

// WithBusyTimeout sets how long Open's connections wait for the database's
// write lock, held by another transaction or process, before failing with
// an error wrapping baton.ErrUnavailable. Default 5s. New ignores it: set
// busy_timeout on the *sql.DB you pass, or open it with DSN and this option.
// d must be at least 1ms: SQLite's 0, never wait, would fail a fence raise
// whenever another process writes; and at most 2^31-1 milliseconds (about
// 24 days), SQLite's limit, beyond which it would not wait at all.
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) { c.busyTimeout, c.busyGiven = d, true }
}

// quoteIdent quotes one validated identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteTable quotes a validated, possibly database-qualified table name.
func quoteTable(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = quoteIdent(p)
	}
	return strings.Join(parts, ".")
}
