package postgres_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/postgres"
)

func TestParseURL(t *testing.T) {
	for _, raw := range []string{
		"postgres://app:s3cret@db1:5432/jobs?sslmode=disable&ttl=10s&table=ops.locks&request-timeout=2s&renew-every=3s",
		"postgresql://app:s3cret@db1:5432/jobs?sslmode=disable&ttl=10s&table=ops.locks&request-timeout=2s&renew-every=3s",
	} {
		u, err := baton.ParseURL(raw)
		if err != nil {
			t.Fatal(err)
		}
		dsn, opts, err := postgres.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"ttl=", "table=", "request-timeout=", "renew-every="} {
			if strings.Contains(dsn, p) {
				t.Errorf("DSN %q still has baton's parameter %s", dsn, p)
			}
		}
		pc, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if cc := pc.ConnConfig; cc.Host != "db1" || cc.Port != 5432 || cc.Database != "jobs" || cc.User != "app" || cc.Password != "s3cret" || cc.TLSConfig != nil {
			t.Errorf("pgx config from %q: host %s port %d db %s user %s tls %v", dsn, cc.Host, cc.Port, cc.Database, cc.User, cc.TLSConfig != nil)
		}
		cfg, err := baton.NewConfig(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.TTL != 10*time.Second || cfg.RequestTimeout != 2*time.Second || cfg.RenewEvery != 3*time.Second || cfg.Prefix != "ops.locks" {
			t.Errorf("options from %s: ttl %v, request timeout %v, renew %v, table %q", u.Redacted(), cfg.TTL, cfg.RequestTimeout, cfg.RenewEvery, cfg.Prefix)
		}
	}

	for _, bad := range []string{
		"postgres://u:s3cret@h/db?ttl=ten",
		"postgres://u:s3cret@h/db?ttl=0",
		"postgres://u:s3cret@h/db?table=a.b.c",
		"postgres://u:s3cret@h/db?table=1abc",
		"postgres://u:s3cret@h/db?table=x&table=y",
		"postgres://u:s3cret@h/db?sslmode=sometimes",
		"postgres://u:s3cret@h/db?sslmode=require;ttl=5s", // pgx would get no sslmode
		"postgres://u:s3cret@h/db#x",
		"postgres://u:s3cret@h:notaport/db",
		"postgres://h/db?password=s3cret&ttl=x",
		"mysql://u:s3cret@h/db",
		"postgres:opaque",
	} {
		u, err := baton.ParseURL(bad)
		if err == nil {
			_, _, err = postgres.ParseURL(u)
		}
		if !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidOption", bad, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%q) error shows the password: %v", bad, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"postgres://h/db", "postgresql://u:p@h:1/d?ttl=5s&table=x", "postgres://h/db?sslmode=disable&renew-every=1s", "postgres:///db?host=/tmp"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := baton.ParseURL(s)
		if err != nil {
			return
		}
		if _, _, err := postgres.ParseURL(u); err != nil {
			if !errors.Is(err, baton.ErrInvalidOption) {
				t.Fatalf("error %v is not an option error", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			if p, ok := u.User.Password(); ok && len(p) >= 8 && strings.Contains(err.Error(), p) {
				t.Fatalf("error %q shows the password", err)
			}
		}
	})
}

func TestDial_Unreachable(t *testing.T) {
	port := testsvc.ClosedPort(t) // refuses connections until the test ends
	start := time.Now()
	_, err := postgres.Dial(context.Background(), "postgres://app:s3cret@127.0.0.1:"+strconv.Itoa(port)+"/db", baton.WithRequestTimeout(time.Second))
	if !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("Dial to a closed port: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Dial took %v to fail with a 1s request timeout", d)
	}
	if msg := err.Error(); !strings.Contains(msg, "127.0.0.1:"+strconv.Itoa(port)) || strings.Contains(msg, "s3cret") {
		t.Errorf("error %q should say where, without the password", msg)
	}
	for _, dsn := range []string{"host=h password=s3cret port=notaport", "postgres://u:s3cret@h:notaport/db"} {
		_, err := postgres.Dial(context.Background(), dsn)
		if !errors.Is(err, baton.ErrInvalidOption) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Dial(bad DSN) = %v; want ErrInvalidOption without the password", err)
		}
	}
}

// TestDial_Refused: a server that answers but refuses the URL's database,
// user, TLS or a parameter is a configuration error (the CLI's exit 2),
// not unavailable, saying what to check.
func TestDial_Refused(t *testing.T) {
	admin := pg.Admin(t)
	port := strings.TrimPrefix(admin[strings.LastIndex(admin, ":"):strings.LastIndex(admin, "/")], ":")
	for _, tc := range []struct{ dsn, advice string }{
		{"postgres://postgres:s3cret@127.0.0.1:" + port + "/no_such_db?sslmode=disable", "check the database name"},
		{"postgres://nobody:s3cret@127.0.0.1:" + port + "/postgres?sslmode=disable", "check the user"},
		// The server has ssl off: it says no to TLS, which no retry mends.
		{"postgres://postgres:s3cret@127.0.0.1:" + port + "/postgres?sslmode=require", "sslmode=prefer or disable"},
		{"postgres://postgres:s3cret@127.0.0.1:" + port + "/postgres?sslmode=disable&bogus=1", "the URL's parameters"},
	} {
		_, err := postgres.Dial(context.Background(), tc.dsn, baton.WithRequestTimeout(5*time.Second))
		if !errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "refused") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Dial = %v; want an invalid option the server refused, without the password", err)
		}
		if err != nil && !strings.Contains(err.Error(), tc.advice) {
			t.Errorf("Dial = %v; want it to say %q", err, tc.advice)
		}
	}
}

func TestNew_InvalidOptions(t *testing.T) {
	dsn := pg.Database(t)
	pool := newPool(t, dsn)
	ctx := timeout(t, 10*time.Second)
	if _, err := postgres.New(ctx, nil); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("New(nil pool) = %v", err)
	}
	_, err := postgres.New(ctx, pool, baton.WithTTL(500*time.Millisecond))
	if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "minimum") {
		t.Errorf("TTL 500ms: %v, want ErrInvalidOption naming the minimum", err)
	}
	for _, table := range []string{"1abc", "a.b.c", "a-b", "a.", strings.Repeat("x", 56), `x"; DROP TABLE y; --`} {
		if _, err := postgres.New(ctx, pool, baton.WithPrefix(table)); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("table %q: %v, want ErrInvalidOption", table, err)
		}
	}
	if err := postgres.Init(ctx, pool, "a.b.c"); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("Init(a.b.c) = %v", err)
	}
}

// TestTables_Configurable: a Locker on ops.locks uses ops.locks and its
// siblings and nothing else, Init is safe to run concurrently, and Open
// takes the table and TTL from the URL.
func TestTables_Configurable(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	execSQL(t, admin, `CREATE SCHEMA ops`)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- postgres.Init(timeout(t, 10*time.Second), admin, "ops.locks")
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Init: %v", err)
		}
	}
	var ok, dflt bool
	queryRow(t, admin, `SELECT to_regclass('ops.locks') IS NOT NULL AND to_regclass('ops.locks_waiters') IS NOT NULL
		AND to_regclass('ops.locks_token') IS NOT NULL AND to_regclass('ops.locks_ticket') IS NOT NULL,
		to_regclass('baton_lock') IS NOT NULL`, nil, &ok, &dflt)
	if !ok || dflt {
		t.Fatalf("after Init(ops.locks): its objects exist %v, default table exists %v", ok, dflt)
	}

	u, err := baton.ParseURL(dsn + "&table=ops.locks&ttl=3s")
	if err != nil {
		t.Fatal(err)
	}
	l, err := postgres.Open(timeout(t, 10*time.Second), u, baton.WithHolder("opened"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if c := l.Config(); c.TTL != 3*time.Second || c.Prefix != "ops.locks" {
		t.Errorf("Open: TTL %v, table %q", c.TTL, c.Prefix)
	}
	lease, err := l.Acquire(timeout(t, 10*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	if lease.Key() != "ops.locks/x" {
		t.Errorf("Key %q, want ops.locks/x", lease.Key())
	}
	var holder, app string
	queryRow(t, admin, `SELECT holder FROM ops.locks WHERE name = 'x'`, nil, &holder)
	queryRow(t, admin, `SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'baton %' LIMIT 1`, nil, &app)
	if holder != "opened" || app != "baton opened" {
		t.Errorf("holder %q, application_name %q; want opened and \"baton opened\"", holder, app)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Fenced(); !ok {
		t.Error("an opened postgres Locker is not fenced")
	}
}
