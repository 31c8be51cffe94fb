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

// pending is an Acquire running in the background.
type pending struct {
	done chan struct{} // closed when Acquire returned
	at   time.Time     // when Acquire returned, before anything else ran on its goroutine
	l    *baton.FencedLease
	err  error
}

// acquireAsync starts Acquire; when t ends it is cancelled, awaited, and
// its lease released.
func acquireAsync(t *testing.T, l *baton.FencedLocker, ctx context.Context, name string) *pending {
	ctx, cancel := context.WithCancel(ctx)
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.l, p.err = l.Acquire(ctx, name)
		p.at = time.Now()
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
		if p.err == nil {
			_ = p.l.Release(context.Background())
		}
	})
	return p
}

// handedTo returns the holder, ticket and token of name's live row.
func handedTo(t *testing.T, admin *pgxpool.Pool, name string) (holder string, ticket, token int64) {
	queryRow(t, admin, `SELECT holder, ticket, token FROM baton_lock WHERE name = $1 AND expires_at > clock_timestamp()`, []any{name}, &holder, &ticket, &token)
	return
}

// handOff has a take name, w queue for it, and a release it (running
// beforeRelease, when not nil, just before), and returns w's Acquire once
// it returned with the lease handed to it, checking that w holds the row's
// token, above a's.
func handOff(t *testing.T, admin *pgxpool.Pool, a, w *baton.FencedLocker, name string, beforeRelease func()) *pending {
	t.Helper()
	la, err := a.Acquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, w, timeout(t, 20*time.Second), name)
	batontest.WaitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, name) == 1 })
	if beforeRelease != nil {
		beforeRelease()
	}
	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-got.done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if _, _, tok := handedTo(t, admin, name); got.l.Token() != baton.Token(tok) || got.l.Token() <= la.Token() {
		t.Errorf("handed token %d, row holds %d, previous holder had %d", got.l.Token(), tok, la.Token())
	}
	return got
}

// TestHandOff_Held: a waiter handed the lock by a release holds it without
// a round trip of its own.
func TestHandOff_Held(t *testing.T) {
	// A waiter also looks again on its own, when the holder's lease ends and
	// at least every RenewEvery; such a look would be a statement, counted
	// below. With TTLs of 5 minutes neither comes within the test, however
	// slow the machine, so any statement counted is one the hand-off caused.
	const ttl = 5 * time.Minute
	dsn := pg.Database(t)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	w := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("w"))
	listenFirst(t, w)
	admin := newPool(t, dsn)
	var before int64
	handOff(t, admin, a, w, "handoff", func() { before = postgres.Attempts(w.Locker()) })
	if n := postgres.Attempts(w.Locker()) - before; n != 0 {
		t.Errorf("the waiter sent %d statements to take a lock handed to it, want none", n)
	}
}

// TestHandOff_HeldRenewed: a lease handed by a release is renewed like any
// other, past its TTL, and another client finds the lock held by its new
// holder throughout.
func TestHandOff_HeldRenewed(t *testing.T) {
	// Renewals are the point, so w renews every 250ms with 3s to spare:
	// each renewal has 2.75s to land, not the 0.65s of a 1s TTL. w looks
	// again on its own at the same interval while it waits, so it may claim
	// the hand-off before its NOTIFY arrives; either way it holds the lease
	// handed to it (TestHandOff_Held shows the NOTIFY needs no statement).
	// The holder's 5 minutes keep its lease's end from waking w.
	const ttl, renew = 3 * time.Second, 250 * time.Millisecond
	dsn := pg.Database(t)
	a := dial(t, dsn, baton.WithTTL(5*time.Minute), baton.WithHolder("a"))
	w := dial(t, dsn, baton.WithTTL(ttl), baton.WithRenewEvery(renew), baton.WithHolder("w"))
	c := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("c"))
	admin := newPool(t, dsn)
	r := handOff(t, admin, a, w, "renewed", nil)
	// For 1.5 TTL (a dozen renewals) the handed lease stays up, and
	// another client, trying every TTL/12, finds the lock held by w. Past
	// the first TTL only renewals keep it.
	end := time.After(ttl + ttl/2)
	try := time.NewTicker(ttl / 12)
	defer try.Stop()
	for {
		_, err := c.TryAcquire(timeout(t, 5*time.Second), "renewed")
		var nae *baton.NotAcquiredError
		if !errors.As(err, &nae) || nae.Holder != "w" {
			t.Fatalf("TryAcquire while w holds: %v", err)
		}
		select {
		case <-r.l.Done():
			t.Fatalf("handed lease ended: %v", r.l.Err())
		case <-end:
			if err := r.l.Err(); err != nil {
				t.Fatalf("handed lease ended: %v", err)
			}
			return
		case <-try.C:
		}
	}
}

// TestHandOff_LostNotify_Claimed: when the waiter the lock was handed to
// never hears of it, its own re-check claims the hand-off (same token,
// lease extended); meanwhile the lock is held, by it.
func TestHandOff_LostNotify_Claimed(t *testing.T) {
	const ttl = 2 * time.Second // the waiter re-checks at least every TTL/3
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	// The holder's lease lasts 5 minutes, so its end cannot be what makes
	// the waiter look again: only the waiter's own RenewEvery can.
	a := dial(t, dsn, baton.WithTTL(5*time.Minute), baton.WithHolder("a"))
	w := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("w"))
	c := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("c"))
	la, err := a.Acquire(timeout(t, 10*time.Second), "claim")
	if err != nil {
		t.Fatal(err)
	}
	postgres.Deaf(w.Locker(), true)
	got := acquireAsync(t, w, timeout(t, 20*time.Second), "claim")
	batontest.WaitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "claim") == 1 })
	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	holder, ticket, token := handedTo(t, admin, "claim")
	if holder != "w" || ticket == 0 {
		t.Fatalf("after the release the row is held by %q (ticket %d); want handed to w", holder, ticket)
	}
	_, err = c.TryAcquire(timeout(t, 5*time.Second), "claim")
	var nae *baton.NotAcquiredError
	if !errors.As(err, &nae) || nae.Holder != "w" || nae.Token != baton.Token(token) {
		t.Fatalf("TryAcquire of a lock handed to w: %v", err)
	}
	<-got.done
	r := got
	if r.err != nil {
		t.Fatal(r.err)
	}
	// The claimed lease's local deadline is a TTL (less the drift) after
	// the claim was sent, well after the hand-off; the row must last at
	// least that long by the database's clock, which only a claim that
	// extended it gives. A renewal since would only extend it further, so
	// this holds whenever it is read. The deadline is read after the query,
	// so the time it has left is no more than it had when the row was read.
	var left float64
	queryRow(t, admin, `SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM baton_lock WHERE name = 'claim'`, nil, &left)
	local := time.Until(r.l.Deadline())
	took := r.at.Sub(released)
	t.Logf("the deaf waiter claimed the hand-off %v after the release", took.Round(time.Millisecond))
	if r.l.Token() != baton.Token(token) {
		t.Errorf("claimed token %d, handed %d", r.l.Token(), token)
	}
	// The waiter's last statement went out before the release, and it looks
	// again at most RenewEvery (TTL/3) after it; the claim is one statement
	// more, given 1s here (a loaded machine, -race). r.at is taken as
	// Acquire returns, so the round trips above do not count. The holder's
	// lease does not end for minutes, so a waiter that did not look again on
	// its own would not claim within the test at all.
	recheck := w.Locker().Config().RenewEvery
	if bound := recheck + time.Second; took > bound {
		t.Errorf("claimed %v after the release; want within its re-check interval (%v) and one statement: %v", took, recheck, bound)
	}
	if left < local.Seconds() {
		t.Errorf("the claimed lease's row has %.3fs left by the database's clock, its local deadline %v: the claim should have extended it", left, local.Round(time.Millisecond))
	}
}

// TestHandOff_WaiterGaveUp: a waiter that gives up after the lock was
// handed to it (before hearing of it) gives the lock back and hands it on
// at once, so the next waiter does not wait for the lease to expire.
func TestHandOff_WaiterGaveUp(t *testing.T) {
	// No re-check or expiry within the test, however slow the machine: a
	// re-check by w1 between the release and its giving up would claim the
	// lock handed to it, and w2 would get it by its own re-check instead of
	// the hand-off under test. The fallback re-check is RenewEvery, 100s.
	const ttl = 5 * time.Minute
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	w1 := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("w1"))
	w2 := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("w2"))
	la, err := a.Acquire(timeout(t, 10*time.Second), "gaveup")
	if err != nil {
		t.Fatal(err)
	}
	postgres.Deaf(w1.Locker(), true)
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	got1 := acquireAsync(t, w1, ctx1, "gaveup")
	batontest.WaitFor(t, 10*time.Second, "w1 queued", func() bool { return queued(t, admin, "gaveup") == 1 })
	got2 := acquireAsync(t, w2, timeout(t, time.Minute), "gaveup")
	batontest.WaitFor(t, 10*time.Second, "w2 queued", func() bool { return queued(t, admin, "gaveup") == 2 })

	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	holder, _, handed := handedTo(t, admin, "gaveup")
	if holder != "w1" {
		t.Fatalf("handed to %q, want w1", holder)
	}
	cancel1()
	gaveUp := time.Now()
	select {
	case <-got1.done:
		if !errors.Is(got1.err, context.Canceled) {
			t.Fatalf("w1's Acquire after cancel = %v, want context.Canceled", got1.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("w1 did not give up")
	}
	select {
	case <-got2.done:
		if got2.err != nil {
			t.Fatal(got2.err)
		}
		t.Logf("w2 got the lock %v after w1 gave up", time.Since(gaveUp).Round(time.Millisecond))
		if got2.l.Token() <= baton.Token(handed) {
			t.Errorf("w2's token %d <= the one handed to w1 (%d)", got2.l.Token(), handed)
		}
	case <-time.After(10 * time.Second): // well before w2's own re-check, 100s
		t.Fatal("w2 still waiting 10s after w1 gave up a lock handed to it")
	}
}

// TestHandOff_FreedNotClaimed: a lock handed to a waiter and then freed
// (here by an operator's force-release; the waiter leaving frees it the
// same way) is not brought back by a claim for that waiter's ticket, as a
// copy of its statement arriving late would send: the claim keeps no token
// and no start time of the freed lease, and takes the free lock like any
// other acquisition, with a new token.
func TestHandOff_FreedNotClaimed(t *testing.T) {
	// The deaf waiter does not look again within the test, however slow the
	// machine (its fallback re-check is RenewEvery, 100s): only the test's
	// own Claim sends the waiter's statement.
	const ttl = 5 * time.Minute
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	w := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("w"))
	ctx := timeout(t, 20*time.Second)
	la, err := a.Acquire(ctx, "freed")
	if err != nil {
		t.Fatal(err)
	}
	postgres.Deaf(w.Locker(), true)
	acquireAsync(t, w, ctx, "freed")
	batontest.WaitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "freed") == 1 })
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	holder, ticket, handed := handedTo(t, admin, "freed")
	if holder != "w" || ticket == 0 {
		t.Fatalf("after the release the row is held by %q (ticket %d); want handed to w", holder, ticket)
	}
	info, err := a.Locker().Backend().(baton.ForceReleaser).ForceRelease(ctx, "freed")
	if err != nil || info.Token != baton.Token(handed) {
		t.Fatalf("force-release of the lease handed to w: %+v, %v", info, err)
	}
	got, err := postgres.Claim(ctx, w.Locker(), "freed", ticket)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("the claim did not take the free lock")
	}
	if *got <= handed {
		t.Errorf("a claim after the force-release holds token %d; want a new one, above the freed %d", *got, handed)
	}
}
