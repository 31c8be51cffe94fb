package batontest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// HeadLeaves is the case of a first waiter that gives up while a holder
// that will not release (crashed, or frozen) still holds name: with the
// backends whose waiters behind the first sleep up to RenewEvery (Redis,
// Redlock, PostgreSQL), the one now first must be told.
//
// xAcquire waits for name, then yAcquire behind it; queued(n) returns once
// n waiters are in line. end then makes the holder's lease end without a
// release, if the test has not set that up already, and returns when the
// lease ends at the latest. x gives up. y, asleep for renewEvery as waiters
// that are not first are, must take the lock right after the lease ends
// (within renewEvery/2 of it), not at its next timed look.
func HeadLeaves[L Held](t *testing.T, xAcquire, yAcquire func(context.Context, string) (L, error), name string, queued func(n int), end func() time.Time, renewEvery time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	xctx, xcancel := context.WithCancel(ctx)
	defer xcancel()
	xdone := make(chan error, 1)
	go func() { _, err := xAcquire(xctx, name); xdone <- err }()
	queued(1)
	ydone := AcquireLater(ctx, yAcquire, name)
	queued(2)
	ended := end()
	xcancel()
	if err := <-xdone; !errors.Is(err, context.Canceled) {
		t.Fatalf("x: %v, want context.Canceled", err)
	}
	g := <-ydone
	if g.Err != nil || g.ReleaseErr != nil {
		t.Fatalf("y: acquire %v, release %v", g.Err, g.ReleaseErr)
	}
	if late := g.At.Sub(ended); late > renewEvery/2 {
		t.Fatalf("y took the lock %v after the holder's lease ended; want it right after, not at its next timed look (RenewEvery %v)", late, renewEvery)
	}
}
