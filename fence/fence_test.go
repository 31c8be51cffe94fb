package fence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/internal/testsvc"
	"go.uber.org/goleak"
)

// pg is the PostgreSQL server shared by this package's tests.
var pg testsvc.Postgres

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestOpen_UnknownScheme(t *testing.T) {
	for _, u := range []string{"mysql://root:s3cret@db/x", "etcd://127.0.0.1:2379", "fence.db", ""} {
		_, err := fence.Open(t.Context(), u)
		if !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) shows the password: %v", u, err)
		}
	}
}

func TestOpen_SQLiteURLs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx := t.Context()
	for _, tc := range []struct{ url, file string }{
		{"sqlite:rel.db", "rel.db"},
		{"sqlite:sub%20dir.db?busy_timeout=2s", "sub dir.db"},
		{"sqlite:./dot.db", "dot.db"},
		{"sqlite:led%23ger%3F.db", "led#ger?.db"},
		{"sqlite:" + filepath.Join(dir, "abs.db"), "abs.db"},
		{"sqlite://" + filepath.Join(dir, "triple.db"), "triple.db"},
	} {
		s, err := fence.Open(ctx, tc.url, fence.WithCreate(true))
		if err != nil {
			t.Errorf("Open(%q): %v", tc.url, err)
			continue
		}
		s.Close()
		if _, err := os.Stat(filepath.Join(dir, tc.file)); err != nil {
			t.Errorf("Open(%q) did not make %s: %v", tc.url, tc.file, err)
		}
	}
	for _, u := range []string{"sqlite:", "sqlite:x.db?busy_timeout=soon", "sqlite:x.db?busy_timeout=0s", "sqlite:x.db?mode=ro", "sqlite:x.db?busy_timeout=1s&busy_timeout=2s", "sqlite:x.db?busy_timeout=1s;x=1",
		"postgres://u:s3cret@127.0.0.1:1/db?sslmode=require;x=1", "postgres://u:s3cret@127.0.0.1:1/db?sslmode=require#x"} {
		if _, err := fence.Open(ctx, u, fence.WithCreate(true)); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption", u, err)
		}
	}
}

// TestOpen_SQLiteURLLosesNothing: the parts of a sqlite: URL that url.Parse
// takes out of the path, a fragment, a host, user info, would open another
// file: each is refused, saying how to write the URL. So is a busy_timeout
// beyond SQLite's limit, which it would read as 0, never wait.
func TestOpen_SQLiteURLLosesNothing(t *testing.T) {
	for _, tc := range []struct{ name, url, want string }{ // DIR: the test's directory
		{"fragment", "sqlite:DIR/ledger#2.db", "%23"},
		{"fragment, relative", "sqlite:ledger#2.db", "%23"},
		{"empty fragment", "sqlite:ledger.db#", "%23"},
		{"fragment after the query", "sqlite:ledger.db?busy_timeout=1s#x", "%23"},
		{"host", "sqlite://localhostDIR/ledger.db", `host "localhost"`},
		{"dot host", "sqlite://./ledger.db", `host "."`},
		{"host and port", "sqlite://db:5432/ledger.db", "sqlite:relative/path.db"},
		{"user info", "sqlite://me@/ledger.db", "user info"},
		{"password", "sqlite://me:s3cret@DIR/ledger.db", "user info"},
		{"busy timeout beyond the limit", "sqlite:ledger.db?busy_timeout=600h", "2147483647ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			u := strings.ReplaceAll(tc.url, "DIR", dir)
			s, err := fence.Open(t.Context(), u, fence.WithCreate(true))
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q): %v; want ErrInvalidOption saying %q", u, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("Open(%q) shows the password: %v", u, err)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				t.Errorf("Open(%q) made %s", u, e.Name())
			}
		})
	}
}

func TestOpen_Unavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, u := range []string{
		"postgres://postgres:s3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2",
		"postgresql://postgres:s3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2",
	} {
		_, err := fence.Open(ctx, u)
		if !errors.Is(err, baton.ErrUnavailable) {
			t.Errorf("Open(%q): %v, want ErrUnavailable", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) shows the password: %v", u, err)
		}
	}
}

// TestOpen_SQLiteWrongPath: a sqlite: path in no directory is a mistake in
// the URL, not an unavailable store (which wrappers retry): the error names
// the file.
func TestOpen_SQLiteWrongPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir.db")
	_, err := fence.Open(t.Context(), "sqlite:"+path, fence.WithCreate(true))
	if err == nil || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open in a missing directory: %v; want an error naming %s, not ErrUnavailable", err, path)
	}
}
