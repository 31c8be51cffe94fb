package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestRelease_DeleteFailed_KeyGoesWithSession: a Release whose delete is
// never applied (here a client interceptor holds every Txn until its
// context ends, as an outage would) leaves the key on the session's
// lease, which the Locker would renew for as long as it lives. The session
// is retired instead, and revoked once no other lock uses it: another
// Locker waiting for the lock gets it.
func TestRelease_DeleteFailed_KeyGoesWithSession(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	var stall atomic.Bool
	icpt := stallTxns(&stall)
	l := interceptedLocker(t, srv.Endpoint, icpt, baton.WithTTL(2*time.Second), baton.WithReleaseTimeout(500*time.Millisecond))
	lease, err := l.TryAcquire(timeout(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	releaseStalled(t, &stall, lease)
	// Without the retirement the key lives as long as l: 5 TTLs is ample.
	other := newLocker(t, srv.Endpoint)
	lo, err := other.Acquire(timeout(t, 10*time.Second), "x")
	if err != nil {
		t.Fatalf("another Locker waiting for the lock after the failed release: %v", err)
	}
	_ = lo.Release(context.Background())
	// l itself goes on, on a new session.
	ln, err := l.TryAcquire(timeout(t, 5*time.Second), "y")
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf(ln.Key()) == leaseOf(lease.Key()) {
		t.Errorf("after the retirement, key %s is on the same lease as %s", ln.Key(), lease.Key())
	}
	_ = ln.Release(context.Background())
}

// TestRelease_DeleteFailed_SessionPinned: as above, but another lock of
// the Locker (a leadership, held for days) keeps the retired session
// alive, so its lease would keep the key for as long. The delete is tried
// again once the outage is over: another Locker waiting for the lock gets
// it. Before, the key stayed first in line for as long as the leadership.
func TestRelease_DeleteFailed_SessionPinned(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	var stall atomic.Bool
	icpt := stallTxns(&stall)
	l := interceptedLocker(t, srv.Endpoint, icpt, baton.WithTTL(2*time.Second), baton.WithReleaseTimeout(500*time.Millisecond))
	lead, err := l.Campaign(timeout(t, 5*time.Second), "leader")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(timeout(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf(lease.Key()) != leaseOf(lead.Key()) {
		t.Fatalf("x's key %s is not on the leadership's session", lease.Key())
	}
	releaseStalled(t, &stall, lease) // the outage is over when it returns
	other := newLocker(t, srv.Endpoint)
	lo, err := other.Acquire(timeout(t, 10*time.Second), "x") // 5 TTLs
	if err != nil {
		t.Fatalf("lock x, released during an outage now over, still taken: %v", err)
	}
	_ = lo.Release(context.Background())
	if err := lead.Err(); err != nil {
		t.Fatalf("the leadership ended: %v", err)
	}
	_ = lead.Release(context.Background())
}

// TestAcquire_LateCreate_KeyGoesWithSession: the create of a lock key
// whose request failed (here the interceptor reports Unavailable) but whose
// copy, held up in the network, is applied after Acquire cleaned up, would
// hold the lock for as long as the Locker's session lives. The session is
// retired instead, and revoked once unused: the late create fails on the
// revoked lease, or its key goes with it. While another lock of the Locker
// still keeps the session (pinned), the key is deleted again, every
// RenewEvery for one TTL.
func TestAcquire_LateCreate_KeyGoesWithSession(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprintf("pinned=%v", pinned), func(t *testing.T) {
			var late atomic.Bool
			deliver, landed := make(chan struct{}), make(chan struct{})
			icpt := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == "/etcdserverpb.KV/Txn" && late.CompareAndSwap(true, false) {
					go func() {
						defer close(landed)
						<-deliver
						_ = invoker(context.Background(), method, req, reply, cc, opts...)
					}()
					return status.Error(codes.Unavailable, "connection reset (test)")
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			l := interceptedLocker(t, srv.Endpoint, icpt, baton.WithTTL(2*time.Second))
			name := fmt.Sprintf("late-%v", pinned)
			warm, err := l.TryAcquire(timeout(t, 5*time.Second), name+"-pin") // the session exists
			if err != nil {
				t.Fatal(err)
			}
			if !pinned {
				if err := warm.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			late.Store(true)
			if _, err := l.TryAcquire(timeout(t, 5*time.Second), name); !errors.Is(err, baton.ErrUnavailable) {
				t.Fatalf("TryAcquire whose create failed = %v, want ErrUnavailable", err)
			}
			close(deliver)
			<-landed
			other := newLocker(t, srv.Endpoint)
			lo, err := other.Acquire(timeout(t, 10*time.Second), name)
			if err != nil {
				t.Fatalf("another Locker waiting for the lock after the late create: %v", err)
			}
			_ = lo.Release(context.Background())
			if pinned {
				if err := warm.Err(); err != nil {
					t.Errorf("the lock that pinned the session: %v", err)
				}
				_ = warm.Release(context.Background())
			}
		})
	}
}

// TestRelease_LostByDeadline_SessionRevoked: a session lost by its local
// deadline (cut off: its renewals unanswered) still lives on the server
// for the drift margin at least, longer when a renewal nobody heard back
// from was applied. Releasing its last lease revokes it, so that the next
// holder need not wait for it to expire.
func TestRelease_LostByDeadline_SessionRevoked(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	// A drift of 8s puts the local deadline 2s after a renewal's send,
	// and the lease's end on the server 8s later or more.
	a := newLocker(t, "http://"+proxy.Addr(), baton.WithTTL(10*time.Second), baton.WithRenewEvery(time.Second),
		baton.WithDrift(8*time.Second), baton.WithRequestTimeout(300*time.Millisecond))
	b := newLocker(t, srv.Endpoint)
	la, err := a.Acquire(timeout(t, 10*time.Second), "lost")
	if err != nil {
		t.Fatal(err)
	}
	proxy.Block()
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the cut-off lease was not lost")
	}
	if !errors.Is(la.Err(), baton.ErrLeaseLost) {
		t.Fatalf("lease ended with %v, want lost", la.Err())
	}
	proxy.Unblock()
	if err := la.Release(context.Background()); err != nil {
		t.Fatalf("Release of a lost lease = %v, want nil", err)
	}
	// Half the 8s the lease has left on the server at least.
	lb, err := b.Acquire(timeout(t, 4*time.Second), "lost")
	if err != nil {
		t.Fatalf("Acquire after the lost lease was released: %v; want its session revoked", err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after the lost lease's %d", lb.Token(), la.Token())
	}
	_ = lb.Release(context.Background())
}

// leaseOf is the session lease, in hex, that lock key PREFIX/NAME/LEASE-SEQ
// was created on.
func leaseOf(key string) string {
	return strings.Split(key[strings.LastIndex(key, "/")+1:], "-")[0]
}

// TestForceRelease_AnswerLost: a forced release whose delete is applied
// but whose answer is lost (here the interceptor drops it) sends it again,
// finds the key gone, and reports the release done. Told that it failed,
// an operator would force again, and free the next holder's lock.
func TestForceRelease_AnswerLost(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	var drop atomic.Bool
	icpt := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && method == "/etcdserverpb.KV/Txn" && drop.CompareAndSwap(true, false) {
			return status.Error(codes.Unavailable, "answer dropped by the test")
		}
		return err
	}
	op := interceptedLocker(t, srv.Endpoint, icpt, baton.WithTTL(2*time.Second))
	holder := newLocker(t, srv.Endpoint, baton.WithHolder("web-1"))
	la, err := holder.Acquire(timeout(t, 5*time.Second), "forced")
	if err != nil {
		t.Fatal(err)
	}
	drop.Store(true)
	info, err := op.Locker().Backend().(baton.ForceReleaser).ForceRelease(timeout(t, 10*time.Second), "forced")
	if drop.Load() {
		t.Fatal("no answer was dropped")
	}
	if err != nil || info.Holder != "web-1" || info.Token != la.Token() {
		t.Fatalf("forced release across a lost answer: %+v, %v; want web-1's (token %d) released", info, err, la.Token())
	}
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the forced holder's lease did not end")
	}
}

// TestForceRelease_LostHoldDroppedIsFreed: a hold lost to a forced
// release, whose lease the caller drops without Release, is freed while
// its session lives on (another hold keeps it). Its watcher left the
// hold's relay of the session's end, and its own context, registered on
// the session's context, which kept the hold until the session ended.
func TestForceRelease_LostHoldDroppedIsFreed(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	ctx := timeout(t, 20*time.Second)
	l := newLocker(t, srv.Endpoint, baton.WithTTL(10*time.Second))
	keep, err := l.Acquire(ctx, "keep") // the session lives while this holds
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Release(ctx)
	var collected func() bool
	etcd.OnHoldCollectable(l.Locker(), func(c func() bool) { collected = c })
	// The first watcher to exit is the lost hold's (keep's may have
	// started after this hook was set, and exits at its Release).
	exited := make(chan struct{})
	var once sync.Once
	etcd.OnWatchExit(l.Locker(), func() { once.Do(func() { close(exited) }) })
	lost, err := l.Acquire(ctx, "forced")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newLocker(t, srv.Endpoint).Locker().Backend().(baton.ForceReleaser).ForceRelease(ctx, "forced"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost.Done():
	case <-ctx.Done():
		t.Fatal("the forced holder's lease did not end")
	}
	<-exited
	lost = nil // dropped without Release
	for range 5 {
		if collected() {
			break
		}
		runtime.GC()
	}
	if !collected() {
		t.Fatal("a lost hold dropped without Release is still kept while its session lives")
	}
	if err := keep.Err(); err != nil {
		t.Fatalf("the other hold on the session: %v", err)
	}
}

// TestClose_FinishesRevokes: Close lets the revoke of a retired session
// already under way finish, while it revokes the live session, both at
// once: a revoke cut short would leave the retired session's keys, and
// their locks taken, until its lease ran out. The interceptor holds the
// first revoke until a second one is sent, which only a Close that lets
// the first run on and revokes the other session meanwhile does.
func TestClose_FinishesRevokes(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	var stall, cut atomic.Bool
	var revokes atomic.Int32
	second := make(chan struct{})
	icpt := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch {
		case stall.Load() && method == "/etcdserverpb.KV/Txn":
			<-ctx.Done()
			return ctx.Err()
		case method == "/etcdserverpb.Lease/LeaseRevoke":
			if revokes.Add(1) == 2 {
				close(second)
			} else {
				select {
				case <-second:
				case <-ctx.Done():
					cut.Store(true)
					return ctx.Err()
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	l := interceptedLocker(t, srv.Endpoint, icpt, baton.WithTTL(10*time.Second), baton.WithReleaseTimeout(3*time.Second))
	// x's delete fails: its session is retired, and revoked at once, as
	// x was its only lock; the revoke is held.
	lx, err := l.TryAcquire(timeout(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	releaseStalled(t, &stall, lx)
	lz, err := l.TryAcquire(timeout(t, 5*time.Second), "z")
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf(lz.Key()) == leaseOf(lx.Key()) {
		t.Fatalf("z's key %s is on the retired session's lease", lz.Key())
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if cut.Load() {
		t.Error("a revoke was cut short")
	}
	if n := revokes.Load(); n != 2 {
		t.Errorf("%d revokes sent; want 2 (the retired session, the live one)", n)
	}
	// Both leases are revoked: their keys are gone well within the TTL.
	other := newLocker(t, srv.Endpoint)
	for _, name := range []string{"x", "z"} {
		lo, err := other.TryAcquire(timeout(t, 5*time.Second), name)
		if err != nil {
			t.Fatalf("lock %s after Close: %v; want it free", name, err)
		}
		_ = lo.Release(context.Background())
	}
}

// stallTxns is an interceptor that, while stall is set, holds every Txn
// until its context ends, as an outage would.
func stallTxns(stall *atomic.Bool) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if stall.Load() && method == "/etcdserverpb.KV/Txn" {
			<-ctx.Done()
			return ctx.Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// releaseStalled releases lease while stall holds every Txn (the
// interceptor's), so that its delete is never applied, and checks that
// Release says it failed.
func releaseStalled(t *testing.T, stall *atomic.Bool, lease *baton.FencedLease) {
	t.Helper()
	stall.Store(true)
	defer stall.Store(false)
	if err := lease.Release(context.Background()); err == nil {
		t.Fatal("Release whose delete stalled returned nil")
	}
}

// TestAcquire_SessionRevokedUnseen: another client revokes the session's
// lease (an operator's etcdctl lease revoke); an acquisition made before
// the Locker notices finds the lease gone at its create. It must go on, on
// a new session, not fail with ErrLeaseLost: it held nothing to lose.
func TestAcquire_SessionRevokedUnseen(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	l := newLocker(t, srv.Endpoint, baton.WithTTL(30*time.Second)) // no renewal for 10s
	la, err := l.TryAcquire(timeout(t, 5*time.Second), "a")
	if err != nil {
		t.Fatal(err)
	}
	id, err := strconv.ParseInt(leaseOf(la.Key()), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testsvc.Client(t, srv.Endpoint).Revoke(timeout(t, 5*time.Second), clientv3.LeaseID(id)); err != nil {
		t.Fatal(err)
	}
	lb, err := l.TryAcquire(timeout(t, 5*time.Second), "b")
	if err != nil {
		t.Fatalf("an acquisition after the session's lease was revoked: %v; want one on a new session", err)
	}
	if leaseOf(lb.Key()) == leaseOf(la.Key()) {
		t.Errorf("b's key %s is on the revoked lease", lb.Key())
	}
	_ = lb.Release(context.Background())
}
