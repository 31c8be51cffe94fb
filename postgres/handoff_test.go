package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/postgres"
)

// pending is an Acquire running in the background.
type pending struct {
	done chan struct{} // closed when Acquire returned
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

// TestHandOff_Held: a waiter handed the lock by a release holds it without
// a round trip of its own, and its lease is renewed like any other.
func TestHandOff_Held(t *testing.T) {
	const ttl = time.Second
	dsn := pg.Database(t)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	w := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("w"))
	c := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("c"))
	admin := newPool(t, dsn)
	la, err := a.Acquire(timeout(t, 10*time.Second), "handoff")
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, w, timeout(t, 20*time.Second), "handoff")
	waitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "handoff") == 1 })
	before := postgres.Attempts(w.Locker())
	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-got.done
	r := got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := postgres.Attempts(w.Locker()) - before; n != 0 {
		t.Errorf("the waiter sent %d statements to take a lock handed to it, want none", n)
	}
	if _, _, tok := handedTo(t, admin, "handoff"); r.l.Token() != baton.Token(tok) || r.l.Token() <= la.Token() {
		t.Errorf("handed token %d, row holds %d, previous holder had %d", r.l.Token(), tok, la.Token())
	}
	// For 2 TTL (six renewals) the handed lease stays up, and another
	// client, trying every TTL/4, finds the lock held by w.
	end := time.After(2 * ttl)
	try := time.NewTicker(ttl / 4)
	defer try.Stop()
	for {
		_, err := c.TryAcquire(timeout(t, 5*time.Second), "handoff")
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
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("a"))
	w := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("w"))
	c := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("c"))
	la, err := a.Acquire(timeout(t, 10*time.Second), "claim")
	if err != nil {
		t.Fatal(err)
	}
	postgres.Deaf(w.Locker(), true)
	got := acquireAsync(t, w, timeout(t, 20*time.Second), "claim")
	waitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "claim") == 1 })
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
	took := time.Since(released)
	t.Logf("the deaf waiter claimed the hand-off %v after the release", took.Round(time.Millisecond))
	if r.l.Token() != baton.Token(token) {
		t.Errorf("claimed token %d, handed %d", r.l.Token(), token)
	}
	// The waiter's last statement went out before the release, and it looks
	// again at most RenewEvery (TTL/3) after it; the claim is one statement
	// more, given 500ms here (a loaded machine, -race).
	recheck := w.Locker().Config().RenewEvery
	if bound := recheck + 500*time.Millisecond; took > bound {
		t.Errorf("claimed %v after the release; want within its re-check interval (%v) and one statement: %v", took, recheck, bound)
	}
	var left float64
	queryRow(t, admin, `SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM baton_lock WHERE name = 'claim'`, nil, &left)
	if left < (ttl - ttl/3).Seconds() {
		t.Errorf("claimed lease has %.3fs left; the claim should have extended it", left)
	}
}

// TestHandOff_WaiterGaveUp: a waiter that gives up after the lock was
// handed to it (before hearing of it) gives the lock back and hands it on
// at once, so the next waiter does not wait for the lease to expire.
func TestHandOff_WaiterGaveUp(t *testing.T) {
	const ttl = 30 * time.Second // no re-check or expiry within the test
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
	waitFor(t, 10*time.Second, "w1 queued", func() bool { return queued(t, admin, "gaveup") == 1 })
	got2 := acquireAsync(t, w2, timeout(t, 20*time.Second), "gaveup")
	waitFor(t, 10*time.Second, "w2 queued", func() bool { return queued(t, admin, "gaveup") == 2 })

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
	case <-time.After(ttl / 6):
		t.Fatalf("w2 still waiting %v after w1 gave up a lock handed to it", ttl/6)
	}
}

// TestHandOff_FreedNotClaimed: a lock handed to a waiter and then freed
// (here by an operator's force-release; the waiter leaving frees it the
// same way) is not brought back by a claim for that waiter's ticket, as a
// copy of its statement arriving late would send: the claim keeps no token
// and no start time of the freed lease, and takes the free lock like any
// other acquisition, with a new token.
func TestHandOff_FreedNotClaimed(t *testing.T) {
	const ttl = 30 * time.Second // the deaf waiter does not look again within the test
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
	waitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "freed") == 1 })
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
