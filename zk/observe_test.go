package zk_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/zk"
)

// TestObserve_Handoff: a release with a waiter queued is one change of
// leader, with no empty term between; the last release shows as no leader.
func TestObserve_Handoff(t *testing.T) {
	servers := []string{zkServer.Addr(t)}
	a := dial(t, servers, zk.Settings{}, baton.WithHolder("a"))
	b := dial(t, servers, zk.Settings{}, baton.WithHolder("b"))
	obs := dial(t, servers, zk.Settings{})
	name := "observe-handoff"
	terms, err := obs.Observe(timeout(t, 60*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	next := func() string { t.Helper(); return batontest.NextLeader(t, terms, 10*time.Second) }
	if got := next(); got != "-" {
		t.Fatalf("first term %q, want no leader", got)
	}
	la, err := a.Acquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "a" {
		t.Fatalf("term %q, want a", got)
	}
	got := make(chan *baton.FencedLease, 1)
	go func() {
		lb, err := b.Acquire(timeout(t, 20*time.Second), name)
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	admin := adminConn(t, servers...)
	waitChildren(t, admin, path.Dir(la.Key()), 2) // b is queued

	_ = la.Release(context.Background())
	if got := next(); got != "b" {
		t.Fatalf("after a handoff the term is %q, want b directly", got)
	}
	lb := <-got
	_ = lb.Release(context.Background())
	if got := next(); got != "-" {
		t.Fatalf("after the last release the term is %q, want no leader", got)
	}
}

// TestObserve_NoHerd: candidates that join and leave behind the leader
// send an observer no watch event (it watches the leader's node, not the
// election node's children); the leader's release sends it one, and the
// next in line is reported.
func TestObserve_NoHerd(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	dir := lockDir(name)
	admin := adminConn(t, addr)
	ctx := timeout(t, time.Minute)
	a := dial(t, []string{addr}, zk.Settings{}, baton.WithHolder("a"))
	var seen eventCounter // the observer's watch events, on the wire
	obsConn := connect(t, addr, longTTL, seen.dial)
	obs := lockerOn(t, obsConn, longTTL)
	la, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	terms, err := obs.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	next := func() string { t.Helper(); return batontest.NextLeader(t, terms, 10*time.Second) }
	if got := next(); got != "a" {
		t.Fatalf("first term %q, want a", got)
	}
	const waiters = 4
	outcomes := make([]<-chan acquired, waiters)
	cancels := make([]context.CancelFunc, waiters)
	for i := range waiters {
		w := dial(t, []string{addr}, zk.Settings{}, baton.WithHolder(fmt.Sprintf("w%d", i)))
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cancels[i] = cancel
		outcomes[i] = acquireAsync(wctx, w, name)
		waitChildren(t, admin, dir, i+2) // in line in a known order
	}
	for _, i := range []int{1, 3} { // two leave
		cancels[i]()
		<-outcomes[i]
	}
	if kids := children(t, admin, dir); len(kids) != 1+waiters-2 { // a waiter that gave up deleted its node first
		t.Fatalf("candidates %v; want the leader and the %d waiters left", kids, waiters-2)
	}
	// An event for the observer comes on its connection ahead of the
	// answer to a sync sent after the candidates left.
	if _, err := obsConn.Sync(dir); err != nil {
		t.Fatal(err)
	}
	if n := seen.n.Load(); n != 0 {
		t.Errorf("the observer got %d watch events while candidates joined and left behind the leader; want none", n)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "w0" {
		t.Fatalf("after a's release the term is %q, want w0", got)
	}
	if n := seen.n.Load(); n != 1 {
		t.Errorf("the observer got %d watch events for one change of leader; want 1", n)
	}
	o := <-outcomes[0]
	if o.err != nil {
		t.Fatal(o.err)
	}
	_ = o.l.Release(ctx)
}

// TestObserve_SlowReader: a reader that takes no term while leaders come
// and go loses none of them: the observation follows meanwhile, and the
// reader finds every term, in order, when it comes back. The observation
// used to wait for the reader with each term, and to miss every leader
// that came and went meanwhile.
func TestObserve_SlowReader(t *testing.T) {
	servers := []string{zkServer.Addr(t)}
	a := dial(t, servers, zk.Settings{}, baton.WithHolder("a"))
	obs := dial(t, servers, zk.Settings{})
	name := uniqueName(t)
	terms, nextQueued := observeQueued(t, obs, name)
	waitQueued := func(leader bool) string {
		t.Helper()
		tm := nextQueued()
		if tm.NoLeader() == leader {
			t.Fatalf("queued term %+v; want leader %v", tm, leader)
		}
		return tm.Key
	}
	want := []string{waitQueued(false)} // no leader yet
	for range 4 {                       // the reader takes nothing meanwhile
		l, err := a.Acquire(timeout(t, 10*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, waitQueued(true))
		if err := l.Release(timeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		want = append(want, waitQueued(false))
	}
	for i, w := range want {
		select {
		case tm := <-terms:
			if tm.Key != w {
				t.Fatalf("term %d: key %q, want %q", i, tm.Key, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("term %d never reached the reader", i)
		}
	}
}

// TestObserve_SlowReader_QueueCapped: the terms an observation keeps for
// a reader that is away are capped (1,024; 4 here), the oldest going
// first, and the observation goes on: the reader, back, gets the term
// the Locker's relay took before it left (if the relay took one), then
// the last four, then the next leader.
func TestObserve_SlowReader_QueueCapped(t *testing.T) {
	const capped = 4
	servers := []string{zkServer.Addr(t)}
	a := dial(t, servers, zk.Settings{}, baton.WithHolder("a"))
	obs := dial(t, servers, zk.Settings{})
	zk.SetObserverQueue(obs.Locker(), capped)
	name := uniqueName(t)
	terms, nextQueued := observeQueued(t, obs, name)
	want := []string{nextQueued().Key} // no leader yet
	cycle := func() {
		t.Helper()
		l, err := a.Acquire(timeout(t, 10*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, nextQueued().Key)
		if err := l.Release(timeout(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		want = append(want, nextQueued().Key)
	}
	for range 5 { // ten terms more, while the reader takes none
		cycle()
	}
	var got []string
	read := func() string {
		t.Helper()
		select {
		case tm := <-terms:
			got = append(got, tm.Key)
			return tm.Key
		case <-time.After(10 * time.Second):
			t.Fatalf("the reader got %q, then nothing for 10s", got)
			return ""
		}
	}
	// The first term read is the relay's, or already the first kept.
	if read() == want[0] {
		read()
	}
	for range capped - 1 {
		read()
	}
	kept := want[len(want)-capped:]
	if !slices.Equal(got[len(got)-capped:], kept) {
		t.Fatalf("the reader got %q; want perhaps %q, then the last %d terms %q", got, want[0], capped, kept)
	}
	// Nothing else was kept: the next term is the next leader's.
	cycle()
	if k := read(); k != want[len(want)-2] {
		t.Fatalf("after the kept terms the reader got %q; want the next leader's, %q", k, want[len(want)-2])
	}
}

// TestObserve_SlowReader_EndsWithQueue: an observation cut off from
// ZooKeeper ends once its connection was down for the session timeout
// (the watch went with the session; go-zookeeper would keep it open and
// silent), and still hands a slow reader the terms it queued before: the
// last term the reader gets is the last one known.
func TestObserve_SlowReader_EndsWithQueue(t *testing.T) {
	addr := zkServer.Addr(t)
	proxy := testsvc.NewProxy(t, addr)
	defer proxy.Unblock()
	a := dial(t, []string{addr}, zk.Settings{}, baton.WithHolder("a"))
	// The observation ends with its session: a short one.
	obs := dial(t, []string{proxy.Addr()}, zk.Settings{}, baton.WithTTL(suiteTTL), baton.WithRequestTimeout(time.Second))
	// Closed while still cut off: go-zookeeper v1.0.4 races with itself
	// (lastZxid, go-zookeeper/zk#35) when it reconnects with watches set.
	defer obs.Close()
	name := uniqueName(t)
	terms, nextQueued := observeQueued(t, obs, name)
	var want []string
	next := func() { t.Helper(); want = append(want, nextQueued().Key) }
	next() // no leader
	l, err := a.Acquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	next() // a
	if err := l.Release(timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	next() // no leader again
	proxy.Block()
	proxy.Cut() // the observer's connection is gone for good
	var got []string
	end := time.After(suiteTTL + 10*time.Second)
	for open := true; open; {
		select {
		case tm, ok := <-terms: // closed once the observation gave up
			if ok {
				got = append(got, tm.Key)
			}
			open = ok
		case <-end:
			t.Fatalf("the observation cut off from ZooKeeper did not end within the session timeout (got %q)", got)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the reader got %q before the channel closed; want every term queued, %q", got, want)
	}
}

// observeQueued observes name on obs, and returns the terms and a func that
// waits for the next term the observation queues for its reader (failing
// t after 10s), whether or not the reader has taken it.
func observeQueued(t *testing.T, obs *baton.FencedLocker, name string) (<-chan baton.Term, func() baton.Term) {
	t.Helper()
	queued := make(chan baton.Term, 64)
	zk.OnObserved(obs.Locker(), func(tm baton.Term) { queued <- tm })
	terms, err := obs.Observe(timeout(t, 60*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	return terms, func() baton.Term {
		t.Helper()
		select {
		case tm := <-queued:
			return tm
		case <-time.After(10 * time.Second):
			t.Fatal("the observation queued no term within 10s while its reader was away")
			return baton.Term{}
		}
	}
}

// TestObserve_ReadsAgainOnReconnect: a leader that came while the observer
// was cut off is seen once it reconnects, also when the server did not set
// its watch again with that change's event. go-zookeeper sets its watches
// again with the last zxid it saw, which it reads while the new
// connection's first answers may be raising it (go-zookeeper/zk#35), and a
// zxid past the change's hides the event. Here the proxy drops that
// request (setWatches) from the new connection, so that only a read made
// after the reconnection can see the leader; the observer waited on for
// the next change.
func TestObserve_ReadsAgainOnReconnect(t *testing.T) {
	addr := zkServer.Addr(t)
	proxy := testsvc.NewProxy(t, addr)
	defer proxy.Unblock()
	a := dial(t, []string{addr}, zk.Settings{}, baton.WithHolder("a"))
	obs := dial(t, []string{proxy.Addr()}, zk.Settings{})
	name := uniqueName(t)
	ctx := timeout(t, 60*time.Second)
	terms, err := obs.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := batontest.NextLeader(t, terms, 10*time.Second); got != "-" {
		t.Fatalf("first term: leader %q, want none", got)
	}

	var dropped atomic.Int64
	proxy.FilterUp(func() func([]byte) []byte { return dropSetWatches(&dropped) })
	proxy.Block()
	proxy.Cut() // the observer reconnects once unblocked, in its session
	l, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	proxy.Unblock()
	select {
	case tm, ok := <-terms:
		if !ok || tm.Leader != "a" {
			t.Fatalf("after the reconnection: term %+v (open %v); want a leading", tm, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the leader that came while the observer was cut off was not seen within 10s of its reconnection (%d setWatches dropped)", dropped.Load())
	}
	if dropped.Load() == 0 {
		t.Fatal("the observer's reconnection sent no setWatches to drop: the case was not tested")
	}
}

// dropSetWatches is a connection's filter (see testsvc.Proxy.FilterUp)
// that drops go-zookeeper's setWatches requests, counting them in dropped,
// and passes the rest on: the connect request, the first frame, then the
// requests, each a length, an xid and an opcode (setWatches: 101).
func dropSetWatches(dropped *atomic.Int64) func([]byte) []byte {
	const opSetWatches = 101
	var pending []byte // a frame cut across reads
	first := true
	return func(chunk []byte) []byte {
		pending = append(pending, chunk...)
		var out []byte
		for len(pending) >= 4 {
			n := int(binary.BigEndian.Uint32(pending))
			if len(pending) < 4+n {
				break
			}
			frame := pending[:4+n]
			if !first && n >= 8 && binary.BigEndian.Uint32(frame[8:12]) == opSetWatches {
				dropped.Add(1)
			} else {
				out = append(out, frame...)
			}
			first = false
			pending = pending[4+n:]
		}
		return out
	}
}

// TestObserve_ReadOutlastsRequestTimeout: an observation whose read after
// a change finds the connection down goes on while the session may live
// (the session timeout), not only the request timeout, and reads again
// once connected. Here the connection is cut as the leader leaves, for
// 2.5s: past the request timeout (1s), within the session timeout (8s).
func TestObserve_ReadOutlastsRequestTimeout(t *testing.T) {
	proxy, obs, l, terms := observedThroughProxy(t)
	ctx := timeout(t, 60*time.Second)
	const outage = 2500 * time.Millisecond
	var cut atomic.Bool
	zk.OnObserveRead(obs.Locker(), func() {
		if cut.CompareAndSwap(false, true) {
			proxy.Block()
			proxy.Cut()
			time.AfterFunc(outage, proxy.Unblock)
		}
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case tm, ok := <-terms:
		if !ok {
			t.Fatalf("the observation ended when its read after the leader left found the connection down for %v (request timeout 1s, session timeout 8s)", outage)
		}
		if !tm.NoLeader() {
			t.Fatalf("after the outage: term %+v; want no leader", tm)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no term within 20s of the leader's release")
	}
	if !cut.Load() {
		t.Fatal("the observation read nothing after the release: the case was not tested")
	}
}

// TestObserve_ReadUnansweredConnected_Ends: an observation whose read
// after a change has no answer within the request timeout while the
// connection stays up (a server that paused, 2s here, shorter than the
// connection's own timeout) ends, as it always did; it must not wait for
// a reconnection that never comes, with no watch set, for ever.
func TestObserve_ReadUnansweredConnected_Ends(t *testing.T) {
	proxy, obs, l, terms := observedThroughProxy(t)
	ctx := timeout(t, 60*time.Second)
	var paused atomic.Bool
	zk.OnObserveRead(obs.Locker(), func() {
		if paused.CompareAndSwap(false, true) {
			proxy.Block()
			time.AfterFunc(2*time.Second, proxy.Unblock)
		}
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case tm, ok := <-terms:
		if ok {
			t.Fatalf("after an unanswered read: term %+v; want the observation ended", tm)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the observation whose read had no answer, its connection up, neither ended nor went on within 15s")
	}
	if !paused.Load() {
		t.Fatal("the observation read nothing after the release: the case was not tested")
	}
}

// observedThroughProxy has a holds a lock, and an observer, whose
// connection goes through the returned proxy (request timeout 1s, session
// timeout 8s), observe it up to its first term, a's. The proxy is
// unblocked when t ends.
func observedThroughProxy(t *testing.T) (*testsvc.Proxy, *baton.FencedLocker, *baton.FencedLease, <-chan baton.Term) {
	t.Helper()
	addr := zkServer.Addr(t)
	proxy := testsvc.NewProxy(t, addr)
	a := dial(t, []string{addr}, zk.Settings{}, baton.WithHolder("a"))
	obs := dial(t, []string{proxy.Addr()}, zk.Settings{}, baton.WithTTL(8*time.Second), baton.WithRequestTimeout(time.Second))
	t.Cleanup(proxy.Unblock) // before the Lockers close: cleanups run last first
	name := uniqueName(t)
	ctx := timeout(t, 60*time.Second)
	l, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	terms, err := obs.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := batontest.NextLeader(t, terms, 10*time.Second); got != "a" {
		t.Fatalf("first term: leader %q, want a", got)
	}
	return proxy, obs, l, terms
}
