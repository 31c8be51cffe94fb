package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/postgres"
)

// TestAcquire_CancelledDuringSilentRecheck: a waiter's re-check is held
// up in the network, which then goes silent, and the caller gives up.
// The re-check was sent detached from ctx, to run to its request timeout
// (4s), but Acquire returns within about the release timeout (300ms) of
// ctx's end, as baton.Locker.Acquire promises, leaving the rest (the
// re-check's answer, leaving the queue) to a goroutine that Close waits
// for. It used to return after both timeouts, 4.3s.
func TestAcquire_CancelledDuringSilentRecheck(t *testing.T) {
	const name = "cancel-recheck"
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("h"))
	// TTL 5s: w's place expires within the 10s the test waits for it to
	// go, also when the goroutine left behind overruns its release
	// timeout (300ms) leaving the queue.
	w := dial(t, pdsn, baton.WithHolder("w"), baton.WithTTL(5*time.Second), baton.WithRequestTimeout(4*time.Second),
		baton.WithReleaseTimeout(300*time.Millisecond), baton.WithRenewEvery(500*time.Millisecond))
	ctx := timeout(t, 60*time.Second)
	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := acquireAsync(t, w, wctx, name)
	batontest.WaitFor(t, 10*time.Second, "w queued", func() bool { return queued(t, admin, name) == 1 })

	held := p.HoldFirst([]byte(name)) // a parameter of w's re-checks (w holds nothing to renew)
	select {
	case <-held.Caught():
	case <-time.After(5 * time.Second):
		t.Fatal("w sent no re-check")
	}
	p.Block() // nothing w sends from now on is answered, leaving the queue included
	cancelReturns(t, cancel, got, "Acquire", "within about the release timeout, 300ms")
	// The network back, the acquisition left behind finishes: it hears the
	// re-check's answer and leaves the queue.
	p.Unblock()
	held.Release()
	batontest.WaitFor(t, 10*time.Second, "w's place left", func() bool { return queued(t, admin, name) == 0 })
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClose_AbandonedLateGrantGivenBack: a waiter's re-check is held up
// in the network while the holder's release hands it the lock, and its
// caller gives up: Acquire returns at the release timeout, leaving the
// acquisition to finish on its own. The Locker is closed while the
// re-check's answer is still held up. Close ends the Locker's other hold
// at once, not after the abandoned acquisition (whose answer may take up
// to the request timeout), but returns only once that acquisition has
// finished: its re-check claims the hand-off late, and it gives the lease
// back, so that once Close returns the Locker holds no row and has no
// place in the queue. Before, Close waited for the abandoned acquisition
// before ending its holds.
func TestClose_AbandonedLateGrantGivenBack(t *testing.T) {
	const name = "late-grant" // no other lock's name contains it
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("h"))
	// The request timeout (20s) outlasts the test: the held re-check is
	// answered, never given up on.
	w := dial(t, pdsn, baton.WithHolder("w"), baton.WithTTL(30*time.Second), baton.WithRequestTimeout(20*time.Second),
		baton.WithReleaseTimeout(2*time.Second), baton.WithRenewEvery(500*time.Millisecond))
	ctx := timeout(t, 60*time.Second)
	live := func(name string) int {
		var n int
		queryRow(t, admin, `SELECT count(*) FROM baton_lock WHERE name = $1 AND expires_at > clock_timestamp()`, []any{name}, &n)
		return n
	}
	if _, err := w.Acquire(ctx, "kept"); err != nil { // the hold Close ends
		t.Fatal(err)
	}
	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := acquireAsync(t, w, wctx, name)
	batontest.WaitFor(t, 10*time.Second, "w queued", func() bool { return queued(t, admin, name) == 1 })

	held := p.HoldFirst([]byte(name)) // a parameter of w's re-checks
	t.Cleanup(held.Release)           // before w's Close, should the test fail first
	select {
	case <-held.Caught():
	case <-time.After(5 * time.Second):
		t.Fatal("w sent no re-check")
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if holder, _, _ := handedTo(t, admin, name); holder != "w" {
		t.Fatalf("h's release handed the lock to %q, want w", holder)
	}
	cancel()
	select {
	case <-got.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return 10s after its ctx ended")
	}
	if !errors.Is(got.err, context.Canceled) {
		t.Fatalf("Acquire after its ctx ended = %v; want context.Canceled", got.err)
	}

	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	batontest.WaitFor(t, 10*time.Second, "w's Close ended its other hold", func() bool { return live("kept") == 0 })
	select {
	case err := <-closed:
		t.Fatalf("w's Close returned (%v) while its abandoned acquisition still waited for an answer", err)
	default:
	}
	held.Release() // the re-check claims the hand-off, late
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("w's Close: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("w's Close did not return 15s after its abandoned acquisition could finish")
	}
	if n := live(name); n != 0 {
		holder, _, token := handedTo(t, admin, name)
		t.Fatalf("after w's Close the lock is %q's (token %d); want it free: the lease granted late given back", holder, token)
	}
	if n := queued(t, admin, name); n != 0 {
		t.Fatalf("%d waiters queued after w's Close; want none", n)
	}
	if n := postgres.FailedAttempts(w.Locker()); n != 0 {
		t.Fatalf("%d of w's statements failed; want its held re-check answered (the late grant)", n)
	}
}

// TestAcquire_ListenerStartHoldsNoOtherWaiter: while one waiter's start of
// the Locker's listener hangs (its connection held up in the network,
// bounded only by the request timeout, 10s), another waiter of the same
// Locker whose ctx ends returns at once, not when that start ends.
func TestAcquire_ListenerStartHoldsNoOtherWaiter(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("h"))
	w := dial(t, pdsn, baton.WithHolder("w"), baton.WithRequestTimeout(10*time.Second))
	ctx := timeout(t, 60*time.Second)
	for _, name := range []string{"first", "second"} {
		if _, err := h.Acquire(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// A connection's start carries its parameters; w's pool has the one
	// it needs, so the next to open is the listener's.
	held := p.HoldFirst([]byte("application_name"))
	first := acquireAsync(t, w, ctx, "first")
	select {
	case <-held.Caught():
	case <-time.After(10 * time.Second):
		t.Fatal("w opened no connection")
	}
	batontest.WaitFor(t, 10*time.Second, "the first waiter queued", func() bool { return queued(t, admin, "first") == 1 })

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	second := acquireAsync(t, w, sctx, "second")
	batontest.WaitFor(t, 10*time.Second, "the second waiter queued", func() bool { return queued(t, admin, "second") == 1 })
	cancelReturns(t, cancel, second, "the second waiter", "at once, not when the first's listener start ends")
	if queued(t, admin, "second") != 0 {
		t.Error("the second waiter returned without leaving the queue")
	}
	held.Release()
	select {
	case <-first.done:
		t.Fatalf("the first waiter returned (%v) while h holds its lock", first.err)
	default:
	}
}

// TestAcquire_AnswerLost_PlaceLeft: a waiter's first statement commits,
// queueing it, but its answer is lost (the network goes silent after the
// statement reached the server, so that pgx's cancel request is lost too)
// and its client gives up after the request timeout (2s): a place whose
// ticket the waiter never heard. Acquire leaves the queue all the same
// (by its row, which needs no ticket), so the holder's release hands the
// lock to the next waiter at once, not to that place, where it would sit
// for a TTL (30s).
func TestAcquire_AnswerLost_PlaceLeft(t *testing.T) { answerLost(t, false) }

// TestAcquire_AnswerLost_HandOffGivenBack: as above, but the holder
// releases while the waiter is still cut off, handing the lock to the
// place whose ticket the waiter never heard. Leaving the queue frees that
// hand-off (the place is known by the waiter key of the statement that
// made it) and hands the lock on.
func TestAcquire_AnswerLost_HandOffGivenBack(t *testing.T) { answerLost(t, true) }

// answerLost is the two tests above; handedFirst releases the holder's
// lease before the waiter can leave the queue.
func answerLost(t *testing.T, handedFirst bool) {
	const name = "answer-lost"
	const ttl = 30 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("h"))
	// The test acts in two windows, which Dial's defaults for w (a
	// statement_timeout of half the request timeout, a connect timeout of
	// the request timeout) made 500ms and 1s at the 1s request timeout it
	// had: too short on a loaded machine under -race. First, between w's
	// statement reaching the server and the proxy blocking: w's DSN sets
	// statement_timeout=0, which Dial keeps, so the server never cancels
	// the statement waiting for the row; only w's client giving up (at the
	// request timeout, now 2s, when pgx's cancel request would still get
	// through) bounds it. Second, between the lost answer and the
	// unblocking: leaving the queue opens a connection through the blocked
	// proxy, and connect_timeout=30 leaves that wait to the release
	// timeout (10s). Neither changes what is tested: the statement commits,
	// queueing w, after the network went silent, and w leaves the queue
	// once it can reach the server again.
	wdsn := withParam(t, withParam(t, pdsn, "statement_timeout", "0"), "connect_timeout", "30")
	w := dial(t, wdsn, baton.WithTTL(ttl), baton.WithHolder("lost-w"), baton.WithRequestTimeout(2*time.Second), baton.WithReleaseTimeout(10*time.Second))
	v := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("v"))
	ctx := timeout(t, 60*time.Second)
	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// w's statement waits on the server for the row, so that the network
	// can be cut after it got there and before it is answered.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT FROM baton_lock WHERE name = $1 FOR UPDATE`, name); err != nil {
		t.Fatal(err)
	}
	gw := acquireAsync(t, w, ctx, name)
	batontest.WaitFor(t, 10*time.Second, "w's statement waiting for the row", func() bool { return lockWaitsOf(t, admin, "baton lost-w") == 1 })
	p.Block()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	batontest.WaitFor(t, 10*time.Second, "w's statement queued it", func() bool { return queued(t, admin, name) == 1 })
	batontest.WaitFor(t, 10*time.Second, "w gave up on its statement", func() bool { return postgres.FailedAttempts(w.Locker()) == 1 })

	gv := acquireAsync(t, v, ctx, name)
	batontest.WaitFor(t, 10*time.Second, "v queued", func() bool {
		var n int
		queryRow(t, admin, `SELECT count(*) FROM baton_lock_waiters WHERE name = $1 AND holder = 'v' AND expires_at > clock_timestamp()`, []any{name}, &n)
		return n == 1
	})
	release := func() {
		if err := lh.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if handedFirst {
		release()
		if holder, _, _ := handedTo(t, admin, name); holder != "lost-w" {
			t.Fatalf("h's release handed the lock to %q; want the place of w's lost answer", holder)
		}
	}
	p.Unblock()
	select {
	case <-gw.done:
	case <-time.After(15 * time.Second):
		t.Fatal("w's Acquire did not return")
	}
	if !errors.Is(gw.err, baton.ErrUnavailable) {
		t.Fatalf("w's Acquire whose statement got no answer = %v; want ErrUnavailable", gw.err)
	}
	left := time.Now() // w left the queue, or gave up on it
	if !handedFirst {
		release()
	}
	select {
	case <-gv.done:
	case <-time.After(ttl / 6):
		holder, ticket, _ := handedTo(t, admin, name)
		t.Fatalf("v not handed the lock %v after h released it and w left; the lock is %q's (ticket %d): the place of w's lost answer", ttl/6, holder, ticket)
	}
	if gv.err != nil {
		t.Fatal(gv.err)
	}
	if took := gv.at.Sub(left); took > time.Second {
		t.Fatalf("v got the lock %v after h released it and w left; want at once", took.Round(time.Millisecond))
	}
}

// TestAcquire_FreeLockOpensNoListener: an Acquire that gets the lock at
// its first attempt opens no LISTEN connection; the first that has to
// wait does, and is woken through it.
func TestAcquire_FreeLockOpensNoListener(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("free-a"))
	h := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("h"))
	ctx := timeout(t, 60*time.Second)
	listeners := func() int {
		var n int
		queryRow(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, []any{`LISTEN "` + postgres.Channel(a.Locker()) + `"`}, &n)
		return n
	}
	la, err := a.Acquire(ctx, "free")
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := listeners(); n != 0 {
		t.Fatalf("%d LISTEN connections after an Acquire of a free lock; want none", n)
	}

	lh, err := h.Acquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, a, ctx, "busy")
	batontest.WaitFor(t, 10*time.Second, "the waiter's LISTEN connection", func() bool { return listeners() == 1 })
	waitQueued(t, a, "busy")
	released := time.Now()
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not handed the lock 5s after the release")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	t.Logf("handed the lock %v after the release", got.at.Sub(released).Round(time.Millisecond))
}

// TestAcquire_HandOffBeforeListen_Claimed: a Locker's first wait starts
// its listener only after its first attempt queued it. A release that
// hands it the lock before the LISTEN (here while the listener's
// connection is held up) notifies nobody; the look the waiter takes once
// it listens claims the hand-off at once, not at its next timed look
// (RenewEvery, 10s).
func TestAcquire_HandOffBeforeListen_Claimed(t *testing.T) {
	const name = "before-listen"
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("h"))
	w := dial(t, pdsn, baton.WithTTL(30*time.Second), baton.WithHolder("w"))
	ctx := timeout(t, 60*time.Second)
	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	held := p.HoldFirst([]byte("application_name")) // the next connection to open: the listener's
	got := acquireAsync(t, w, ctx, name)
	select {
	case <-held.Caught():
	case <-time.After(10 * time.Second):
		t.Fatal("w opened no connection")
	}
	batontest.WaitFor(t, 10*time.Second, "w queued", func() bool { return queued(t, admin, name) == 1 })
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if holder, _, _ := handedTo(t, admin, name); holder != "w" {
		t.Fatalf("h's release handed the lock to %q, want w", holder)
	}
	listening := time.Now()
	held.Release()
	select {
	case <-got.done:
	case <-time.After(5 * time.Second):
		t.Fatal("w did not claim the lock handed to it before it listened, 5s after it could listen")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	t.Logf("w held the lock %v after its listener could connect", got.at.Sub(listening).Round(time.Millisecond))
}

// lockWaitsOf returns how many of the server's sessions named app wait for
// a lock.
func lockWaitsOf(t testing.TB, admin *pgxpool.Pool, app string) int {
	var n int
	queryRow(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock'`, []any{app}, &n)
	return n
}

// cancelReturns cancels the acquisition got (cancel ends its ctx) and fails
// t unless it returns context.Canceled within a second (want says what is
// expected, for the message), or at all within 15s.
func cancelReturns(t *testing.T, cancel context.CancelFunc, got *pending, what, want string) {
	t.Helper()
	cancel()
	cancelled := time.Now()
	select {
	case <-got.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not return 15s after its ctx ended", what)
	}
	if !errors.Is(got.err, context.Canceled) {
		t.Fatalf("%s after its ctx ended = %v; want context.Canceled", what, got.err)
	}
	if took := got.at.Sub(cancelled); took > time.Second {
		t.Fatalf("%s returned %v after its ctx ended; want %s", what, took.Round(time.Millisecond), want)
	}
}
