package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/postgres"
)

var pg testsvc.Postgres

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines leaked: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// timeout returns a context that ends after d or with the test.
func timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newPool opens a pool on dsn, closed when t ends.
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// dial returns a Locker on dsn that owns its pool, closed when t ends.
func dial(t testing.TB, dsn string, opts ...baton.Option) *baton.FencedLocker {
	t.Helper()
	fl, err := postgres.Dial(timeout(t, 30*time.Second), dsn, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = fl.Close() })
	return fl
}

// makeTables creates the lock tables on dsn (the table of opts'
// baton.WithPrefix, DefaultTable without) as a Locker's first Acquire
// does, without the observers' triggers; Dial and New create nothing.
func makeTables(t testing.TB, dsn string, opts ...baton.Option) {
	t.Helper()
	fl := dial(t, dsn, opts...)
	if err := postgres.Prepare(timeout(t, 30*time.Second), fl.Locker()); err != nil {
		t.Fatalf("create the lock tables: %v", err)
	}
	_ = fl.Close()
}

// queryRow scans one row of sql into dst.
func queryRow(t testing.TB, pool *pgxpool.Pool, sql string, args []any, dst ...any) {
	t.Helper()
	if err := pool.QueryRow(timeout(t, 10*time.Second), sql, args...).Scan(dst...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// execSQL runs sql.
func execSQL(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(timeout(t, 10*time.Second), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// queued returns how many live waiters are queued for name.
func queued(t testing.TB, admin *pgxpool.Pool, name string) int {
	var n int
	queryRow(t, admin, `SELECT count(*) FROM baton_lock_waiters WHERE name = $1 AND expires_at > clock_timestamp()`, []any{name}, &n)
	return n
}

// dmlUser makes a login role that may read and write the default lock
// tables and use their sequences, but owns nothing (dropped when t ends),
// and returns dsn as that role.
func dmlUser(t testing.TB, admin *pgxpool.Pool, dsn string) string {
	t.Helper()
	return roleUser(t, admin, dsn, "GRANT SELECT, INSERT, UPDATE, DELETE ON baton_lock, baton_lock_waiters TO %[1]s"+
		"; GRANT USAGE ON SEQUENCE baton_lock_token, baton_lock_ticket TO %[1]s")
}

// roleUser makes a login role that owns nothing (dropped when t ends),
// runs grants (%[1]s names the role) and returns dsn as that role.
func roleUser(t testing.TB, admin *pgxpool.Pool, dsn, grants string) string {
	t.Helper()
	role := fmt.Sprintf("app_%d", time.Now().UnixNano()%1e9)
	execSQL(t, admin, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	execSQL(t, admin, fmt.Sprintf(grants, role))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// listenFirst has l wait once, on a lock of its own, so that its listener
// runs. A Locker's first wait opens it only once its first attempt has
// queued, and then looks again: a statement more, after the waiter shows
// as queued, which a test counting a wait's statements must not see.
func listenFirst(t *testing.T, l *baton.FencedLocker) {
	t.Helper()
	ctx := timeout(t, 30*time.Second)
	const name = "listen-first"
	first, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		second, err := l.Acquire(ctx, name)
		if err == nil {
			err = second.Release(ctx)
		}
		got <- err
	}()
	waitQueued(t, l, name)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
