package batontest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// CloseSilent takes four locks with l, makes the lock service silent with
// silence (the caller undoes it when t ends), and checks that Close ends
// the holds all at once: it may take about one release timeout (l's), not
// one per hold. Give l a short release timeout (1s): the check allows
// three.
func CloseSilent(t testing.TB, l *baton.Locker, silence func()) {
	t.Helper()
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := l.TryAcquire(ctx, fmt.Sprintf("close-%d", i))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	silence()
	rt := l.Config().ReleaseTimeout
	start := time.Now()
	_ = l.Close()
	if took := time.Since(start); took >= 3*rt {
		t.Errorf("Close of 4 holds on a silent service took %v; want about one release timeout (%v), not one per hold", took.Round(10*time.Millisecond), rt)
	}
}

// ReleaseSilent takes a lock with l, makes the lock service silent with
// silence (the caller undoes it when t ends), and checks that Release
// gives up as unavailable, saying it had no answer within l's release
// timeout: the bound it waited, not the request timeout. Give l a release
// timeout that differs from its request timeout.
func ReleaseSilent(t testing.TB, l *baton.Locker, silence func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	silence()
	want := fmt.Sprintf("no answer within %v", l.Config().ReleaseTimeout)
	if err := lease.Release(context.Background()); !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Release through a silent service: %v; want ErrUnavailable saying %q", err, want)
	}
}
