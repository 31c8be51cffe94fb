package sqlite

import (
	"strconv"
	"strings"
	"time"

	"github.com/baton-go/baton"
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

// Option configures a Store.
type Option func(*config)

type config struct {
	table       string
	runs        string
	create      bool
	busyTimeout time.Duration
}

func newConfig(opts []Option) (config, error) {
	c := config{table: DefaultTable, runs: DefaultRunsTable, create: true}
	for _, o := range opts {
		o(&c)
	}
	if c.busyTimeout == 0 {
		c.busyTimeout = DefaultBusyTimeout
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
	if c.busyTimeout < time.Millisecond {
		return config{}, &baton.OptionError{Option: "busy timeout", Value: c.busyTimeout.String(), Reason: "must be at least 1ms; the default is 5s"}
	}
	return c, nil
}

// WithTable sets the fence table's name. Default "baton_fence". The name is
// a table, optionally qualified by the name of an attached database
// ("main.fence"); each part is letters, digits and underscores, not
// starting with a digit, at most 63 bytes.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithRunsTable sets the runs table's name, with the rules of WithTable.
// Default "baton_runs".
func WithRunsTable(name string) Option { return func(c *config) { c.runs = name } }

// WithCreate says whether New creates the tables when they are missing.
// Default true: New runs CREATE TABLE IF NOT EXISTS. With false, New only
// checks that both tables exist and otherwise returns a *MissingTableError.
func WithCreate(create bool) Option { return func(c *config) { c.create = create } }

// WithBusyTimeout sets how long Open's connections wait for the database's
// write lock, held by another transaction or process, before failing with
// an error wrapping baton.ErrUnavailable. Default 5s. New ignores it: set
// busy_timeout on the *sql.DB you pass.
func WithBusyTimeout(d time.Duration) Option { return func(c *config) { c.busyTimeout = d } }

// maxIdentLen keeps names portable to PostgreSQL, whose limit it is.
const maxIdentLen = 63

// validateTable checks a possibly database-qualified table name.
func validateTable(what, name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return &baton.OptionError{Option: what, Value: strconv.Quote(name), Reason: "has more than one dot; write table or database.table"}
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
		return bad("has a part longer than 63 bytes")
	case '0' <= part[0] && part[0] <= '9':
		return bad("starts with a digit; start it with a letter or an underscore")
	}
	for i := 0; i < len(part); i++ {
		b := part[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_') {
			return bad("has " + strconv.QuoteRune(rune(b)) + "; use letters, digits and underscores")
		}
	}
	return nil
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
