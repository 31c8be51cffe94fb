package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
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
	p, pdsn := proxied(t, dsn)
	// statement_timeout 2s: time enough to see the statement wait and
	// cut the client off before the server cancels it.
	a := dial(t, pdsn, baton.WithHolder("a"), baton.WithRequestTimeout(4*time.Second))
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
	batontest.WaitFor(t, 5*time.Second, "a's statement waiting for the row", waiting)
	p.Block()
	defer p.Unblock()
	if err := <-tried; !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("TryAcquire while the row is locked and the client cut off = %v, want ErrUnavailable", err)
	}
	batontest.WaitFor(t, 5*time.Second, "a's statement cancelled on the server", func() bool { return !waiting() })
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var live int
	queryRow(t, admin, `SELECT count(*) FROM baton_lock WHERE name = 'cut-off' AND expires_at > clock_timestamp()`, nil, &live)
	if live != 0 {
		t.Fatal("the lock was taken after its acquisition failed")
	}
}

// TestStatementTimeout: Dial's statement_timeout is half the request
// timeout, and a DSN's own setting stands.
func TestStatementTimeout(t *testing.T) {
	for _, c := range []struct {
		params  map[string]string
		timeout time.Duration
		ms      int64
		ok      bool
	}{
		{map[string]string{}, 5 * time.Second, 2500, true},
		{map[string]string{}, time.Millisecond, 1, true},
		{map[string]string{"statement_timeout": "0"}, 5 * time.Second, 0, false},
		{map[string]string{"options": "-c statement_timeout=10s"}, 5 * time.Second, 0, false},
	} {
		ms, ok := postgres.StatementTimeout(c.params, c.timeout)
		if ms != c.ms || ok != c.ok {
			t.Errorf("params %v, request timeout %v: got %d, %v; want %d, %v", c.params, c.timeout, ms, ok, c.ms, c.ok)
		}
	}
}

// TestSlot_LateStatementTakesNoPlace: the statement of an acquisition that
// failed (no answer within the request timeout), held up in the network
// and delivered only once another acquisition of the same Locker waits,
// does not run on that waiter's row: it neither takes its place in the
// queue nor has its hand-off sent to a key nobody listens on. The waiter
// is handed the lock at the holder's release.
func TestSlot_LateStatementTakesNoPlace(t *testing.T) {
	const ttl = 30 * time.Second // nothing expires or re-checks within the test
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("h"))
	w := dial(t, pdsn, baton.WithTTL(ttl), baton.WithHolder("late-w"), baton.WithRequestTimeout(time.Second))
	ctx := timeout(t, 60*time.Second)
	// A first wait starts w's listener, so that the statement held below
	// is an acquisition's.
	warm, err := w.Acquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lh, err := h.Acquire(ctx, "slot")
	if err != nil {
		t.Fatal(err)
	}

	held := p.HoldFirst([]byte("late-w")) // the holder, sent by acquisitions only
	if _, err := w.Acquire(ctx, "slot"); !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("Acquire whose statement is held up = %v, want ErrUnavailable", err)
	}
	select {
	case <-held.Caught():
	default:
		t.Fatal("the proxy held no statement")
	}
	second := acquireAsync(t, w, ctx, "slot")
	batontest.WaitFor(t, 10*time.Second, "the second acquisition queued", func() bool { return queued(t, admin, "slot") == 1 })
	var ticket int64
	queryRow(t, admin, `SELECT ticket FROM baton_lock_waiters WHERE name = 'slot' AND expires_at > clock_timestamp()`, nil, &ticket)
	held.Deliver(t, ctx)
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if holder, got, _ := handedTo(t, admin, "slot"); holder != "late-w" || got != ticket {
		t.Fatalf("h's release handed the lock to %q with ticket %d; want the waiting acquisition's ticket %d", holder, got, ticket)
	}
	select {
	case <-second.done:
		if second.err != nil {
			t.Fatal(second.err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter handed the lock did not hold it")
	}
}

// TestRelease_LostByDeadlineFreesRow: a lease lost by its local deadline
// (its holder cut off, its renewals unanswered) may still hold its row on
// the server: the last renewal it heard back from keeps it for the drift
// margin at least, and one it never heard back from may have committed.
// Release frees the row, so that the next holder need not wait for it to
// expire.
func TestRelease_LostByDeadlineFreesRow(t *testing.T) {
	const ttl = 6 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	// A drift of 4s puts the local deadline at 2s after a renewal's send,
	// and its row's expiry 4s later or more.
	a := dial(t, pdsn, baton.WithHolder("a"), baton.WithTTL(ttl), baton.WithRenewEvery(time.Second),
		baton.WithDrift(4*time.Second), baton.WithRequestTimeout(300*time.Millisecond))
	b := dial(t, dsn, baton.WithHolder("b"))
	ctx := timeout(t, 30*time.Second)
	la, err := a.Acquire(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	p.Block()
	select {
	case <-la.Done():
	case <-ctx.Done():
		t.Fatal("the cut-off lease was not lost")
	}
	if !errors.Is(la.Err(), baton.ErrLeaseLost) {
		t.Fatalf("lease ended with %v, want lost", la.Err())
	}
	p.Unblock()
	var live bool
	queryRow(t, admin, `SELECT expires_at > clock_timestamp() FROM baton_lock WHERE name = 'lost' AND token = $1`, []any{int64(la.Token())}, &live)
	if !live {
		t.Fatal("the lost lease's row expired before the test released it (4s after its local deadline): a machine far too slow for this test")
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("Release of a lost lease = %v, want nil", err)
	}
	lb, err := b.TryAcquire(ctx, "lost")
	if err != nil {
		t.Fatalf("TryAcquire after the lost lease was released = %v; want its row freed", err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after the lost lease's %d", lb.Token(), la.Token())
	}
	_ = lb.Release(ctx)
}

// proxied puts a proxy in front of the server of dsn, and returns it and
// the DSN through it.
func proxied(t *testing.T, dsn string) (*testsvc.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := testsvc.NewProxy(t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}

// TestForceRelease_AnswerLost: a forced release whose statement is held up
// in the network (no answer within the request timeout) is sent again, and
// the release reports the holder it freed instead of a failure, which
// would have an operator force again. The copy held up, delivered once the
// lock has changed hands, frees nothing: it compares the token read.
func TestForceRelease_AnswerLost(t *testing.T) {
	const ttl = 30 * time.Second // nothing expires within the test
	dsn := pg.Database(t)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("h"))
	n := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("n"))
	op := dial(t, pdsn, baton.WithTTL(ttl), baton.WithRequestTimeout(time.Second))
	ctx := timeout(t, 60*time.Second)
	const name = "forced-late"
	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	held := p.HoldFirst([]byte(name)) // a parameter: only the force's statement carries it
	info, err := postgres.ForceReleaseToken(ctx, op.Locker(), name, lh.Token())
	select {
	case <-held.Caught():
	default:
		t.Fatal("the proxy held no statement")
	}
	if err != nil {
		t.Fatalf("force whose first statement got no answer: %v; want h's lock released", err)
	}
	if info.Name != name || info.Token != lh.Token() {
		t.Fatalf("force reported %+v; want %s with h's token %d", info, name, lh.Token())
	}
	ln, err := n.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("lock after the forced release: %v; want it free", err)
	}
	held.Deliver(t, ctx)
	infos, err := n.Locker().Backend().(baton.Inspector).Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Holder != "n" || infos[0].Token != ln.Token() || ln.Err() != nil {
		t.Fatalf("after the late copy of the force the lock shows %+v (n's lease err %v); want n's, untouched", infos, ln.Err())
	}
}

// TestRelease_SlowCleanReleaseIsNoLoss: a Release made well before the
// local deadline but held up on its way (here waiting for the pool's only
// connection; in production a retransmit, a stalled server) reaches the
// row after it expired, still holding our token: nobody else held the
// lock, and the work stopped before the deadline, so this is a release,
// not a loss.
func TestRelease_SlowCleanReleaseIsNoLoss(t *testing.T) {
	dsn := pg.Database(t)
	ctx := timeout(t, 30*time.Second)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, err := postgres.New(ctx, pool, baton.WithHolder("a"), baton.WithTTL(2*time.Second), baton.WithRenewEvery(1900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	la, err := a.Acquire(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- la.Release(context.Background()) }()
	// Let the row expire on the server's clock before the release gets
	// the connection.
	batontest.WaitFor(t, 10*time.Second, "the row expired on the server's clock", func() bool {
		var expired bool
		if err := c.QueryRow(ctx, `SELECT expires_at < clock_timestamp() FROM baton_lock WHERE name = 'slow'`).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		return expired
	})
	c.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(la.Err(), baton.ErrReleased) {
		t.Fatalf("Err after a slow clean release: %v; want ErrReleased (nobody else held the lock)", la.Err())
	}
}
