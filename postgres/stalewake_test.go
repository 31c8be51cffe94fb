package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
)

// bothHold fails t when the two leases are both live at once, naming the
// row's holder.
func bothHold(t *testing.T, name string, a, b *baton.FencedLease, rowToken int64) {
	t.Helper()
	if a.Err() == nil && b.Err() == nil {
		t.Fatalf("two holders of %q at once: %s (token %d) and %s (token %d); the row holds token %d",
			name, a.Holder(), a.Token(), b.Holder(), b.Token(), rowToken)
	}
}

// TestStaleWake_TooSlowClaimGivenBack_NotAHold: a waiter's re-check is
// held up in the network; meanwhile the holder releases and hands the lock
// to it, and the hand-off's NOTIFY waits in its wake channel. The re-check
// lands after TTL - drift and claims the hand-off: errTooSlow, so the
// lease is given back (freeDetached), which hands it to the next waiter,
// and Acquire goes on. Its next statement queues it; the NOTIFY in its
// wake channel is for the lease it has just given back, and must not be
// taken for a hold. Before the NOTIFY named the attempt it came after, it
// was: two holders.
//
// The hand-off's lease lasts w's TTL (10s) from the release, so the next
// waiter, v, holding the lock within a second of the claim's landing is
// the give-back, not that lease's expiry; w still waiting, queued again,
// is the too-slow path, not a failed Acquire leaving the queue.
func TestStaleWake_TooSlowClaimGivenBack_NotAHold(t *testing.T) {
	const name = "stale-wake"
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("h"))
	// TTL 10s, drift 8s: a grant answered 2s after its statement was sent
	// is too slow; the hand-off's lease lasts 10s from the release.
	w := dial(t, pdsn, baton.WithTTL(10*time.Second), baton.WithDrift(8*time.Second), baton.WithRenewEvery(time.Second), baton.WithHolder("late-w"))
	v := dial(t, dsn, baton.WithTTL(3*time.Second), baton.WithHolder("v"))
	ctx := timeout(t, 60*time.Second)

	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	gw := acquireAsync(t, w, ctx, name)
	batontest.WaitFor(t, 10*time.Second, "w queued", func() bool { return queued(t, admin, name) == 1 })
	gv := acquireAsync(t, v, ctx, name)
	batontest.WaitFor(t, 10*time.Second, "v queued", func() bool { return queued(t, admin, name) == 2 })

	// w's next re-check (within RenewEvery) is held up in the network.
	held := p.HoldFirst([]byte("late-w"))
	select {
	case <-held.Caught():
	case <-time.After(5 * time.Second):
		t.Fatal("w sent no re-check")
	}
	caught := time.Now() // after w sent it
	// Hands the lock to w; its NOTIFY arrives at once.
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	holder, _, handed := handedTo(t, admin, name)
	if holder != "late-w" {
		t.Fatalf("handed to %q, want late-w", holder)
	}
	// The claim must land past TTL - drift (2s) after w sent it: it is
	// delivered 2.2s after it was caught, which was after it was sent.
	<-time.After(time.Until(caught.Add(2200 * time.Millisecond)))
	landed := time.Now()
	held.Release()

	select {
	case <-gv.done:
	case <-time.After(5 * time.Second):
		t.Fatal("v was not handed the lock w gave back (w's lease would expire 8s after the claim)")
	}
	if gv.err != nil {
		t.Fatalf("v: %v", gv.err)
	}
	if took := gv.at.Sub(landed); took > time.Second {
		t.Fatalf("v held the lock %v after w's claim landed; want within a second, by w giving it back", took.Round(time.Millisecond))
	}
	if gv.l.Token() <= baton.Token(handed) {
		t.Fatalf("v holds token %d; want one above the %d handed to w", gv.l.Token(), handed)
	}
	select {
	case <-gw.done:
		_, _, tok := handedTo(t, admin, name)
		if gw.err != nil {
			t.Fatalf("w's Acquire failed (%v) instead of giving the too-slow grant back and waiting on", gw.err)
		}
		t.Logf("w holds token %d, v holds token %d, the row holds %d", gw.l.Token(), gv.l.Token(), tok)
		bothHold(t, name, gw.l, gv.l, tok)
		t.Fatal("w's Acquire returned while v holds the lock; want it to wait, queued again")
	default:
	}
	// w waits, queued again behind v's hold, and gets the lock when v
	// releases it.
	batontest.WaitFor(t, 10*time.Second, "w queued again", func() bool { return queued(t, admin, name) == 1 })
	if err := gv.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gw.done:
	case <-ctx.Done():
		t.Fatal("w was not handed the lock v released")
	}
	if gw.err != nil {
		t.Fatalf("w, after v released: %v", gw.err)
	}
	if gw.l.Token() <= gv.l.Token() {
		t.Errorf("w holds token %d after v's %d", gw.l.Token(), gv.l.Token())
	}
}

// TestStaleWake_ForcedHandOff_NotAHold: the lock is handed to a
// waiter while its re-check is on the way; the NOTIFY waits in its wake
// channel. Before the re-check lands, an operator force-releases the
// handed lease and another client takes the lock. The re-check finds it
// held and queues the waiter again; the stale NOTIFY must not be taken
// for a hold (before, it was: two holders).
func TestStaleWake_ForcedHandOff_NotAHold(t *testing.T) {
	const name = "forced-wake"
	const ttl = 30 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	p, pdsn := proxied(t, dsn)
	h := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("h"))
	// RenewEvery 1s: w re-checks every second.
	w := dial(t, pdsn, baton.WithTTL(ttl), baton.WithRenewEvery(time.Second), baton.WithHolder("late-w"))
	x := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("x"))
	ctx := timeout(t, 60*time.Second)

	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	gw := acquireAsync(t, w, ctx, name)
	batontest.WaitFor(t, 10*time.Second, "w queued", func() bool { return queued(t, admin, name) == 1 })
	held := p.HoldFirst([]byte("late-w"))
	select {
	case <-held.Caught():
	case <-time.After(5 * time.Second):
		t.Fatal("w sent no re-check")
	}
	if err := lh.Release(ctx); err != nil { // hands the lock to w
		t.Fatal(err)
	}
	_, _, handed := handedTo(t, admin, name)
	if _, err := h.Locker().Backend().(baton.ForceReleaser).ForceRelease(ctx, name); err != nil {
		t.Fatal(err)
	}
	lx, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	held.Release() // w's re-check lands: x holds the lock, w queues again
	select {
	case <-gw.done:
	case <-time.After(3 * time.Second):
		// w still waits, as it should: x holds the lock, and hands it on.
		if err := lx.Release(ctx); err != nil {
			t.Fatal(err)
		}
		<-gw.done
		if gw.err != nil {
			t.Fatalf("w, after x released: %v", gw.err)
		}
		_ = gw.l.Release(ctx)
		return
	}
	if gw.err != nil {
		t.Fatalf("w: %v", gw.err)
	}
	_, _, tok := handedTo(t, admin, name)
	t.Logf("handed %d to w, then forced free; x took %d; w's Acquire returned token %d; row holds %d", handed, lx.Token(), gw.l.Token(), tok)
	bothHold(t, name, gw.l, lx, tok)
	if errors.Is(gw.l.Err(), baton.ErrLeaseLost) {
		t.Log("w's lease already lost")
	}
}
