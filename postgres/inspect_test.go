package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/postgres"
)

func TestInspect_ForceRelease(t *testing.T) {
	const ttl = 2 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("holder-a"))
	w := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("waiter-w"))
	insp := a.Locker().Backend().(baton.Inspector)
	fr := a.Locker().Backend().(baton.ForceReleaser)

	la, err := a.Acquire(timeout(t, 10*time.Second), "report")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *baton.FencedLease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := w.Acquire(timeout(t, 30*time.Second), "report")
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	batontest.WaitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "report") == 1 })

	infos, err := insp.Inspect(timeout(t, 10*time.Second), "report", "free-one")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Name != "free-one" || infos[1].Name != "report" {
		t.Fatalf("Inspect(report, free-one) = %+v", infos)
	}
	if f := infos[0]; f.Holder != "" || f.Token != 0 || f.Waiters != 0 {
		t.Errorf("free lock shown as %+v", f)
	}
	r := infos[1]
	if r.Holder != "holder-a" || r.Token != la.Token() || r.Key != la.Key() || r.Waiters != 1 {
		t.Errorf("held lock shown as %+v; want holder-a, token %d, key %s, 1 waiter", r, la.Token(), la.Key())
	}
	if r.TTLLeft <= 0 || r.TTLLeft > ttl {
		t.Errorf("TTLLeft %v, want within (0, %v]", r.TTLLeft, ttl)
	}
	if d := time.Since(r.Since); d < -5*time.Second || d > 5*time.Second {
		t.Errorf("Since %v is %v from now", r.Since, d)
	}
	all, err := insp.Inspect(timeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Name != "report" {
		t.Errorf("Inspect() = %+v, want only the held lock", all)
	}

	info, err := fr.ForceRelease(timeout(t, 10*time.Second), "report")
	if err != nil {
		t.Fatal(err)
	}
	if info.Holder != "holder-a" || info.Token != la.Token() || info.Waiters != 1 {
		t.Errorf("ForceRelease returned %+v", info)
	}
	var lw *baton.FencedLease
	select {
	case lw = <-got:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(ttl / 2):
		t.Fatal("the waiter was not woken by the forced release")
	}
	defer lw.Release(context.Background())
	select {
	case <-la.Done():
	case <-time.After(2 * ttl):
		t.Fatal("the forced-out holder did not learn it lost the lease")
	}
	if !errors.Is(la.Err(), baton.ErrLeaseLost) || !strings.Contains(la.Err().Error(), "refused") {
		t.Errorf("forced-out holder's Err = %v, want a refused renewal", la.Err())
	}
	if lw.Token() <= la.Token() {
		t.Errorf("token after a forced release %d <= %d", lw.Token(), la.Token())
	}
	if _, err := fr.ForceRelease(timeout(t, 10*time.Second), "nobody"); !errors.Is(err, baton.ErrNotAcquired) {
		t.Errorf("ForceRelease of a free lock = %v, want ErrNotAcquired", err)
	}
	if _, err := insp.Inspect(context.Background(), "bad/name"); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("Inspect(bad/name) = %v, want ErrInvalidOption", err)
	}
}

// TestForceRelease_OnlyTheTokenRead: a force-release expires the row only
// while it holds the token it read, so one that runs late, after the lock
// changed hands, ends no later holder's lease.
func TestForceRelease_OnlyTheTokenRead(t *testing.T) {
	dsn := pg.Database(t)
	a := dial(t, dsn, baton.WithHolder("a"))
	b := dial(t, dsn, baton.WithHolder("b"))
	ctx := timeout(t, 30*time.Second)
	la, err := a.Acquire(ctx, "forced")
	if err != nil {
		t.Fatal(err)
	}
	read := la.Token() // what a force read before the lock changed hands
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, "forced")
	if err != nil {
		t.Fatal(err)
	}
	_, err = postgres.ForceReleaseToken(ctx, b.Locker(), "forced", read)
	if !errors.Is(err, baton.ErrChangedHands) {
		t.Fatalf("force with a's token while b holds: %v; want changed hands, nothing released", err)
	}
	infos, err := b.Locker().Backend().(baton.Inspector).Inspect(ctx, "forced")
	if err != nil {
		t.Fatal(err)
	}
	if infos[0].Holder != "b" || infos[0].Token != lb.Token() || lb.Err() != nil {
		t.Fatalf("after the stale force the lock shows %+v (b's lease err %v); want b's, untouched", infos[0], lb.Err())
	}
	info, err := postgres.ForceReleaseToken(ctx, b.Locker(), "forced", lb.Token())
	if err != nil || info.Holder != "b" {
		t.Fatalf("force with b's token: %+v, %v; want b's released", info, err)
	}
}

// TestRelease_ForcedIsALoss: a Release that finds the row no longer the
// lease's (freed by force here; expired or taken alike) before any
// renewal said so reports the loss: Err is a *LostError, not ErrReleased.
// A clean release is no loss.
func TestRelease_ForcedIsALoss(t *testing.T) {
	dsn := pg.Database(t)
	a := dial(t, dsn, baton.WithHolder("a"), baton.WithTTL(30*time.Second)) // no renewal within the test
	op := dial(t, dsn, baton.WithHolder("op"))
	ctx := timeout(t, 30*time.Second)
	la, err := a.Acquire(ctx, "forced")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.ForceReleaseToken(ctx, op.Locker(), "forced", la.Token()); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("Release of a lease freed by force: %v; want nil (the loss is Err's)", err)
	}
	var lost *baton.LostError
	if err := la.Err(); !errors.As(err, &lost) {
		t.Fatalf("Err after a release that found the row freed: %v; want a *LostError", err)
	}
	clean, err := a.Acquire(ctx, "forced")
	if err != nil {
		t.Fatal(err)
	}
	if err := clean.Release(ctx); err != nil || !errors.Is(clean.Err(), baton.ErrReleased) {
		t.Fatalf("clean release: %v, Err %v; want nil, ErrReleased", err, clean.Err())
	}
}
