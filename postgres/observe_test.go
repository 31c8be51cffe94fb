package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/postgres"
)

// observe observes the election name on l until t ends.
func observe(t *testing.T, l *baton.FencedLocker, name string) <-chan baton.Term {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	terms, err := l.Observe(ctx, name)
	if err != nil {
		cancel()
		t.Fatalf("Observe(%q): %v", name, err)
	}
	t.Cleanup(func() {
		cancel()
		for range terms { // until the observer has stopped
		}
	})
	return terms
}

// who names a term's leader, "-" for no leader.
func who(tm baton.Term) string {
	if tm.NoLeader() {
		return "-"
	}
	return tm.Leader
}

// expectTerms reads len(want) terms, each within d, and compares their
// leaders with want.
func expectTerms(t *testing.T, terms <-chan baton.Term, d time.Duration, want ...string) []baton.Term {
	t.Helper()
	var got []baton.Term
	var names []string
	for range want {
		select {
		case tm, ok := <-terms:
			if !ok {
				t.Fatalf("the observation ended after %q; want %q", names, want)
			}
			got = append(got, tm)
			names = append(names, who(tm))
		case <-time.After(d):
			t.Fatalf("observed %q, then nothing for %v; want %q", names, d, want)
		}
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("observed %q, want %q", names, want)
	}
	return got
}

// expectQuiet fails if a term comes within d.
func expectQuiet(t *testing.T, terms <-chan baton.Term, d time.Duration) {
	t.Helper()
	select {
	case tm, ok := <-terms:
		t.Fatalf("observed %q (%+v, open %v), want nothing", who(tm), tm, ok)
	case <-time.After(d):
	}
}

// listenRaw LISTENs on the lease table's channel on a connection of its
// own, to see the triggers' notifications themselves.
func listenRaw(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(timeout(t, 10*time.Second), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Init(timeout(t, 10*time.Second), conn, ""); err != nil { // the triggers
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var channel string
	if err := conn.QueryRow(timeout(t, 10*time.Second), `SELECT 'baton.observe.' || 'baton_lock'::regclass::oid`).Scan(&channel); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(timeout(t, 10*time.Second), "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// notifications returns the payloads conn receives within d.
func notifications(t *testing.T, conn *pgx.Conn, d time.Duration) []string {
	t.Helper()
	var got []string
	end := time.Now().Add(d)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), end)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if n != nil {
			got = append(got, n.Payload)
		}
		if err != nil {
			if time.Now().Before(end) {
				t.Fatal(err)
			}
			return got
		}
	}
}

// TestObserve_HandOff_OneChange: a release that hands the lock to a
// waiter is one change, A to B, with no empty term between: the release
// and the hand-off commit together, and the triggers notify the row as it
// is at commit, once.
func TestObserve_HandOff_OneChange(t *testing.T) {
	const ttl = 5 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	b := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("b"))
	obs := dial(t, dsn, baton.WithTTL(ttl))
	terms := observe(t, obs, "mailer")
	expectTerms(t, terms, 5*time.Second, "-")
	raw := listenRaw(t, dsn)

	la, err := a.Acquire(timeout(t, 10*time.Second), "mailer")
	if err != nil {
		t.Fatal(err)
	}
	ta := expectTerms(t, terms, 5*time.Second, "a")[0]
	now, err := obs.Leader(timeout(t, 10*time.Second), "mailer")
	if err != nil {
		t.Fatal(err)
	}
	if ta.Token != la.Token() || ta.Key != la.Key() || !ta.Since.Equal(now.Since) || ta.Election != "mailer" {
		t.Errorf("term %+v; want token %d, key %s, since %v (as Leader says)", ta, la.Token(), la.Key(), now.Since)
	}
	got := acquireAsync(t, b, timeout(t, 20*time.Second), "mailer")
	batontest.WaitFor(t, 10*time.Second, "b queued", func() bool { return queued(t, admin, "mailer") == 1 })
	notifications(t, raw, 100*time.Millisecond) // drop a's
	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	tb := expectTerms(t, terms, 5*time.Second, "b")[0]
	<-got.done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if tb.Token != got.l.Token() {
		t.Errorf("observed b with token %d, its lease has %d", tb.Token, got.l.Token())
	}
	if n := notifications(t, raw, 200*time.Millisecond); len(n) != 1 || !strings.Contains(n[0], `"holder" : "b"`) {
		t.Errorf("the release and hand-off notified %q, want b's row once", n)
	}
	if err := got.l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "-")
}

// TestObserve_ForceRelease: a forced release hands the lock to the waiter
// (one change), and with nobody waiting leaves no leader.
func TestObserve_ForceRelease(t *testing.T) {
	const ttl = 5 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	b := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("b"))
	fr := a.Locker().Backend().(baton.ForceReleaser)
	terms := observe(t, a, "report")
	expectTerms(t, terms, 5*time.Second, "-")
	if _, err := a.Acquire(timeout(t, 10*time.Second), "report"); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "a")
	got := acquireAsync(t, b, timeout(t, 20*time.Second), "report")
	batontest.WaitFor(t, 10*time.Second, "b queued", func() bool { return queued(t, admin, "report") == 1 })
	if _, err := fr.ForceRelease(timeout(t, 10*time.Second), "report"); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "b")
	<-got.done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if _, err := fr.ForceRelease(timeout(t, 10*time.Second), "report"); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "-")
}

// TestObserve_Expiry: a lease made to expire from outside, and one whose
// holder crashed (which writes nothing: the observer reads the row when
// the lease ends by the database's clock), show as no leader.
func TestObserve_Expiry(t *testing.T) {
	const ttl = time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(10*time.Second), baton.WithHolder("a"))
	terms := observe(t, a, "expiry")
	expectTerms(t, terms, 5*time.Second, "-")
	if _, err := a.Acquire(timeout(t, 10*time.Second), "expiry"); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "a")
	execSQL(t, admin, `UPDATE baton_lock SET expires_at = clock_timestamp() WHERE name = 'expiry'`)
	expectTerms(t, terms, 2*time.Second, "-")

	// A holder that crashes: its pool is closed, nothing is released.
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c, err := postgres.New(timeout(t, 10*time.Second), pool, baton.WithTTL(ttl), baton.WithHolder("crashed"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Acquire(timeout(t, 10*time.Second), "expiry"); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "crashed")
	pool.Close() // no renewal can land after it
	crashed := time.Now()
	// The row's expiry by the database's clock, as a time on ours: the
	// query ran after crashed, so crashed plus the time it found left is no
	// later than the expiry. How long before the crash the last renewal
	// ran does not matter.
	var left float64
	queryRow(t, admin, `SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM baton_lock WHERE name = 'expiry'`, nil, &left)
	expired := crashed.Add(time.Duration(left * float64(time.Second)))
	// Well under the observer's idle re-read (a minute), which is all a
	// missed expiry would leave.
	expectTerms(t, terms, 5*time.Second, "-")
	seen := time.Now()
	t.Logf("no leader observed %v after the holder crashed (TTL %v), %v after its lease expired", seen.Sub(crashed).Round(time.Millisecond), ttl, seen.Sub(expired).Round(time.Millisecond))
	if seen.Before(expired) {
		t.Errorf("no leader observed %v before the crashed holder's lease expired by the database's clock", expired.Sub(seen))
	}
	// The observer looks again at the expiry it knew: 2s is a loaded
	// machine's scheduling, not a wait for some later look.
	if late := seen.Sub(expired); late > 2*time.Second {
		t.Errorf("no leader observed only %v after the lease expired", late)
	}
}

// TestObserve_Renewals_NoTerms: a lease held for 2 TTLs, renewed every
// 250ms, is one term, and its renewals notify nothing; the observer's reads
// at the ends of the lease it knew find it renewed.
func TestObserve_Renewals_NoTerms(t *testing.T) {
	// Renewals are the point, so many of them, each with 2.75s to land (at
	// a 1s TTL, 0.65s, which a loaded machine can miss and lose the lease).
	const ttl, renew = 3 * time.Second, 250 * time.Millisecond
	dsn := pg.Database(t)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithRenewEvery(renew), baton.WithHolder("a"))
	terms := observe(t, a, "steady")
	expectTerms(t, terms, 5*time.Second, "-")
	raw := listenRaw(t, dsn)
	la, err := a.Acquire(timeout(t, 10*time.Second), "steady")
	if err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "a")
	if n := notifications(t, raw, 100*time.Millisecond); len(n) != 1 {
		t.Errorf("the acquisition notified %q, want once", n)
	}
	expectQuiet(t, terms, 2*ttl)
	if n := notifications(t, raw, 50*time.Millisecond); len(n) != 0 {
		t.Errorf("renewals notified %q", n)
	}
	if la.Err() != nil {
		t.Fatalf("lease lost meanwhile: %v", la.Err())
	}
	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "-")
}

// TestObserve_Elections_Separate: two elections on one table do not see
// each other's changes.
func TestObserve_Elections_Separate(t *testing.T) {
	const ttl = 5 * time.Second
	dsn := pg.Database(t)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	b := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("b"))
	one := observe(t, a, "one")
	two := observe(t, b, "two")
	expectTerms(t, one, 5*time.Second, "-")
	expectTerms(t, two, 5*time.Second, "-")

	l1, err := a.Acquire(timeout(t, 10*time.Second), "two")
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l2, err := b.Acquire(timeout(t, 10*time.Second), "two")
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range expectTerms(t, two, 5*time.Second, "a", "-", "b") {
		if tm.Election != "two" {
			t.Errorf("election two observed %+v", tm)
		}
	}
	l3, err := a.Acquire(timeout(t, 10*time.Second), "one")
	if err != nil {
		t.Fatal(err)
	}
	if tm := expectTerms(t, one, 5*time.Second, "a")[0]; tm.Election != "one" || tm.Token != l3.Token() {
		t.Errorf("election one observed %+v, want a with token %d", tm, l3.Token())
	}
	expectQuiet(t, one, 200*time.Millisecond)
	expectQuiet(t, two, 10*time.Millisecond)
	_ = l2.Release(context.Background())
	expectTerms(t, two, 5*time.Second, "-")
	expectQuiet(t, one, 200*time.Millisecond)
}

// TestObserve_TakenDirectly_NoLeaderBefore: a lock taken by someone who
// never queued (ticket 0) was free first, so a term with no leader comes
// before the taker's, even when the observer never saw the lock free;
// one that went to a waiter (a ticket) follows its holder directly, even
// when freed and handed on in one transaction.
func TestObserve_TakenDirectly_NoLeaderBefore(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	obs := dial(t, dsn, baton.WithTTL(5*time.Second))
	terms := observe(t, obs, "byhand")
	expectTerms(t, terms, 5*time.Second, "-")
	take := func(holder string, ticket int64) {
		t.Helper()
		execSQL(t, admin, `INSERT INTO baton_lock AS l (name, holder, token, ticket, acquired_at, expires_at)
			VALUES ('byhand', $1, nextval('baton_lock_token'), $2, clock_timestamp(), clock_timestamp() + interval '1 hour')
			ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, token = EXCLUDED.token, ticket = EXCLUDED.ticket,
				acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at`, holder, ticket)
	}
	take("a", 0)
	expectTerms(t, terms, 5*time.Second, "a")
	take("b", 0)
	expectTerms(t, terms, 5*time.Second, "-", "b")
	take("c", 42)
	expectTerms(t, terms, 5*time.Second, "c")

	ctx := timeout(t, 10*time.Second)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	for _, sql := range []string{
		`UPDATE baton_lock SET expires_at = '-infinity' WHERE name = 'byhand'`,
		`UPDATE baton_lock SET holder = 'd', token = nextval('baton_lock_token'), ticket = 43,
			acquired_at = clock_timestamp(), expires_at = clock_timestamp() + interval '1 hour' WHERE name = 'byhand'`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "d")
	execSQL(t, admin, `UPDATE baton_lock SET expires_at = '-infinity' WHERE name = 'byhand'`)
	expectTerms(t, terms, 5*time.Second, "-")
}

// observerPIDs returns the backends of observers' connections: the last
// statement they ran is the mark of a read.
func observerPIDs(t *testing.T, admin *pgxpool.Pool) []int32 {
	t.Helper()
	rows, err := admin.Query(timeout(t, 5*time.Second), `SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_notify($1, $2)' AND datname = current_database()`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// killObserver ends the observer's connection from the server and waits
// until it has connected again.
func killObserver(t *testing.T, admin *pgxpool.Pool, reconnected bool) {
	t.Helper()
	old := observerPIDs(t, admin)
	if len(old) != 1 {
		t.Fatalf("%d observer connections, want 1", len(old))
	}
	execSQL(t, admin, `SELECT pg_terminate_backend($1)`, old[0])
	if !reconnected {
		return
	}
	batontest.WaitFor(t, 10*time.Second, "the observer connected again", func() bool {
		p := observerPIDs(t, admin)
		return len(p) == 1 && p[0] != old[0]
	})
}

// TestObserve_Reconnects: an observer whose connection is killed connects
// again, reports no change that did not happen, and reports those made
// while it was away: here a release and a direct take, as no leader, then
// the taker.
func TestObserve_Reconnects(t *testing.T) {
	const ttl = 5 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	b := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("b"))
	obs := dial(t, dsn, baton.WithTTL(ttl))
	terms := observe(t, obs, "relisten")
	expectTerms(t, terms, 5*time.Second, "-")
	la, err := a.Acquire(timeout(t, 10*time.Second), "relisten")
	if err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "a")

	killObserver(t, admin, true)
	expectQuiet(t, terms, 300*time.Millisecond)

	killObserver(t, admin, false)
	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(timeout(t, 10*time.Second), "relisten")
	if err != nil {
		t.Fatal(err)
	}
	if tm := expectTerms(t, terms, 5*time.Second, "-", "b")[1]; tm.Token != lb.Token() {
		t.Errorf("observed b with token %d, its lease has %d", tm.Token, lb.Token())
	}
}

// TestObserve_NoTriggers: a Locker's first acquisition makes the tables
// without the observers' triggers, so a lock nobody observes does not pay for them. A Locker whose
// user may not add them still locks, and Observe says to run Init; it works
// once the owner has. The first Observe of a user who may add them does.
func TestObserve_NoTriggers(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	owner := dial(t, dsn) // its first acquisition creates the tables
	triggers := func() int {
		var n int
		queryRow(t, admin, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'baton_lock'::regclass AND tgname LIKE 'baton_observe_%'`, nil, &n)
		return n
	}
	lo, err := owner.Acquire(timeout(t, 10*time.Second), "y")
	if err != nil {
		t.Fatal(err)
	}
	_ = lo.Release(context.Background())
	if n := triggers(); n != 0 {
		t.Fatalf("%d observer triggers after Dial and a lock, want none until someone observes", n)
	}

	app := dial(t, dmlUser(t, admin, dsn), baton.WithTTL(5*time.Second), baton.WithHolder("app"))
	if _, err := app.Acquire(timeout(t, 10*time.Second), "x"); err != nil {
		t.Fatalf("Acquire without the observers' triggers: %v", err)
	}
	_, err = app.Observe(timeout(t, 10*time.Second), "x")
	if !errors.Is(err, postgres.ErrNotObservable) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "postgres.Init") {
		t.Fatalf("Observe without the triggers: %v; want ErrNotObservable, not ErrUnavailable (trying again will not help), naming postgres.Init", err)
	}
	if err := postgres.Init(timeout(t, 10*time.Second), admin, ""); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, observe(t, app, "x"), 5*time.Second, "app")

	execSQL(t, admin, `DROP TRIGGER baton_observe_insert ON baton_lock; DROP TRIGGER baton_observe_update ON baton_lock`)
	expectTerms(t, observe(t, owner, "x"), 5*time.Second, "app")
	if n := triggers(); n != 2 {
		t.Errorf("%d observer triggers after the owner's Observe, want 2", n)
	}
}

// TestObserve_LockerClosed: closing the Locker ends its observers: the
// channel closes while the caller's context lives on.
func TestObserve_LockerClosed(t *testing.T) {
	dsn := pg.Database(t)
	a, err := postgres.Dial(timeout(t, 10*time.Second), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	ctx := timeout(t, 30*time.Second)
	terms, err := a.Observe(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "-")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case tm, ok := <-terms:
		if ok {
			t.Fatalf("term %+v after Close", tm)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel still open 5s after Close")
	}
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
	if _, err := a.Observe(ctx, "x"); !errors.Is(err, baton.ErrClosed) {
		t.Errorf("Observe after Close: %v, want ErrClosed", err)
	}
}

// alternate has x and y take and release the lock name in turns, n times
// in all, and returns the terms an observer should see: each holder, then
// no leader.
func alternate(t *testing.T, x, y *baton.FencedLocker, name string, n int) []string {
	t.Helper()
	var want []string
	for i := range n {
		l, who := x, "x"
		if i%2 == 1 {
			l, who = y, "y"
		}
		lease, err := l.Acquire(timeout(t, 10*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		want = append(want, who, "-")
	}
	return want
}

// TestObserve_SlowReader_LosesNothing: terms decided while nobody reads
// wait, in order.
func TestObserve_SlowReader_LosesNothing(t *testing.T) {
	const ttl = 5 * time.Second
	dsn := pg.Database(t)
	x := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("x"))
	y := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("y"))
	terms := observe(t, x, "slow")
	want := alternate(t, x, y, "slow", 10)
	expectTerms(t, terms, 5*time.Second, append([]string{"-"}, want...)...)
	expectQuiet(t, terms, 100*time.Millisecond)
}

// TestObserve_SlowReader_QueueCapped: a reader far behind gets the terms
// its observation kept, up to its cap, the latest in order, and not the
// older ones, which went first.
func TestObserve_SlowReader_QueueCapped(t *testing.T) {
	const ttl = 5 * time.Second
	const capped = 4
	dsn := pg.Database(t)
	x := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("x"))
	y := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("y"))
	postgres.SetObserverQueue(x.Locker(), capped)
	terms := observe(t, x, "capped")
	want := alternate(t, x, y, "capped", 10)
	// Every term decided (the first and 20 more), while nobody read.
	batontest.WaitFor(t, 10*time.Second, fmt.Sprintf("the observation deciding %d terms", 1+len(want)), func() bool {
		return postgres.Decided(x.Locker()) >= int64(1+len(want))
	})
	// The reader, back: the first term (which the Locker's relay took
	// before the reader left), the one the observation was sending (if
	// it had begun to), and the last four it kept.
	var got []string
	for quiet := false; !quiet; {
		select {
		case tm := <-terms:
			got = append(got, who(tm))
		case <-time.After(500 * time.Millisecond):
			quiet = true
		}
	}
	if n := len(got); n < 1+capped || n > 2+capped || got[0] != "-" || strings.Join(got[n-capped:], " ") != strings.Join(want[len(want)-capped:], " ") {
		t.Fatalf("observed %q; want no leader, perhaps one term, then the last %d of %q", got, capped, want)
	}
}

// TestObserve_WriterSearchPath: the observers' trigger finds its table
// under the search_path it was created with, so a writer whose own
// search_path does not hold the table (it names it schema.table) still
// commits, and is observed.
func TestObserve_WriterSearchPath(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	execSQL(t, admin, "CREATE SCHEMA elsewhere")
	obs := dial(t, dsn, baton.WithTTL(5*time.Second))
	terms := observe(t, obs, "mailer")
	expectTerms(t, terms, 5*time.Second, "-")

	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c search_path=elsewhere")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // libpq reads no '+' as a space
	w := dial(t, u.String(), baton.WithTTL(5*time.Second), baton.WithHolder("w"), baton.WithPrefix("public."+postgres.DefaultTable))
	l, err := w.Acquire(timeout(t, 10*time.Second), "mailer")
	if err != nil {
		t.Fatalf("acquire with search_path=elsewhere: %v", err)
	}
	expectTerms(t, terms, 5*time.Second, "w")
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectTerms(t, terms, 5*time.Second, "-")
}

// TestObserve_DatabaseGone: an observer cut off from the database (a
// partition: its reconnections get no answer) ends once it has not heard
// from it for a TTL, instead of reporting the last leader for as long as
// its context lasts.
func TestObserve_DatabaseGone(t *testing.T) {
	dsn := pg.Database(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testsvc.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	const ttl = 2 * time.Second
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	obs := dial(t, u.String(), baton.WithTTL(ttl), baton.WithRequestTimeout(time.Second))
	if _, err := a.Acquire(timeout(t, 10*time.Second), "gone"); err != nil {
		t.Fatal(err)
	}
	terms := observe(t, obs, "gone")
	expectTerms(t, terms, 5*time.Second, "a")
	proxy.Block()
	proxy.Cut()
	defer proxy.Unblock()
	end := time.After(ttl + 2*time.Second + 3*time.Second + 5*time.Second) // TTL, the longest backoff, a few tries' timeouts, slack
	for {
		select {
		case tm, ok := <-terms:
			if !ok {
				return
			}
			t.Fatalf("a term with the database gone: %+v", tm)
		case <-end:
			t.Fatal("the observation cut off from the database goes on")
		}
	}
}
