package baton_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/slogtest"
)

// namedBackend grants every name at once, each a hold of its own.
type namedBackend struct{}

func (namedBackend) Acquire(context.Context, baton.Request) (baton.Hold, error) {
	return newFakeHold(func(h *fakeHold) error { h.end(baton.ErrReleased); return nil }), nil
}
func (namedBackend) Close() error { return nil }

// within fails t unless ch is closed within 10s: what the blocked handler
// must not hold up.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Errorf("%s: not within 10s, behind a log handler that blocks", what)
	}
}

// TestLogHandlerBlocks_Close: the handler blocks on the first lease's
// "lease lost" record; Close still cancels both leases' work contexts.
// Before, the second stayed live, and the backend was never closed.
func TestLogHandlerBlocks_Close(t *testing.T) {
	h := slogtest.NewBlocking(slog.LevelInfo, false)
	cfg, err := baton.NewConfig(baton.WithLogger(slog.New(h)))
	if err != nil {
		t.Fatal(err)
	}
	l := baton.NewLocker(namedBackend{}, cfg)
	a, err := l.Acquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	h.Arm()
	closed := make(chan struct{})
	go func() { _ = l.Close(); close(closed) }()
	within(t, a.Done(), "lease a's work context cancelled by Close")
	within(t, b.Done(), "lease b's work context cancelled by Close")
	h.Free()
	within(t, closed, "Close returned once the handler took records again")
}

// TestLogHandlerBlocks_Release: Release of a lease whose local deadline
// passed gives the lock back even while the handler blocks on the loss's
// record. Before, the give-back waited behind it.
func TestLogHandlerBlocks_Release(t *testing.T) {
	h := slogtest.NewBlocking(slog.LevelInfo, false)
	defer h.Free()
	cfg, err := baton.NewConfig(baton.WithLogger(slog.New(h)))
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	fh := newFakeHold(func(h *fakeHold) error { close(released); h.end(baton.ErrReleased); return nil })
	var past atomic.Bool
	fh.deadlines = func(int) time.Time {
		if past.Load() {
			return time.Now().Add(-time.Millisecond)
		}
		return time.Now().Add(time.Hour)
	}
	l := baton.NewLocker(&fakeBackend{hold: fh}, cfg)
	defer l.Close()
	lease, err := l.Acquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	past.Store(true)
	h.Arm()
	done := make(chan struct{})
	go func() { _ = lease.Release(context.Background()); close(done) }()
	within(t, released, "the hold given back by Release")
	within(t, done, "Release returned")
	h.Free() // before Close, which waits for the handler to take the records
}
