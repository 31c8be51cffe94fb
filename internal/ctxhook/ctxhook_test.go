package ctxhook_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/ctxhook"
)

// TestAfterFunc_StopWaitsForStarted: a stop called while f runs returns
// only after f has.
func TestAfterFunc_StopWaitsForStarted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	stop := ctxhook.AfterFunc(ctx, func() {
		close(started)
		<-release
		returned.Store(true)
	})
	cancel()
	<-started
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// A stop that does not wait returns at once; one that does is still
	// blocked when the wait ends (it cannot fail a right one).
	select {
	case <-stopped:
		t.Fatal("stop returned while f was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-stopped
	if !returned.Load() {
		t.Fatal("stop returned before f did")
	}
}

// TestAfterFunc_StopBeforeEnd: a stop before ctx ends keeps f from being
// called.
func TestAfterFunc_StopBeforeEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var called atomic.Bool
	stop := ctxhook.AfterFunc(ctx, func() { called.Store(true) })
	stop()
	cancel()
	stop()                            // again: returns at once
	time.Sleep(50 * time.Millisecond) // a callback wrongly started has run by then
	if called.Load() {
		t.Fatal("f called after stop")
	}
}
