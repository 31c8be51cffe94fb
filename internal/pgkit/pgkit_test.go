package pgkit

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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
		if got := RedactDSN(dsn); strings.Contains(got, "s3") {
			t.Errorf("RedactDSN(%q) = %q: the password shows", dsn, got)
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
