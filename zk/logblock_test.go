package zk_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/slogtest"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/zk"
)

// TestLogHandlerBlocks_SuspendedAtOnce: the holder's logger (at debug)
// blocks when its connection is cut. go-zookeeper logs the end of its
// receive loop before it reports the disconnection, through the backend's
// logger: the work context is still cancelled as SUSPENDED, not at the
// local deadline. Before, it waited for the deadline, 5.85s into a 6s TTL.
func TestLogHandlerBlocks_SuspendedAtOnce(t *testing.T) {
	h := slogtest.NewBlocking(slog.LevelDebug, false)
	defer h.Free()
	addr := zkServer.Addr(t)
	proxy := testsvc.NewProxy(t, addr)
	defer proxy.Unblock()
	a := dial(t, []string{proxy.Addr()}, zk.Settings{}, baton.WithTTL(6*time.Second), baton.WithLogger(slog.New(h)))
	ctx := timeout(t, 30*time.Second)
	lease, err := a.Acquire(ctx, uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	h.Arm()
	cutProxy(t, proxy, lease, 15*time.Second)
	if err := lease.Err(); !errors.Is(err, zk.ErrSuspended) {
		t.Errorf("lease lost with %v; want SUSPENDED (zk.ErrSuspended), at the disconnection, not the local deadline", err)
	}
	// The handler gets its records from the log queue's goroutine.
	deadline := time.Now().Add(10 * time.Second)
	for h.Calls() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if h.Calls() == 0 {
		t.Error("the handler took no record after the cut: the test blocked nothing")
	}
	h.Free() // before the Locker's Close, which waits for it
}
