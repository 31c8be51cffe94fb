package postgres_test

import (
	"errors"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/postgres"
)

// TestDial_CutOffStatementCommitsNothing: a statement held up on the
// server (here behind a transaction that locked the lock's row) whose
// client is then cut off, so that neither its answer nor pgx's cancel
// request gets through, is cancelled by the server itself (Dial's
// statement_timeout) before its client gives up on it. So it cannot take
// the lock once the row is free again, for an acquisition that already
// failed.
func TestDial_CutOffStatementCommitsNothing(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := testsvc.NewProxy(t, u.Host)
	u.Host = p.Addr()
	a := dial(t, u.String(), baton.WithHolder("a"), baton.WithRequestTimeout(time.Second))
	ctx := timeout(t, 30*time.Second)
	la, err := a.Acquire(ctx, "cut-off")
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT FROM baton_lock WHERE name = 'cut-off' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	waiting := func() bool {
		var n int
		queryRow(t, admin, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'baton a' AND wait_event_type = 'Lock'`, nil, &n)
		return n > 0
	}
	tried := make(chan error, 1)
	go func() {
		_, err := a.TryAcquire(ctx, "cut-off")
		tried <- err
	}()
	waitFor(t, 5*time.Second, "a's statement waiting for the row", waiting)
	p.Block()
	defer p.Unblock()
	if err := <-tried; !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("TryAcquire while the row is locked and the client cut off = %v, want ErrUnavailable", err)
	}
	waitFor(t, 5*time.Second, "a's statement cancelled on the server", func() bool { return !waiting() })
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var live int
	queryRow(t, admin, `SELECT count(*) FROM baton_lock WHERE name = 'cut-off' AND expires_at > clock_timestamp()`, nil, &live)
	if live != 0 {
		t.Fatal("the lock was taken after its acquisition failed")
	}
}

// TestBoundStatements: Dial's statement_timeout is half the request
// timeout, and a DSN's own setting stands.
func TestBoundStatements(t *testing.T) {
	for _, c := range []struct {
		params  map[string]string
		timeout time.Duration
		want    map[string]string
	}{
		{map[string]string{}, 5 * time.Second, map[string]string{"statement_timeout": "2500"}},
		{map[string]string{}, time.Millisecond, map[string]string{"statement_timeout": "1"}},
		{map[string]string{"statement_timeout": "0"}, 5 * time.Second, map[string]string{"statement_timeout": "0"}},
		{map[string]string{"options": "-c statement_timeout=10s"}, 5 * time.Second, map[string]string{"options": "-c statement_timeout=10s"}},
	} {
		got := maps.Clone(c.params)
		postgres.BoundStatements(got, c.timeout)
		if !maps.Equal(got, c.want) {
			t.Errorf("params %v, request timeout %v: got %v, want %v", c.params, c.timeout, got, c.want)
		}
	}
}
