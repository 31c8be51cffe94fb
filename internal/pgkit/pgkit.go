// Package pgkit holds what the PostgreSQL lock backend (package postgres)
// and fence store (fence/postgres) share: naming a server in messages and
// telling what is wrong with a connection string, never with its password.
package pgkit

import (
	"errors"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
)

// Where names a server and database for messages: host:port/database
// ([host]:port for IPv6, the socket directory and port for a unix socket).
func Where(cfg *pgconn.Config) string {
	host := cfg.Host
	if strings.HasPrefix(host, "/") { // a unix socket directory
		host += ":" + strconv.Itoa(int(cfg.Port))
	} else {
		host = net.JoinHostPort(host, strconv.Itoa(int(cfg.Port)))
	}
	return host + "/" + cfg.Database
}

// WhereOf names the server behind db (a pool, a connection, a transaction)
// when db says, and "" otherwise.
func WhereOf(db any) string {
	switch db := db.(type) {
	case interface{ Config() *pgx.ConnConfig }: // *pgx.Conn
		return Where(&db.Config().Config)
	case interface{ Conn() *pgx.Conn }: // pgx.Tx, *pgxpool.Conn
		if c := db.Conn(); c != nil {
			return Where(&c.Config().Config)
		}
	case interface{ Config() *pgxpool.Config }: // *pgxpool.Pool
		return Where(&db.Config().ConnConfig.Config)
	}
	return ""
}

// ParseReason returns what pgx found wrong with a connection string,
// without the string, which may hold a password.
func ParseReason(err error) string {
	msg := err.Error()
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		msg = "cannot parse it"
		if inner := errors.Unwrap(pce); inner != nil {
			msg = inner.Error()
		}
		if pce.ConnString != "" {
			msg = strings.ReplaceAll(msg, pce.ConnString, RedactDSN(pce.ConnString))
		}
	}
	return baton.Printable(msg) + "; write it as postgres://user@host:port/database"
}

// RedactURL shows u without its password, in the user part or the query.
func RedactURL(u *url.URL) string {
	c := *u
	if q, err := url.ParseQuery(c.RawQuery); err == nil {
		for _, k := range []string{"password", "sslpassword"} {
			if q.Has(k) {
				q.Set(k, "xxxxx")
			}
		}
		c.RawQuery = q.Encode()
	} else {
		c.RawQuery = "..."
	}
	return c.Redacted()
}

var kvPassword = regexp.MustCompile(`(?i)((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)

// RedactDSN shows a URL or key=value connection string without passwords,
// printable.
func RedactDSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			return baton.Printable(RedactURL(u))
		}
		dsn = baton.Redact(dsn)
	}
	return baton.Printable(kvPassword.ReplaceAllString(dsn, "${1}xxxxx"))
}

// Refused reports whether err is the server's refusal of the connection's
// own settings, which trying again cannot mend: an unknown role, a wrong
// password, a database that does not exist.
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "28000", "28P01", "3D000": // invalid_authorization_specification, invalid_password, invalid_catalog_name
		return true
	}
	return false
}
