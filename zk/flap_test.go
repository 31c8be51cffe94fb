package zk_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/zk"
)

// TestOutage_CountsFromTheLastDrop: an outage is counted from the first
// look that found the connection down, and again from a look that finds
// it down after a reconnection the looks did not see (more drops); not
// from each look, and not at all while connected. Before, a drop between
// two looks that found the connection down went unseen, and the count ran
// on from the first.
func TestOutage_CountsFromTheLastDrop(t *testing.T) {
	const ttl = 4 * time.Second
	fired := func(c <-chan time.Time) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	synctest.Test(t, func(t *testing.T) {
		var o zk.Outage
		defer o.Stop()
		o.See(false, 1, ttl)
		time.Sleep(3 * time.Second)
		c := o.See(false, 2, ttl) // reconnected and dropped again since
		time.Sleep(2 * time.Second)
		if fired(c) {
			t.Fatal("the outage fired 5s after the first drop, 2s after the second: it did not count from the second")
		}
		c = o.See(false, 2, ttl) // a look in the same outage: the count goes on
		time.Sleep(2*time.Second + time.Millisecond)
		if !fired(c) {
			t.Fatal("the outage did not fire once the connection was down for the TTL since its last drop")
		}

		if c := o.See(true, 2, ttl); c != nil {
			t.Fatal("an outage counts while the connection is up")
		}
		c = o.See(false, 3, ttl)
		time.Sleep(ttl - time.Millisecond)
		if fired(c) {
			t.Fatal("the outage fired before the TTL")
		}
		time.Sleep(2 * time.Millisecond)
		if !fired(c) {
			t.Fatal("the outage did not fire after the TTL")
		}
	})
}

// TestWaiter_Flapping_KeepsItsPlace: a waiter's connection drops and comes
// back again and again, for twice the session timeout in all, but never
// down for long: each outage is about two seconds, the session timeout
// four, and the session lives on. The waiter does not look while the
// connection is up (it is held before each read, as a busy waiter would
// be), so it sees only outages, one after another. It must go on waiting
// and get the lock on the same session. Before, it counted the outages as
// one from the first, and stopped with a lost lease ("the connection
// stayed down for the session timeout").
//
// Each flap: the proxy stops forwarding and cuts the connection; the
// waiter, let go, sends its read, which go-zookeeper queues, and looks:
// down. go-zookeeper, with a single server, fails the requests not yet
// sent each time it starts over its list, before a second's pause and a
// dial: the read fails when the first reconnection's handshake, held by
// the proxy, is cut. The waiter then waits for the connection, and the
// proxy lets the next one through.
func TestWaiter_Flapping_KeepsItsPlace(t *testing.T) {
	const ttl = disconnectTTL
	addr := zkServer.Addr(t)
	ctx := timeout(t, 2*time.Minute)
	h := dial(t, []string{addr}, zk.Settings{})
	proxy := testsvc.NewProxy(t, addr)
	defer proxy.Unblock()
	w := dial(t, []string{proxy.Addr()}, zk.Settings{}, baton.WithTTL(ttl))
	watching := waitingOn(w)
	name := uniqueName(t)

	var armed atomic.Bool
	paused, resume, stop := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(stop)
	zk.OnWaiterRead(w.Locker(), func() {
		if !armed.Load() {
			return
		}
		select {
		case paused <- struct{}{}:
		case <-stop:
			return
		}
		select {
		case <-resume:
		case <-stop:
		}
	})
	awaitPaused := func(what string, got <-chan acquired) {
		t.Helper()
		select {
		case <-paused:
		case o := <-got:
			if o.err == nil {
				_ = o.l.Release(ctx)
			}
			t.Fatalf("%s: the waiter stopped waiting: %v", what, o.err)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the waiter did not come to its next read within 20s", what)
		}
	}
	awaitConn := func(what string, got <-chan acquired, ok func(zk.ConnStatus) bool) {
		t.Helper()
		limit := time.After(20 * time.Second)
		for {
			st := zk.StatusOf(w.Locker())
			if ok(st) {
				return
			}
			select {
			case <-st.Changed:
			case o := <-got:
				if o.err == nil {
					_ = o.l.Release(ctx)
				}
				t.Fatalf("waiting for %s: the waiter stopped waiting: %v", what, o.err)
			case <-limit:
				t.Fatalf("no %s within 20s: connection %+v", what, st)
			}
		}
	}

	// cutHandshake cuts the connection go-zookeeper dialed, its handshake
	// held: go-zookeeper may have it before the proxy has accepted it,
	// and a cut misses it then.
	cutHandshake := func() {
		t.Helper()
		limit := time.After(20 * time.Second)
		for {
			proxy.Cut()
			st := zk.StatusOf(w.Locker())
			if st.State != zkgo.StateConnected {
				return
			}
			select {
			case <-st.Changed:
			case <-time.After(10 * time.Millisecond): // the proxy had not accepted it yet
			case <-limit:
				t.Fatal("the held handshake was not cut within 20s")
			}
		}
	}

	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, w, name)
	awaitWatching(t, watching, got, "behind the holder")
	sid := zk.ConnOf(w.Locker()).SessionID()
	armed.Store(true)
	proxy.Cut() // once reconnected, the waiter lists again: it is held before
	awaitPaused("the listing after a reconnection", got)

	first := time.Now()
	for flap := 1; time.Since(first) < 2*ttl; flap++ {
		drops := zk.StatusOf(w.Locker()).Drops
		proxy.Block()
		proxy.Cut()
		awaitConn("the drop", got, func(st zk.ConnStatus) bool { return st.Drops > drops && !st.Connected })
		resume <- struct{}{}
		awaitConn("a handshake", got, func(st zk.ConnStatus) bool { return st.State == zkgo.StateConnected })
		cutHandshake()
		proxy.Unblock()
		awaitPaused(fmt.Sprintf("flap %d", flap), got)
		t.Logf("flap %d: %v since the first", flap, time.Since(first).Round(time.Millisecond))
	}
	if id := zk.ConnOf(w.Locker()).SessionID(); id != sid {
		t.Fatalf("setup: the waiter's session changed from 0x%x to 0x%x; the flaps must not cost it", sid, id)
	}
	stillWaiting(t, got, "through the flaps")
	armed.Store(false)
	resume <- struct{}{}
	awaitWatching(t, watching, got, "after the flaps")
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitHeldAfter(t, got, 20*time.Second, w, sid, lh)
}
