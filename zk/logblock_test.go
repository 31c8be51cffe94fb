package zk_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/zk"
)

// blockingHandler is a slog.Handler whose Handle, once armed, blocks until
// freed: a handler writing to a pipe nobody reads.
type blockingHandler struct {
	armed   atomic.Bool
	calls   atomic.Int32
	release chan struct{}
	once    sync.Once
}

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) Handle(context.Context, slog.Record) error {
	if h.armed.Load() {
		h.calls.Add(1)
		<-h.release
	}
	return nil
}
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler      { return h }
func (h *blockingHandler) free()                              { h.once.Do(func() { close(h.release) }) }

// TestLogHandlerBlocks_SuspendedAtOnce: the holder's logger (at debug)
// blocks when its connection is cut. go-zookeeper logs the end of its
// receive loop before it reports the disconnection, through the backend's
// logger: the work context is still cancelled as SUSPENDED, not at the
// local deadline. Before, it waited for the deadline, 5.85s into a 6s TTL.
func TestLogHandlerBlocks_SuspendedAtOnce(t *testing.T) {
	h := &blockingHandler{release: make(chan struct{})}
	defer h.free()
	addr := zkServer.Addr(t)
	proxy := testsvc.NewProxy(t, addr)
	defer proxy.Unblock()
	a := dial(t, []string{proxy.Addr()}, zk.Settings{}, baton.WithTTL(6*time.Second), baton.WithLogger(slog.New(h)))
	ctx := timeout(t, 30*time.Second)
	lease, err := a.Acquire(ctx, uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	proxy.Block()
	proxy.Cut()
	select {
	case <-lease.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the lease not lost 15s after its connection was cut")
	}
	if err := lease.Err(); !errors.Is(err, zk.ErrSuspended) {
		t.Errorf("lease lost with %v; want SUSPENDED (zk.ErrSuspended), at the disconnection, not the local deadline", err)
	}
	// The handler gets its records from the log queue's goroutine.
	deadline := time.Now().Add(10 * time.Second)
	for h.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if h.calls.Load() == 0 {
		t.Error("the handler took no record after the cut: the test blocked nothing")
	}
	h.free() // before the Locker's Close, which waits for it
}
