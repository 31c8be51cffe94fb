package etcd_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestSession_GrantInFlight: while one acquisition's lease grant waits on
// a server that does not answer, another acquisition whose ctx ends
// returns then, where it used to wait for the grant's request timeout
// behind the backend's lock; and the acquisitions that waited for the
// grant fail with it, after one request timeout, not one each in turn.
func TestSession_GrantInFlight(t *testing.T) {
	fl, results, sent := grantOnFrozenServer(t, 3)
	start := time.Now() // just after the grant was sent

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	quick := time.Now()
	_, err := fl.Acquire(ctx, "other")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("an acquisition whose ctx ended during another's grant: %v; want its deadline", err)
	}
	if waited := time.Since(quick); waited > reqTimeout/2 {
		t.Fatalf("an acquisition with a 200ms ctx returned after %v, behind another's grant", waited)
	}

	for range 3 {
		if err := <-results; !errors.Is(err, baton.ErrUnavailable) {
			t.Fatalf("an acquisition on a silent server: %v; want ErrUnavailable", err)
		}
	}
	if d := time.Since(start); d > 2*reqTimeout {
		t.Fatalf("three acquisitions waiting on one grant failed after %v; want one request timeout (%v)", d, reqTimeout)
	}
	if n := len(sent); n != 0 {
		t.Fatalf("%d more grants sent; want the waiters to share the one in flight", n)
	}
}

// TestSession_CloseDuringGrant: a backend closed while a lease grant waits
// on a server that does not answer ends the grant and returns at once,
// and the acquisition that sent it ends with ErrClosed; Close used to wait
// for the grant's request timeout behind the backend's lock. (A Locker's
// Close ends its acquisitions before it closes the backend; this is the
// backend's own Close.)
func TestSession_CloseDuringGrant(t *testing.T) {
	fl, acquired, _ := grantOnFrozenServer(t, 1)
	start := time.Now()
	if err := fl.Locker().Backend().Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > reqTimeout/2 {
		t.Fatalf("Close with a grant in flight took %v", d)
	}
	select {
	case err := <-acquired:
		if !errors.Is(err, baton.ErrClosed) {
			t.Fatalf("the acquisition whose grant Close ended: %v; want ErrClosed", err)
		}
	case <-time.After(reqTimeout / 2):
		t.Fatal("the acquisition whose grant Close ended is still waiting for the grant")
	}
}

// reqTimeout is the request timeout of grantOnFrozenServer's Locker.
const reqTimeout = 3 * time.Second

// grantOnFrozenServer starts n acquisitions on a Locker whose etcd server
// is frozen, and returns once the first lease grant was sent: the Locker,
// the acquisitions' results, and a channel that receives as any further
// grant is sent.
func grantOnFrozenServer(t *testing.T, n int) (*baton.FencedLocker, <-chan error, <-chan struct{}) {
	t.Helper()
	srv := testsvc.StartEtcdBinary(t)
	fl := newLocker(t, srv.Endpoint, baton.WithRequestTimeout(reqTimeout))
	sent := make(chan struct{}, 8)
	etcd.OnGrantSent(fl.Locker(), func() { sent <- struct{}{} })
	srv.Pause(t)
	t.Cleanup(srv.Resume)
	results := make(chan error, n)
	for range n {
		go func() {
			_, err := fl.Acquire(timeout(t, 30*time.Second), "job")
			results <- err
		}()
	}
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("no lease grant sent within 10s")
	}
	return fl, results, sent
}

// TestLostHold_DroppedWithoutRelease_Forgotten: a lease lost with its
// session (its server froze past the local deadline), which the program
// drops without a Release, is no longer kept: the backend forgets the
// hold, and with it the session (whose revoke goes out in the background;
// the test cannot tell it from the lease running out on the server). It
// kept both until Close.
func TestLostHold_DroppedWithoutRelease_Forgotten(t *testing.T) {
	srv := testsvc.StartEtcdBinary(t)
	fl := newLocker(t, srv.Endpoint, baton.WithTTL(2*time.Second), baton.WithRequestTimeout(reqTimeout))
	lease, err := fl.Acquire(timeout(t, 10*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	t.Cleanup(srv.Resume)
	lostThenForgotten(t, fl, lease, "its frozen server")
}

// lostThenForgotten waits for lease to be lost (to why) and, the lease
// dropped without a Release, for fl's backend to forget its hold and
// session.
func lostThenForgotten(t *testing.T, fl *baton.FencedLocker, lease *baton.FencedLease, why string) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the lease outlived %s by 10s", why)
	}
	if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
		t.Fatalf("Err = %v, want a loss", lease.Err())
	}
	batontest.WaitFor(t, 5*time.Second, "the lost hold and its session forgotten", func() bool {
		return len(etcd.Watchers(fl.Locker())) == 0 && etcd.Sessions(fl.Locker()) == 0
	})
}

// TestHold_SessionEndsAsTracked_Forgotten: a session that ends after a
// new hold is tracked and before it follows the session's end (here its
// lease is revoked at that point, through a hook, and the hook waits
// until the session's renewal has found it gone) must not leave the hold
// tracked once the caller drops the lost lease without Release: the hold
// follows the session's end only once tracked, and that end, found at
// once, drops it. Followed first, the end dropped a hold not yet tracked,
// which tracking then kept until Close.
func TestHold_SessionEndsAsTracked_Forgotten(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	fl := newLocker(t, srv.Endpoint)
	admin := testsvc.Client(t, srv.Endpoint)
	var once sync.Once
	etcd.OnHoldTracked(fl.Locker(), func(key string, sessionDone <-chan struct{}) {
		once.Do(func() {
			revokeLeaseOf(t, admin, key)
			select {
			case <-sessionDone:
			case <-time.After(10 * time.Second):
				t.Error("the session did not end within 10s of its lease's revoke")
			}
		})
	})
	lease, err := fl.Acquire(timeout(t, 10*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	lostThenForgotten(t, fl, lease, "its session")
}
