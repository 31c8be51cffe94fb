package zk_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/zk"
)

// beforeRelease wraps a backend so that a test can act in the window
// between Lease.Release's look at the hold (its Context still live) and
// the backend's Hold.Release.
type beforeRelease struct {
	baton.Backend
	hook func(h baton.Hold)
}

func (b *beforeRelease) Acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	h, err := b.Backend.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &hookedHold{Hold: h, hook: b.hook}, nil
}

type hookedHold struct {
	baton.Hold
	hook func(h baton.Hold)
}

func (h *hookedHold) Release(ctx context.Context) error {
	h.hook(h.Hold)
	return h.Hold.Release(ctx)
}

// TestRelease_LostJustBefore: the holder's node is deleted by another
// client (a forced release) while the work runs; the session's next
// confirmation finds it and ends the hold, just after Lease.Release looked
// at the hold and just before the backend's Release ran. The hold is lost
// (another client may hold the lock meanwhile): the lease must report it.
// Before, the backend's Release returned nil, and the lease reported a
// clean release.
func TestRelease_LostJustBefore(t *testing.T) {
	addr := zkServer.Addr(t)
	admin := adminConn(t, addr)
	// A renewal, every TTL/3, finds the node gone: the suite's short TTL
	// keeps the wait below short.
	fl := dial(t, []string{addr}, zk.Settings{}, baton.WithTTL(suiteTTL))
	ctx := timeout(t, 20*time.Second)
	name := uniqueName(t)

	var holdErr error
	wrapped := &beforeRelease{Backend: fl.Locker().Backend(), hook: func(h baton.Hold) {
		if err := admin.Delete(h.Key(), -1); err != nil {
			t.Errorf("delete %s: %v", h.Key(), err)
			return
		}
		select { // the session's next confirmation (within RenewEvery) sees it
		case <-h.Context().Done():
		case <-time.After(5 * suiteTTL):
			t.Error("the hold did not see its node deleted")
		}
		holdErr = h.Err()
	}}
	l := baton.NewLocker(wrapped, fl.Locker().Config())
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rerr := lease.Release(ctx)
	t.Logf("hold's Err just before its Release: %v", holdErr)
	if !errors.Is(holdErr, baton.ErrLeaseLost) {
		t.Fatalf("setup: hold not lost before Release: %v", holdErr)
	}
	var lost *baton.LostError
	if err := lease.Err(); !errors.As(err, &lost) {
		t.Fatalf("Release = %v, lease.Err = %v; want a *LostError: the node was deleted by another client while the lease was held", rerr, err)
	}
}

// stallConn is a go-zookeeper connection through which the test can hold
// back the answer to a request, by xid: Read takes whole frames from the
// server and delays the frame the test names.
type stallConn struct {
	net.Conn
	d   *stallDialer
	buf []byte // the rest of the frame being read
}

type stallDialer struct {
	mu sync.Mutex
	// onWrite is called with each request's xid and opcode before it
	// leaves; onFrame with each answer's xid before it is delivered, and
	// may block.
	onWrite func(xid, op int32)
	onFrame func(xid int32)
}

func (d *stallDialer) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	return dialWrapped(network, address, timeout, func(c net.Conn) net.Conn { return &stallConn{Conn: c, d: d} })
}

func (d *stallDialer) hooks() (func(xid, op int32), func(xid int32)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.onWrite, d.onFrame
}

func (c *stallConn) Write(b []byte) (int, error) {
	if len(b) >= 12 {
		xid := int32(binary.BigEndian.Uint32(b[4:8]))
		op := int32(binary.BigEndian.Uint32(b[8:12]))
		if w, _ := c.d.hooks(); w != nil {
			w(xid, op)
		}
	}
	return c.Conn.Write(b)
}

func (c *stallConn) Read(b []byte) (int, error) {
	if len(c.buf) == 0 {
		var hdr [4]byte
		if _, err := io.ReadFull(c.Conn, hdr[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		frame := make([]byte, 4+int(n))
		copy(frame, hdr[:])
		if _, err := io.ReadFull(c.Conn, frame[4:]); err != nil {
			return 0, err
		}
		if n >= 4 {
			if _, f := c.d.hooks(); f != nil {
				f(int32(binary.BigEndian.Uint32(frame[4:8])))
			}
		}
		c.buf = frame
	}
	n := copy(b, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// ZooKeeper's opcodes for a sync and an exists (the session's renewal
// sends one of each; opDelete is in recipe_test.go).
const (
	opSync   = 9
	opExists = 3
)

// syncDelete follows, through a stallDialer, the next sync (a renewal)
// and the next delete (the release) sent: their xids, and channels closed
// as they leave; and the next exists (the renewal's look at a node), whose
// request goes out on a goroutine of its own, maybe after the sync's.
// answer, called with each answer's xid, may hold it back.
type syncDelete struct {
	syncXid, delXid, existsXid    atomic.Int32
	syncSent, delSent, existsSent chan struct{}
	syncOnce, delOnce, existsOnce sync.Once
}

// armSyncDelete makes d follow the next sync and delete, and hold answers
// back as answer says.
func armSyncDelete(d *stallDialer, answer func(sd *syncDelete, xid int32)) *syncDelete {
	return armSyncDeleteGated(d, nil, answer)
}

// armSyncDeleteGated is armSyncDelete, and holds the next exists back
// until gate, when not nil, is closed; existsSent is closed once it left.
// (The connection sends nothing else meanwhile.)
func armSyncDeleteGated(d *stallDialer, gate <-chan struct{}, answer func(sd *syncDelete, xid int32)) *syncDelete {
	sd := &syncDelete{syncSent: make(chan struct{}), delSent: make(chan struct{}), existsSent: make(chan struct{})}
	sd.syncXid.Store(-100)
	sd.delXid.Store(-100)
	sd.existsXid.Store(-100)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onWrite = func(xid, op int32) {
		switch op {
		case opSync:
			sd.syncOnce.Do(func() { sd.syncXid.Store(xid); close(sd.syncSent) })
		case opDelete:
			sd.delOnce.Do(func() { sd.delXid.Store(xid); close(sd.delSent) })
		case opExists:
			sd.existsOnce.Do(func() {
				sd.existsXid.Store(xid)
				if gate != nil {
					<-gate
				}
				close(sd.existsSent)
			})
		}
	}
	d.onFrame = func(xid int32) { answer(sd, xid) }
	return sd
}

// stalledLocker is a FencedLocker with the given TTL on a connection of
// its own through a new stallDialer, both closed when t ends.
func stalledLocker(t *testing.T, addr string, ttl time.Duration, opts ...baton.Option) (*baton.FencedLocker, *stallDialer) {
	t.Helper()
	d := &stallDialer{}
	conn := connect(t, addr, ttl, d.dial)
	t.Cleanup(func() { // before the connection closes
		d.mu.Lock()
		d.onWrite, d.onFrame = nil, nil
		d.mu.Unlock()
	})
	return lockerOn(t, conn, ttl, opts...), d
}

// TestRelease_RenewedDuringRelease_NodeGoneIsALoss: the holder's node is deleted by
// another client while the lease is held. A renewal (the session's sync)
// is on its way when Release starts; its answer comes during the release
// and moves the local deadline on; the delete's answer (no node) comes
// after the deadline Release read before it began, but well before the
// deadline as it is when the answer comes. The session was confirmed
// alive all along, so the node was deleted by someone else: a loss.
// Before, the release called it clean.
func TestRelease_RenewedDuringRelease_NodeGoneIsALoss(t *testing.T) {
	addr := zkServer.Addr(t)
	admin := adminConn(t, addr)
	const ttl = 4 * time.Second
	fl, d := stalledLocker(t, addr, ttl)
	ctx := timeout(t, 30*time.Second)
	name := uniqueName(t)
	lease, err := fl.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	var d0 atomic.Int64 // deadline before the release, unix nanos
	sd := armSyncDelete(d, func(sd *syncDelete, xid int32) {
		switch xid {
		case sd.syncXid.Load():
			<-sd.delSent // the renewal's answer comes once the release is on its way
			time.Sleep(20 * time.Millisecond)
		case sd.delXid.Load():
			// The delete's answer comes 150ms after the deadline read
			// before the release.
			time.Sleep(time.Until(time.Unix(0, d0.Load())) + 150*time.Millisecond)
		}
	})

	<-sd.syncSent // a renewal is on its way
	if err := admin.Delete(lease.Key(), -1); err != nil {
		t.Fatal(err)
	}
	d0.Store(lease.Deadline().UnixNano())
	t.Logf("deadline before the release: in %v", time.Until(lease.Deadline()).Round(time.Millisecond))
	rerr := lease.Release(ctx)
	t.Logf("release answered %v after the old deadline; the deadline is now in %v", time.Since(time.Unix(0, d0.Load())).Round(time.Millisecond), time.Until(lease.Deadline()).Round(time.Millisecond))
	var lost *baton.LostError
	if err := lease.Err(); !errors.As(err, &lost) {
		t.Fatalf("Release = %v, lease.Err = %v; want a *LostError: the node was deleted by another client while the session was confirmed alive", rerr, err)
	}
}

// TestRelease_FailedWhileRenewalFindsNodeGone_IsALoss: the holder's node is
// deleted by another client while the lease is held. The session's next
// confirmation (sync + exists) is on its way when Release starts; its
// answer, which says the node is gone, comes once the hold is marked
// released, and is dropped; the release's delete then gets no answer
// within the request timeout. The loss, which a renewal saw, must be
// reported. Before, Release reported a failed release only, and the lease
// said ErrReleased.
//
// The hooks are armed before the node is deleted, so that no renewal can
// see it gone before Release: the next exists is held back until the
// delete is done, and its answer until the release's delete has left
// (answers come in order: nothing behind it is delivered either).
func TestRelease_FailedWhileRenewalFindsNodeGone_IsALoss(t *testing.T) {
	addr := zkServer.Addr(t)
	admin := adminConn(t, addr)
	const ttl = 4 * time.Second
	fl, d := stalledLocker(t, addr, ttl, baton.WithRequestTimeout(time.Second))
	ctx := timeout(t, 30*time.Second)
	name := uniqueName(t)
	lease, err := fl.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	deleted := make(chan struct{})
	sd := armSyncDeleteGated(d, deleted, func(sd *syncDelete, xid int32) {
		switch xid {
		case sd.existsXid.Load():
			select { // the renewal's answer comes once the release is on its way
			case <-sd.delSent:
			case <-ctx.Done():
			}
		case sd.delXid.Load():
			time.Sleep(1500 * time.Millisecond) // past the request timeout
		}
	})
	err = admin.Delete(lease.Key(), -1)
	close(deleted)
	if err != nil {
		t.Fatal(err)
	}
	<-sd.existsSent // the renewal whose exists finds the node gone
	// And its sync, sent on a goroutine of its own: one that left after
	// the release's delete would be answered behind that delete's held
	// answer, and the renewal would say nothing before Release gave up
	// (CI, once, under load).
	<-sd.syncSent
	if err := lease.Err(); err != nil {
		t.Fatalf("the lease ended before Release: %v; no renewal's answer can come before the release's delete leaves", err)
	}
	rerr := lease.Release(ctx)
	var lost *baton.LostError
	if err := lease.Err(); !errors.As(err, &lost) {
		t.Fatalf("Release = %v, lease.Err = %v; want a *LostError: a renewal found the node deleted by another client", rerr, err)
	}
}

// TestRelease_Suspended_NoWaitForConnection: a lease lost as SUSPENDED
// (its connection cut, the session alive) is released at once, not after
// a delete that waits for the connection: the hold gave its node to the
// reaper when it was lost, which deletes it once the connection is back.
// Before, Release (and Run's return) waited out the release timeout.
func TestRelease_Suspended_NoWaitForConnection(t *testing.T) {
	addr := zkServer.Addr(t)
	proxy := testsvc.NewProxy(t, addr)
	defer proxy.Unblock()
	a := dial(t, []string{proxy.Addr()}, zk.Settings{}, baton.WithTTL(10*time.Second))
	ctx := timeout(t, 60*time.Second)
	lease, err := a.Acquire(ctx, uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	cutProxy(t, proxy, lease, 15*time.Second)
	if err := lease.Err(); !errors.Is(err, zk.ErrSuspended) {
		t.Fatalf("lease lost with %v; want SUSPENDED", err)
	}
	start := time.Now()
	err = lease.Release(ctx)
	// A bound on a release that sends nothing, far from the old wait of
	// one request timeout (5s).
	if took := time.Since(start); took >= 2*time.Second {
		t.Errorf("Release of a lease lost as SUSPENDED took %v: it waited for the cut connection", took)
	}
	if err != nil || !errors.Is(lease.Err(), zk.ErrSuspended) {
		t.Errorf("Release = %v, Err = %v; want nil, and the loss (SUSPENDED) kept", err, lease.Err())
	}
	// Back on the same session (10s), the reaper deletes the node; or the
	// session ended meanwhile, and the node with it.
	proxy.Unblock()
	admin := adminConn(t, addr)
	for {
		ok, _, err := admin.Exists(lease.Key())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %s still there once the connection was back", lease.Key())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
