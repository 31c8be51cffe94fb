package zk_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/zk"
)

// serverWatches asks the server (the wchp command) which sessions watch
// the nodes under dir: path -> session ids. The server lists data and
// exists watches only, no child watches (a child watch on dir would fire
// on every release: the herd): eventCounter counts those on the wire.
func serverWatches(t testing.TB, addr, dir string) map[string][]string {
	t.Helper()
	out, err := testsvc.FourLetter(addr, "wchp")
	if err != nil {
		t.Fatalf("wchp: %v", err)
	}
	w := map[string][]string{}
	var path string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "/"):
			path = strings.TrimSpace(line)
		case strings.TrimSpace(line) != "" && strings.HasPrefix(path, dir+"/"):
			w[path] = append(w[path], strings.TrimSpace(line))
		}
	}
	return w
}

// waitWatchers waits until the server reports n watches on nodes under
// dir, and returns them.
func waitWatchers(t testing.TB, addr, dir string, n int) map[string][]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		w := serverWatches(t, addr, dir)
		total := 0
		for _, s := range w {
			total += len(s)
		}
		if total == n {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server reports %d watches under %s after 20s, want %d: %v", total, dir, n, w)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sessionHex(id int64) string { return fmt.Sprintf("0x%x", id) }

// eventCounter counts the watch notifications (frames with xid -1) the
// server sends on the connections it dials: every watch event of every
// kind (data, exists, child), whatever the recipe does with it.
type eventCounter struct{ n atomic.Int64 }

func (e *eventCounter) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	return dialWrapped(network, address, timeout, func(c net.Conn) net.Conn { return &countingConn{Conn: c, e: e} })
}

// countingConn reads the server's frames (a 4-byte length, then the
// frame) as go-zookeeper reads them, from one goroutine.
type countingConn struct {
	net.Conn
	e      *eventCounter
	buf    []byte // bytes of frames not complete yet
	frames int    // frames read; the first is the connect response, without an xid
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.buf = append(c.buf, p[:n]...)
	for len(c.buf) >= 4 {
		size := int(binary.BigEndian.Uint32(c.buf))
		if len(c.buf) < 4+size {
			break
		}
		if c.frames > 0 && size >= 4 && int32(binary.BigEndian.Uint32(c.buf[4:])) == -1 {
			c.e.n.Add(1)
		}
		c.frames++
		c.buf = c.buf[4+size:]
	}
	return n, err
}

// TestRecipe_NoHerd queues ten waiters behind a holder and hands the lock
// down the line. Before each release the server must report that each
// waiter watches its predecessor's node and nothing else (so the holder's
// node is watched by exactly one waiter), and each release must fire
// exactly one watch event, at the next in line: counted twice, as the
// server's notifications on each waiter's connection (any watch, of any
// kind) and as the predecessor events the recipe reports.
func TestRecipe_NoHerd(t *testing.T) {
	const waiters = 10
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	dir := lockDir(name)
	admin := adminConn(t, addr)
	ctx := timeout(t, time.Minute)

	holder := dial(t, []string{addr}, zk.Settings{})
	lease, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	sessions := []int64{zk.ConnOf(holder.Locker()).SessionID()}
	var events [waiters]atomic.Int64
	var sent [waiters]eventCounter // on the wire
	got := make([]chan *baton.FencedLease, waiters)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the Lockers close (cleanups run last-in first-out), ending waits
	// Eleven sessions wait in line for the whole test: long ones, so that
	// a stalled JVM ends none of them (the holder's is dial's). A Locker
	// on a borrowed connection settles its session at its first
	// acquisition (3/10 of its TTL): settle them all at once, on another
	// lock, rather than one after the other in the queue.
	lockers := make([]*baton.FencedLocker, waiters)
	var settle sync.WaitGroup
	for i := range waiters {
		lockers[i] = lockerOn(t, connect(t, addr, longTTL, sent[i].dial), longTTL)
		settle.Go(func() {
			l, err := lockers[i].Acquire(ctx, name+"-settle-"+strconv.Itoa(i))
			if err != nil {
				t.Errorf("waiter %d, settling: %v", i, err)
				return
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d, settling: %v", i, err)
			}
		})
	}
	settle.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i := range waiters {
		fl := lockers[i]
		zk.OnPredecessorEvent(fl.Locker(), func(string, string) { events[i].Add(1) })
		got[i] = make(chan *baton.FencedLease, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := fl.Acquire(ctx, name)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				close(got[i])
				return
			}
			got[i] <- l
		}()
		waitChildren(t, admin, dir, i+2) // queue them in a known order
		sessions = append(sessions, zk.ConnOf(fl.Locker()).SessionID())
	}

	for turn := range waiters {
		left := waiters - turn
		w := waitWatchers(t, addr, dir, left)
		kids := children(t, admin, dir)
		for i, k := range kids {
			var want []string
			if i+1 < len(kids) {
				want = []string{sessionHex(sessions[turn+i+1])}
			}
			if have := w[dir+"/"+k]; !slices.Equal(have, want) {
				t.Fatalf("turn %d: node %d (%s) is watched by %v, want by the next in line only: %v", turn, i, k, have, want)
			}
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case lease = <-got[turn]:
			if lease == nil {
				t.FailNow()
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("turn %d: waiter %d did not get the lock within 10s", turn, turn)
		}
		var total, onWire int64
		for i := range events {
			n, w := events[i].Load(), sent[i].n.Load()
			total += n
			onWire += w
			want := int64(0)
			if i <= turn {
				want = 1
			}
			switch {
			case n != want && i <= turn:
				t.Errorf("turn %d: waiter %d saw %d predecessor events, want %d", turn, i, n, want)
			case n != want:
				t.Errorf("turn %d: waiter %d, still waiting, saw %d predecessor events; a release woke more than the next in line", turn, i, n)
			case w != want:
				t.Errorf("turn %d: the server sent waiter %d %d watch notifications, want %d", turn, i, w, want)
			}
		}
		if total != int64(turn+1) || onWire != int64(turn+1) {
			t.Fatalf("after %d releases, %d predecessor events and %d notifications on the wire", turn+1, total, onWire)
		}
	}
	var onWire int64
	for i := range sent {
		onWire += sent[i].n.Load()
	}
	t.Logf("%d releases, %d watch notifications sent", waiters, onWire)
	_ = lease.Release(ctx)
}

// TestRecipe_RecreatedParent deletes and re-creates the election node
// between holds, as the guide did: node names restart at
// lock-0000000000, and tokens (czxids) keep rising.
func TestRecipe_RecreatedParent(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	dir := lockDir(name)
	admin := adminConn(t, addr)
	fl := dial(t, []string{addr}, zk.Settings{})
	ctx := timeout(t, time.Minute)

	var tokens []baton.Token
	var seqs []string
	hold := func() {
		t.Helper()
		l, err := fl.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, l.Token())
		seqs = append(seqs, seqOf(l.Key()))
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		hold()
	}
	// Re-created by someone else, as a plain node.
	if err := admin.Delete(dir, -1); err != nil {
		t.Fatalf("delete %s: %v", dir, err)
	}
	if _, err := admin.Create(dir, nil, 0, zkgo.WorldACL(zkgo.PermAll)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		hold()
	}
	// Deleted, and re-created by baton on demand.
	if err := admin.Delete(dir, -1); err != nil {
		t.Fatalf("delete %s: %v", dir, err)
	}
	hold()

	t.Logf("node sequence numbers %v; tokens (czxid) %v", seqs, tokens)
	for _, i := range []int{3, 6} {
		if seqs[i] != "0000000000" {
			t.Errorf("hold %d after the election node was re-created has sequence %s, want 0000000000", i, seqs[i])
		}
	}
	if seqs[2] <= seqs[3] {
		t.Errorf("sequence numbers did not restart: %v", seqs)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d (%d) <= token %d (%d): tokens must keep rising across re-created election nodes: %v", i, tokens[i], i-1, tokens[i-1], tokens)
		}
	}
}

// cutDialer dials normally, and when armed cuts the connection right after
// sending the next create request (baton's create is a multi): the server
// gets the request and runs it, and the answer is lost, as when a
// connection drops at that moment.
type cutDialer struct {
	armed    atomic.Bool
	cuts     atomic.Int64
	onDelete bool // cut after a delete instead; set before dialing

	mu  sync.Mutex
	ops []int32 // the opcodes written while armed or since, for a failure's message
}

// written returns the opcodes written since the dialer was first armed.
func (d *cutDialer) written() []int32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ops)
}

// connect makes a go-zookeeper connection to addr through d, closed when
// t ends. Its session is longTTL: the tests want it to outlive the cut,
// and go-zookeeper dials again only a second after it.
func (d *cutDialer) connect(t *testing.T, addr string) *zkgo.Conn {
	t.Helper()
	return connect(t, addr, longTTL, d.dial)
}

// dialWrapped dials as net.DialTimeout does, and wraps the connection: the
// test dialers' way to see or tamper with what goes over it.
func dialWrapped(network, address string, timeout time.Duration, wrap func(net.Conn) net.Conn) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return wrap(c), nil
}

// connect makes a go-zookeeper connection to addr with session timeout
// ttl, through dial (nil: the default dialer), closed (its events
// drained) when t ends.
func connect(t *testing.T, addr string, ttl time.Duration, dial zkgo.Dialer) *zkgo.Conn {
	t.Helper()
	if dial == nil {
		dial = net.DialTimeout
	}
	conn, events, err := zkgo.Connect([]string{addr}, ttl, zkgo.WithDialer(dial), zkgo.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		for range events {
		}
	})
	return conn
}

func (d *cutDialer) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	return dialWrapped(network, address, timeout, func(c net.Conn) net.Conn { return &cutConn{Conn: c, d: d} })
}

type cutConn struct {
	net.Conn
	d   *cutDialer
	cut atomic.Bool // set just before the request that is cut leaves
}

// ZooKeeper's opcodes for a create, plain or in a multi, a delete, a read
// of a node's data, and a listing with its stat.
const (
	opCreate       = 1
	opDelete       = 2
	opGetData      = 4
	opGetChildren2 = 12
	opMulti        = 14
)

// opcode returns the opcode of request b, as go-zookeeper writes it (one
// request per write: [len][xid][opcode]...).
func opcode(b []byte) (int32, bool) {
	if len(b) < 12 {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(b[8:12])), true
}

// Write decides on the cut, and counts it, before the request leaves: once
// it has left, the server may answer and the caller return (and look at
// d.cuts) before this goroutine runs again. From then on Read delivers
// nothing, so that answer is lost even when it comes back before the Close.
func (c *cutConn) Write(b []byte) (int, error) {
	op, ok := opcode(b)
	if !ok {
		return c.Conn.Write(b)
	}
	c.d.mu.Lock()
	if c.d.armed.Load() || len(c.d.ops) > 0 {
		c.d.ops = append(c.d.ops, op)
	}
	c.d.mu.Unlock()
	want := op == opCreate || op == opMulti
	if c.d.onDelete {
		want = op == opDelete
	}
	if !want || !c.d.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(b)
	}
	c.cut.Store(true)
	c.d.cuts.Add(1)
	n, err := c.Conn.Write(b)
	_ = c.Conn.Close()
	return n, err
}

// Read fails once the connection is cut, even with bytes already read: the
// answer to the request that was cut must not get through.
func (c *cutConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.cut.Load() {
		return 0, net.ErrClosed
	}
	return n, err
}

// TestRecipe_LostCreateReply cuts the connection right after a create
// request leaves: the node is made, its answer lost. The protected name's
// GUID finds it again after the reconnection, so the acquisition holds
// with that node and no second one is left behind (an unprotected
// recipe would create another, and the first would hold the lock forever
// while the session lives). With ContinueWhileSuspended off, as with it:
// the drop came before the acquisition looked at the candidates, so it
// may take the lock once it has looked again.
func TestRecipe_LostCreateReply(t *testing.T) {
	for _, set := range []zk.Settings{{}, {ContinueWhileSuspended: true}} {
		t.Run(fmt.Sprintf("continue-while-suspended=%v", set.ContinueWhileSuspended), func(t *testing.T) {
			lostCreateReply(t, set)
		})
	}
}

func lostCreateReply(t *testing.T, set zk.Settings) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	dir := lockDir(name)
	admin := adminConn(t, addr)
	d := &cutDialer{}
	conn := d.connect(t, addr)
	fl, err := set.New(conn, baton.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	ctx := timeout(t, 30*time.Second)
	// First use creates the election node; then the real test.
	if l, err := fl.Acquire(ctx, name); err != nil {
		t.Fatal(err)
	} else {
		_ = l.Release(ctx)
	}
	sid := conn.SessionID()

	d.armed.Store(true)
	l, err := fl.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire across a lost create answer: %v", err)
	}
	if d.cuts.Load() != 1 {
		t.Fatalf("%d connections cut, want 1; opcodes written since armed: %v; lease %s", d.cuts.Load(), d.written(), l.Key())
	}
	if conn.SessionID() != sid {
		t.Fatalf("session changed from 0x%x to 0x%x; the test wants it to survive", sid, conn.SessionID())
	}
	kids := children(t, admin, dir)
	if len(kids) != 1 || dir+"/"+kids[0] != l.Key() {
		t.Fatalf("election node holds %v; want only the holder's node %s", kids, l.Key())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if kids := children(t, admin, dir); len(kids) != 0 {
		t.Fatalf("after release the election node holds %v", kids)
	}
}

// borrowed makes a go-zookeeper connection to addr, closed when t ends,
// and a Locker on it (zk.New): a connection the caller keeps. Its session
// is longTTL: the tests want the connection, and with it the session, to
// last until Close, also through a proxy that holds requests back (and
// with them the pings go-zookeeper's read deadline counts on).
func borrowed(t *testing.T, addr string) (*zkgo.Conn, *baton.FencedLocker) {
	t.Helper()
	conn := connect(t, addr, longTTL, nil)
	return conn, lockerOn(t, conn, longTTL)
}

// lockerOn makes a Locker with the TTL ttl and opts on conn (zk.New),
// closed when t ends.
func lockerOn(t *testing.T, conn *zkgo.Conn, ttl time.Duration, opts ...baton.Option) *baton.FencedLocker {
	t.Helper()
	fl, err := zk.New(conn, append([]baton.Option{baton.WithTTL(ttl)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.Close() })
	return fl
}

// TestNew_BorrowedConnection: a Locker on a caller's connection deletes its
// nodes when closed, and leaves the connection open.
func TestNew_BorrowedConnection(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	admin := adminConn(t, addr)
	conn, fl := borrowed(t, addr)
	lease, err := fl.Acquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(children(t, admin, lockDir(name))) != 1 {
		t.Fatal("no node for the hold")
	}
	if err := fl.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("lease still held after Close")
	}
	if kids := children(t, admin, lockDir(name)); len(kids) != 0 {
		t.Fatalf("nodes left after Close: %v", kids)
	}
	if _, _, err := conn.Exists("/"); err != nil {
		t.Fatalf("the caller's connection no longer works after Close: %v", err)
	}
	if _, err := zk.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// TestClose_Borrowed_AbandonedCreateReaped: on a borrowed connection,
// whose session outlives the Locker, a create that an acquisition stopped
// waiting for and that is answered only while Close runs still has its
// node deleted: Close waits for the answer before the reaper's last pass.
// Otherwise the node, first in line, would hold the lock for as long as
// the caller's connection lives. The proxy holds the create back (and the
// requests behind it) until Close has begun.
func TestClose_Borrowed_AbandonedCreateReaped(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	dir := lockDir(name)
	admin := adminConn(t, addr)
	proxy := testsvc.NewProxy(t, addr)
	_, fl := borrowed(t, proxy.Addr())
	// First use creates the election node, so that the next request
	// naming it is the candidate's create.
	l, err := fl.Acquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())

	held := abandonHeldCreate(t, context.Background(), proxy, fl, name)
	closed := make(chan error, 1)
	go func() { closed <- fl.Close() }()
	// The answer comes only once Close waits for it, before its last pass
	// of the reaper.
	deadline := time.Now().Add(10 * time.Second)
	for !zk.AwaitingSettled(fl.Locker()) {
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a create was in flight", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Close does not wait for the abandoned create's answer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	held.Release()
	closedClean(t, closed, admin, dir, "the abandoned create's node")
}

// TestClose_Borrowed_CreateAnsweredAfterClose: a create that an
// acquisition stopped waiting for, answered only after Close gave up
// waiting for it (the release timeout) and returned, on a borrowed
// connection whose session lives on: its node is deleted when the answer
// comes. Otherwise it would stand in line, here behind another client's
// hold, for as long as the caller keeps the connection.
func TestClose_Borrowed_CreateAnsweredAfterClose(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	dir := lockDir(name)
	admin := adminConn(t, addr)
	proxy := testsvc.NewProxy(t, addr)
	conn := connect(t, proxy.Addr(), longTTL, nil)
	fl := lockerOn(t, conn, longTTL, baton.WithReleaseTimeout(500*time.Millisecond))
	ctx := timeout(t, time.Minute)
	// Another client holds the lock: the election node stays, and our
	// node would stand in line behind its.
	lo, err := dial(t, []string{addr}, zk.Settings{}).Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Release(ctx)

	held := abandonHeldCreate(t, ctx, proxy, fl, name)
	if err := fl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, st, err := admin.Exists(dir)
	if err != nil {
		t.Fatal(err)
	}
	held.Release()
	// The create lands (a child more), then its node goes (one more).
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, now, err := admin.Exists(dir)
		if err != nil {
			t.Fatal(err)
		}
		if now.Cversion >= st.Cversion+2 && now.NumChildren == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the answer: children %v (%d changes since Close); the late create's node is left behind", children(t, admin, dir), now.Cversion-st.Cversion)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if kids := children(t, admin, dir); len(kids) != 1 || dir+"/"+kids[0] != lo.Key() {
		t.Fatalf("children %v; want only the holder's, %s", kids, lo.Key())
	}
}

// abandonHeldCreate has fl's TryAcquire of name send its create, which
// proxy holds back, then cancels the TryAcquire: it returns the held
// create of an acquisition that stopped waiting for its answer. The
// election node must exist already, so that the first request naming it
// is the create.
func abandonHeldCreate(t *testing.T, ctx context.Context, proxy *testsvc.Proxy, fl *baton.FencedLocker, name string) *testsvc.Held {
	t.Helper()
	held := proxy.HoldFirst([]byte(lockDir(name) + "/"))
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tried := make(chan error, 1)
	go func() {
		_, err := fl.TryAcquire(tctx, name)
		tried <- err
	}()
	select {
	case <-held.Caught():
	case <-time.After(10 * time.Second):
		t.Fatal("the create was not caught")
	}
	cancel()
	if err := <-tried; !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire whose create is held, cancelled: %v; want context.Canceled", err)
	}
	return held
}

// closedClean waits for a Close's result on closed and checks that it
// left no node in dir, whose must-go node what names.
func closedClean(t *testing.T, closed <-chan error, admin *zkgo.Conn, dir, what string) {
	t.Helper()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return")
	}
	if kids := children(t, admin, dir); len(kids) != 0 {
		t.Fatalf("nodes left after Close: %v; %s must be deleted", kids, what)
	}
}

// TestRecipe_WaiterAheadLeaves: holder H, then waiters A and B. A gives up;
// B's watch on A fires, but H still holds: B must look again and wait for
// H, not take the lock (only when the deleted predecessor was the head may
// a waiter skip the look).
func TestRecipe_WaiterAheadLeaves(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	dir := lockDir(name)
	admin := adminConn(t, addr)
	ctx := timeout(t, 30*time.Second)
	h := dial(t, []string{addr}, zk.Settings{})
	a := dial(t, []string{addr}, zk.Settings{})
	b := dial(t, []string{addr}, zk.Settings{})
	var bEvents atomic.Int64
	zk.OnPredecessorEvent(b.Locker(), func(string, string) { bEvents.Add(1) })

	lh, err := h.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() { _, err := a.Acquire(actx, name); aDone <- err }()
	waitChildren(t, admin, dir, 2)
	bGot := make(chan *baton.FencedLease, 1)
	go func() {
		l, err := b.Acquire(ctx, name)
		if err != nil {
			t.Errorf("B: %v", err)
		}
		bGot <- l
	}()
	waitChildren(t, admin, dir, 3)
	waitWatchers(t, addr, dir, 2) // A on H, B on A

	cancelA()
	if err := <-aDone; err == nil {
		t.Fatal("A acquired")
	}
	// B looked again and now watches H. (A's watch on H stays on the
	// server until it fires: go-zookeeper cannot remove a watch.)
	bSession := sessionHex(zk.ConnOf(b.Locker()).SessionID())
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(serverWatches(t, addr, dir)[lh.Key()], bSession) {
		select {
		case <-bGot:
			t.Fatal("B acquired while H holds")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after A left, B does not watch H's node: %v", serverWatches(t, addr, dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-bGot:
		t.Fatal("B acquired while H holds")
	default:
	}
	if n := bEvents.Load(); n != 1 {
		t.Errorf("B saw %d watch events, want 1 (A leaving)", n)
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-bGot:
		if lb == nil || lb.Token() <= lh.Token() {
			t.Fatalf("B's lease %v", lb)
		}
		_ = lb.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("B did not get the lock within 10s of H's release")
	}
}

// TestRecipe_AloneSkipsListing: a create that the server reports as the
// election node's only child holds the lock without listing; one that
// finds any other child, here a go-zookeeper zk.Lock holder's node, lists
// and waits its turn, and the backend's next create sends its listing
// behind it, until a create finds itself alone again. (That the alone
// create sends no listing at all, TestRecipe_RequestsPerCycle counts: 2
// requests per uncontended cycle.)
func TestRecipe_AloneSkipsListing(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	ctx := timeout(t, 30*time.Second)
	admin := adminConn(t, addr)
	fl := dial(t, []string{addr}, zk.Settings{})

	l, err := fl.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if zk.Crowded(fl.Locker()) {
		t.Error("crowded after a create that found itself alone")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	other := zkgo.NewLock(admin, lockDir(name), zkgo.WorldACL(zkgo.PermAll))
	if err := other.Lock(); err != nil {
		t.Fatal(err)
	}
	_, err = fl.TryAcquire(ctx, name)
	if nae := (*baton.NotAcquiredError)(nil); !errors.As(err, &nae) {
		t.Fatalf("TryAcquire while zk.Lock holds the election node: %v, want NotAcquiredError", err)
	}
	if !zk.Crowded(fl.Locker()) {
		t.Error("not crowded after a create that found zk.Lock's node")
	}
	got := make(chan error, 1)
	go func() {
		l, err := fl.Acquire(ctx, name)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitWatchers(t, addr, lockDir(name), 1)
	select {
	case err := <-got:
		t.Fatalf("Acquire returned while zk.Lock holds the lock: %v", err)
	default:
	}
	if err := other.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	l, err = fl.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if zk.Crowded(fl.Locker()) {
		t.Error("still crowded after a create that found itself alone")
	}
}

// TestRelease_NodeGoneIsALoss: a Release that finds the holder's node
// already deleted (an operator's forced release) before the hold saw it
// reports the loss: Err is a *LostError, not ErrReleased. A clean release
// is no loss.
func TestRelease_NodeGoneIsALoss(t *testing.T) {
	addr := zkServer.Addr(t)
	admin := adminConn(t, addr)
	fl := dial(t, []string{addr}, zk.Settings{})
	ctx := timeout(t, 10*time.Second)
	name := uniqueName(t)
	lease, err := fl.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(lease.Key(), -1); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release of a lease whose node was deleted: %v; want nil (the loss is Err's)", err)
	}
	var lost *baton.LostError
	if err := lease.Err(); !errors.As(err, &lost) {
		t.Fatalf("Err after a release that found the node gone: %v; want a *LostError", err)
	}
	clean, err := fl.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := clean.Release(ctx); err != nil || !errors.Is(clean.Err(), baton.ErrReleased) {
		t.Fatalf("clean release: %v, Err %v; want nil, ErrReleased", err, clean.Err())
	}
}

// TestClose_Borrowed_ReleaseUnderWay: on a borrowed connection, a Release
// that ended its hold just before Close and has not yet sent its delete
// still deletes the node: Close waits for it. Before, Close skipped the
// hold (its Release deletes it), finished, and refused the Release's
// delete as closing; the node then held the lock for as long as the
// caller's connection lived.
func TestClose_Borrowed_ReleaseUnderWay(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	dir := lockDir(name)
	admin := adminConn(t, addr)
	_, fl := borrowed(t, addr)
	lease, err := fl.Acquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	atDelete, goOn := make(chan struct{}), make(chan struct{})
	zk.OnReleaseDelete(fl.Locker(), func() {
		close(atDelete)
		<-goOn
	})
	released := make(chan error, 1)
	go func() { released <- lease.Release(context.Background()) }()
	<-atDelete
	closed := make(chan error, 1)
	go func() { closed <- fl.Close() }()
	// Let the Release go on once Close waits for it, or has returned
	// without waiting.
	deadline := time.Now().Add(10 * time.Second)
wait:
	for !zk.AwaitingSettled(fl.Locker()) {
		select {
		case err := <-closed:
			closed <- err // Close did not wait: the node is left, as below
			break wait
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Close neither waited for the Release nor returned")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(goOn)
	if err := <-released; err != nil {
		t.Errorf("Release: %v", err)
	}
	closedClean(t, closed, admin, dir, "the released hold's node")
}

// TestClose_Borrowed_DuringOutage: Close of a Locker on a caller's
// connection while the connection is down (a partition; the hold was lost
// to the disconnection) cannot delete the node then. The session survives
// an outage shorter than its timeout, and with it the node, which would
// hold the lock for as long as the caller keeps the connection: Close
// waits for the connection to come back and deletes it.
func TestClose_Borrowed_DuringOutage(t *testing.T) {
	addr := zkServer.Addr(t)
	// The outage is a partition, not a server restart: Close waits for the
	// connection for one TTL, and a JVM's restart on a loaded machine, with
	// go-zookeeper's redial after it, could take longer than what is left
	// of it. Once unblocked, the proxy delivers the redial that waited, and
	// the connection is back at once.
	proxy := testsvc.NewProxy(t, addr)
	defer proxy.Unblock() // before the connection closes (cleanups run after)
	// The longest session the server grants: it must outlive the outage,
	// counted from the client's last ping before it.
	const session = longTTL
	conn := connect(t, proxy.Addr(), session, nil)
	fl, err := zk.New(conn, baton.WithTTL(session))
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t)
	lease, err := fl.Acquire(timeout(t, 20*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	sid := conn.SessionID()
	proxy.Block()
	proxy.Cut() // seen at once; the redials hang until Unblock
	select {
	case <-lease.Done(): // SUSPENDED
	case <-time.After(10 * time.Second):
		t.Fatal("the lease outlived the connection")
	}
	closed := make(chan error, 1)
	go func() { closed <- fl.Close() }()
	// An outage of 3s. Close has nothing else to wait for (the lost hold
	// left its node to the reaper, which deletes only on a connection that
	// has its session), so it is by then waiting for the connection.
	select {
	case cerr := <-closed:
		// Behind the proxy, a delete sent during the outage waits and
		// lands after it, so the node's absence below would not show
		// that Close waited: returning now is the failure.
		t.Fatalf("Close returned during the outage, before it could delete the node: %v", cerr)
	case <-time.After(3 * time.Second):
	}
	proxy.Unblock()
	var cerr error
	select {
	case cerr = <-closed:
	case <-time.After(session + 20*time.Second):
		t.Fatal("Close did not return")
	}
	for deadline := time.Now().Add(10 * time.Second); conn.State() != zkgo.StateHasSession && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if conn.SessionID() != sid || conn.State() != zkgo.StateHasSession {
		t.Fatalf("the session did not survive a 3s outage with a %v session (state %v)", session, conn.State())
	}
	if cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	if ok, _, err := adminConn(t, addr).Exists(lease.Key()); err != nil || ok {
		t.Fatalf("after Close the node %s exists (%v, %v) on the caller's live session", lease.Key(), ok, err)
	}
	other := dial(t, []string{addr}, zk.Settings{})
	l, err := other.TryAcquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatalf("the lock is not free after Close: %v", err)
	}
	_ = l.Release(timeout(t, 10*time.Second))
}

// TestClose_Borrowed_SilentServer: Close of a Locker on a caller's
// connection to a server that went silent (a partition) returns within
// its bounds: the release timeout for its deletes, one TTL for the
// connection to come back, the release timeout for requests go-zookeeper
// holds. It waited for go-zookeeper's handshake timeouts, about 6.7 times
// the session timeout (13s here).
func TestClose_Borrowed_SilentServer(t *testing.T) {
	addr := zkServer.Addr(t)
	proxy := testsvc.NewProxy(t, addr)
	conn := connect(t, proxy.Addr(), suiteTTL, nil)
	defer proxy.Unblock() // before the connection closes (cleanups run after)
	const release = time.Second
	fl, err := zk.New(conn, baton.WithTTL(suiteTTL), baton.WithReleaseTimeout(release))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := fl.Acquire(timeout(t, 20*time.Second), uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	cutProxy(t, proxy, lease, 10*time.Second)
	start := time.Now()
	_ = fl.Close()
	bound := 2*release + suiteTTL
	took := time.Since(start)
	t.Logf("Close took %v", took.Round(time.Millisecond))
	if took > bound+time.Second {
		t.Errorf("Close took %v; bound %v", took.Round(time.Millisecond), bound)
	}
}

// TestClose_Owned_ReleaseUnderWay: on a connection Dial made, a Release
// that ended its hold just before Close, whose delete Close then refuses
// as closing, reports no failure: Close ends the session, and the node
// goes with it. Before, it returned ErrUnavailable and logged that the
// lock stays until its TTL runs out.
func TestClose_Owned_ReleaseUnderWay(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	fl, err := zk.Settings{}.Dial(timeout(t, 20*time.Second), []string{addr}, baton.WithTTL(suiteTTL), baton.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := fl.Acquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	zk.OnReleaseDelete(fl.Locker(), func() {
		closed = true
		if err := fl.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := lease.Release(timeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Release that ended its hold before Close: %v; want nil", err)
	}
	if !closed {
		t.Fatal("the Release never reached its delete: Close did not run between")
	}
	admin := adminConn(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids, _, err := admin.Children(lockDir(name))
		if errors.Is(err, zkgo.ErrNoNode) || err == nil && len(kids) == 0 {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes left 10s after Close: %v", kids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNew_BorrowedConnectionClosed_WaiterTold: a waiter on a caller's
// connection that the caller closes while it waits for the holder is told
// so at once, not after the session timeout as a connection that stayed
// down.
func TestNew_BorrowedConnectionClosed_WaiterTold(t *testing.T) {
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	a := dial(t, []string{addr}, zk.Settings{}, baton.WithHolder("a"))
	if _, err := a.Acquire(timeout(t, 10*time.Second), name); err != nil {
		t.Fatal(err)
	}
	conn, fl := borrowed(t, addr)
	watching := make(chan struct{})
	var once sync.Once
	zk.OnWatching(fl.Locker(), func(string, string) { once.Do(func() { close(watching) }) })
	got := make(chan error, 1)
	go func() {
		_, err := fl.Acquire(timeout(t, 60*time.Second), name)
		got <- err
	}()
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter set no watch within 10s")
	}
	conn.Close()
	select {
	case err := <-got:
		if !errors.Is(err, baton.ErrClosed) || !strings.Contains(err.Error(), "connection given to New was closed") {
			t.Fatalf("a waiter whose connection its owner closed: %v; want an error matching baton.ErrClosed, saying the connection was closed", err)
		}
		// The session ended with the connection, and the waiter's node
		// with it: Close has nothing to wait for.
		closed := make(chan struct{})
		go func() { _ = fl.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(longTTL / 2):
			t.Fatalf("Close of a Locker whose connection was closed still waits %v on (session timeout %v)", longTTL/2, longTTL)
		}
	case <-time.After(longTTL / 2):
		t.Fatalf("a waiter whose connection its owner closed still waits %v on (session timeout %v)", longTTL/2, longTTL)
	}
}
