package baton_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// blockingHandler is a slog.Handler whose Handle, once armed, says which
// record it got and blocks until freed: a handler writing to a pipe nobody
// reads.
type blockingHandler struct {
	level   slog.Level
	armed   atomic.Bool
	entered chan string
	release chan struct{}
	once    sync.Once
}

func newBlockingHandler(l slog.Level) *blockingHandler {
	return &blockingHandler{level: l, entered: make(chan string, 100), release: make(chan struct{})}
}
func (h *blockingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *blockingHandler) Handle(_ context.Context, r slog.Record) error {
	if !h.armed.Load() {
		return nil
	}
	select {
	case h.entered <- r.Message:
	default:
	}
	<-h.release
	return nil
}
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler      { return h }
func (h *blockingHandler) free()                              { h.once.Do(func() { close(h.release) }) }

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
	h := newBlockingHandler(slog.LevelInfo)
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
	h.armed.Store(true)
	closed := make(chan struct{})
	go func() { _ = l.Close(); close(closed) }()
	within(t, a.Done(), "lease a's work context cancelled by Close")
	within(t, b.Done(), "lease b's work context cancelled by Close")
	h.free()
	within(t, closed, "Close returned once the handler took records again")
}

// TestLogHandlerBlocks_Release: Release of a lease whose local deadline
// passed gives the lock back even while the handler blocks on the loss's
// record. Before, the give-back waited behind it.
func TestLogHandlerBlocks_Release(t *testing.T) {
	h := newBlockingHandler(slog.LevelInfo)
	defer h.free()
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
	h.armed.Store(true)
	done := make(chan struct{})
	go func() { _ = lease.Release(context.Background()); close(done) }()
	within(t, released, "the hold given back by Release")
	within(t, done, "Release returned")
	h.free() // before Close, which waits for the handler to take the records
}
