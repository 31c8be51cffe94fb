// Package pgkit holds what the PostgreSQL lock backend (package postgres)
// and fence store (fence/postgres) share: naming a server in messages and
// telling what is wrong with a connection string, never with its password.
package pgkit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

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
			msg = strings.ReplaceAll(msg, pce.ConnString, baton.Redact(pce.ConnString))
		}
	}
	return baton.Printable(msg) + "; write it as postgres://user@host:port/database"
}

// Refused reports whether err is the server's refusal of the connection's
// own settings, which trying again cannot mend (see Refusal).
func Refused(err error) bool {
	advice, _ := Refusal(err)
	return advice != ""
}

// errTLSRefused is pgx's error when the server answers a request for TLS
// with a no (sslmode=require or verify-*, ssl off on the server); pgx makes
// it with errors.New, so its text is what there is to know it by.
const errTLSRefused = "server refused TLS connection"

// Refusal tells whether err is the server's refusal of the connection's
// own settings, which trying again cannot mend, and if so returns what to
// check and the refusal (the server's error, or pgx's for TLS): an
// unknown role or a wrong password, a database that does not exist or may
// not be connected to, a run-time parameter (such as lock_timeout in the
// URL) the server does not know or whose value it refuses, a server that
// takes no TLS when the URL requires it, or a certificate that does not
// verify. It returns "" and nil for anything else.
func Refusal(err error) (advice string, cause error) {
	if err == nil {
		return "", nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "28P01":
			return "check the user and the password", pgErr
		case pgErr.Code == "28000": // invalid_authorization_specification: no such role, or no pg_hba.conf entry
			return "check the user, and that the server's pg_hba.conf lets it connect from here", pgErr
		case pgErr.Code == "3D000": // invalid_catalog_name
			return "check the database name", pgErr
		case pgErr.Severity != "FATAL": // not at login: the statement's
		case pgErr.Code == "42501": // insufficient_privilege: no CONNECT on the database
			return "the user may not connect to that database: GRANT CONNECT, or use another user", pgErr
		case pgErr.Code == "42704", pgErr.Code == "22023": // undefined_object, invalid_parameter_value
			return "check the URL's parameters: the server does not know one, or refuses its value", pgErr
		}
		return "", nil
	}
	cause = err // pgx's error for the connection, without what wraps it
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		cause = ce
	}
	var certErr *tls.CertificateVerificationError
	var hostErr x509.HostnameError
	var authErr x509.UnknownAuthorityError
	switch {
	case errors.As(err, &certErr), errors.As(err, &hostErr), errors.As(err, &authErr):
		return "the server's TLS certificate does not verify: check sslrootcert and the host name, or the URL's sslmode", cause
	case strings.Contains(err.Error(), errTLSRefused):
		return "the server takes no TLS connections: give sslmode=prefer or disable, or turn ssl on in the server", cause
	}
	return "", nil
}

// ConnFailure reports whether err means the connection failed or the server
// cannot serve, rather than a statement being refused.
func ConnFailure(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection_exception
			pgErr.Code == "57P01", // admin_shutdown, also pg_terminate_backend
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now: starting up, shutting down
			pgErr.Code == "53300", // too_many_connections
			pgErr.Severity == "FATAL", pgErr.Severity == "PANIC":
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		pgconn.SafeToRetry(err),
		errors.Is(err, pgconn.ErrConnClosed), // a *pgx.Conn used after it died
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNREFUSED):
		return true
	}
	return false
}

// GaveUp reports whether err is PostgreSQL giving up on a statement that
// waited or conflicted: a lock_timeout or statement_timeout that ran out
// (the caller's own cancellation aside, which the caller tells by its
// context), a serialization failure or a deadlock. The statement, and its
// transaction, wrote nothing; trying again later may well succeed.
func GaveUp(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "55P03", "57014", "40001", "40P01": // lock_not_available, query_canceled, serialization_failure, deadlock_detected
		return true
	}
	return false
}
