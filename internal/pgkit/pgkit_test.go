package pgkit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-go/baton"
)

func TestWhere(t *testing.T) {
	for _, tc := range []struct {
		host string
		want string
	}{
		{"127.0.0.1", "127.0.0.1:5432/app"},
		{"::1", "[::1]:5432/app"},
		{"/var/run/postgresql", "/var/run/postgresql:5432/app"},
	} {
		if got := Where(&pgconn.Config{Host: tc.host, Port: 5432, Database: "app"}); got != tc.want {
			t.Errorf("Where(%s) = %q, want %q", tc.host, got, tc.want)
		}
	}
}

func TestRedactDSN(t *testing.T) {
	for _, dsn := range []string{
		"postgres://app:s3cret@db/x",
		"postgres://app@db/x?password=s3cret",
		"host=db user=app password=s3cret dbname=x",
		"host=db password='s3 cret' dbname=x",
	} {
		if got := baton.Redact(dsn); strings.Contains(got, "s3") {
			t.Errorf("Redact(%q) = %q: the password shows", dsn, got)
		}
	}
}

func TestParseReason(t *testing.T) {
	_, err := pgconn.ParseConfig("postgres://app:s3cret@db:notaport/x")
	if err == nil {
		t.Fatal("a bad port parsed")
	}
	if got := ParseReason(err); strings.Contains(got, "s3cret") || !strings.Contains(got, "write it as postgres://") {
		t.Errorf("ParseReason = %q", got)
	}
}

// TestRefused: the server's refusal of a connection's own settings at login
// (FATAL) is the URL's fault; the same codes from a statement (no CREATE
// on a schema, say, when Init makes the tables) are the statement's.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		code, severity string
		want           bool
	}{
		{"28P01", "FATAL", true},  // wrong password
		{"3D000", "FATAL", true},  // no such database
		{"42704", "FATAL", true},  // unrecognized configuration parameter in the URL
		{"22023", "FATAL", true},  // a parameter value the server refuses
		{"42501", "FATAL", true},  // no CONNECT on the database
		{"42501", "ERROR", false}, // permission denied for schema public
		{"42704", "ERROR", false}, // a statement naming an object that does not exist
		{"08006", "FATAL", false}, // a connection failure: try again
	} {
		err := fmt.Errorf("connect: %w", &pgconn.PgError{Code: tc.code, Severity: tc.severity})
		if got := Refused(err); got != tc.want {
			t.Errorf("Refused(%s %s) = %v, want %v", tc.severity, tc.code, got, tc.want)
		}
	}
}

// TestRefusal_TLS: a server that says no to TLS, and a certificate that
// does not verify, are refusals that say what to check; a connection that
// failed otherwise, or nil, is none.
func TestRefusal_TLS(t *testing.T) {
	for _, tc := range []struct {
		err    error
		advice string
	}{
		{fmt.Errorf("tls error: %w", errors.New("server refused TLS connection")), "sslmode=prefer or disable"},
		{fmt.Errorf("tls error: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), "does not verify"},
		{fmt.Errorf("tls error: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "db"}), "does not verify"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), ""},
		{nil, ""},
	} {
		advice, cause := Refusal(tc.err)
		if !strings.Contains(advice, tc.advice) || (tc.advice == "") != (advice == "") || (advice != "") != (cause != nil) {
			t.Errorf("Refusal(%v) = %v, %q; want advice saying %q", tc.err, cause, advice, tc.advice)
		}
	}
}
