package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
)

// DefaultTable is the lease table's name unless baton.WithPrefix says
// otherwise. The waiters table and the two sequences are named after it:
// baton_lock_waiters, baton_lock_token and baton_lock_ticket, and the
// function baton_lock_observe that notifies observers of elections.
const DefaultTable = "baton_lock"

// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN - 1); longer
// names would be cut silently.
const maxIdentLen = 63

// Suffixes of the objects named after the lease table.
const (
	waitersSuffix = "_waiters"
	tokenSuffix   = "_token"
	ticketSuffix  = "_ticket"
	observeSuffix = "_observe" // as long as waitersSuffix, the longest
)

// names are the quoted names of the objects one Locker uses.
type names struct {
	table     string // as given, for messages and keys: "baton_lock", "ops.locks"
	lease     string // quoted: "baton_lock"
	waiters   string // quoted: "baton_lock_waiters"
	tokenSeq  string // quoted: "baton_lock_token"
	ticketSeq string // quoted: "baton_lock_ticket"
	observeFn string // quoted: "baton_lock_observe", the observers' trigger function
}

// newNames validates table (a name, or schema.name, of letters, digits and
// underscores, not starting with a digit) and names the objects after it.
func newNames(table string) (names, error) {
	if table == "" {
		table = DefaultTable
	}
	bad := func(reason string) error {
		return &baton.OptionError{Option: "lock table", Value: strconv.Quote(table), Reason: reason}
	}
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return names{}, bad("has more than one dot; write table or schema.table")
	}
	for i, p := range parts {
		limit := maxIdentLen
		if i == len(parts)-1 {
			limit -= len(waitersSuffix) // room for the longest derived name
		}
		switch {
		case p == "":
			return names{}, bad("has an empty part; use letters, digits and underscores")
		case len(p) > limit:
			return names{}, bad(fmt.Sprintf("has a part of %d bytes; the limit is %d, so that %q still fits PostgreSQL's %d", len(p), limit, p+waitersSuffix, maxIdentLen))
		case '0' <= p[0] && p[0] <= '9':
			return names{}, bad("starts with a digit; start it with a letter or an underscore")
		}
		for j := 0; j < len(p); j++ {
			c := p[j]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
				return names{}, bad(fmt.Sprintf("has %q; use letters, digits and underscores", c))
			}
		}
	}
	q := func(suffix string) string {
		p := append([]string(nil), parts...)
		p[len(p)-1] += suffix
		return pgx.Identifier(p).Sanitize()
	}
	return names{
		table:     table,
		lease:     q(""),
		waiters:   q(waitersSuffix),
		tokenSeq:  q(tokenSuffix),
		ticketSeq: q(ticketSuffix),
		observeFn: q(observeSuffix),
	}, nil
}

// grants is what a Locker's database user needs on the lock's objects, as
// the statements that grant it to user (the owner runs them).
func (n names) grants(user string) string {
	u := "the Locker's user"
	if user != "" {
		u = pgx.Identifier{user}.Sanitize()
	}
	g := "GRANT SELECT, INSERT, UPDATE, DELETE ON " + n.lease + ", " + n.waiters + " TO " + u +
		"; GRANT USAGE ON SEQUENCE " + n.tokenSeq + ", " + n.ticketSeq + " TO " + u
	if schema, _, ok := strings.Cut(n.table, "."); ok {
		g += "; GRANT USAGE ON SCHEMA " + pgx.Identifier{schema}.Sanitize() + " TO " + u
	}
	return g
}

// key is a hold's key: TABLE/NAME. Lock names and table names cannot hold
// a slash, so the last one splits them.
func (n names) key(name string) string { return n.table + "/" + name }

// splitKey undoes key.
func splitKey(key string) (table, name string, ok bool) {
	i := strings.LastIndexByte(key, '/')
	if i <= 0 || i == len(key)-1 {
		return "", "", false
	}
	return key[:i], key[i+1:], true
}
