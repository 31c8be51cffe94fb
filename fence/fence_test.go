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
		{"sqlite://./dot.db", "dot.db"},
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
	for _, u := range []string{"sqlite:", "sqlite:x.db?busy_timeout=soon", "sqlite:x.db?busy_timeout=0s", "sqlite:x.db?mode=ro", "sqlite:x.db?busy_timeout=1s&busy_timeout=2s"} {
		if _, err := fence.Open(ctx, u, fence.WithCreate(true)); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption", u, err)
		}
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
