package etcd_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// silentWatcher is a clientv3.Watcher whose watches hear nothing, as
// watches on a gRPC stream to an endpoint gone silent (a host that died,
// packets dropped with no reset): clientv3 puts every watch of a client
// with the same metadata on one stream, and TCP takes minutes to give up
// on it, while reads and keep-alives go to the other endpoints.
type silentWatcher struct{ clientv3.Watcher }

func (silentWatcher) Watch(ctx context.Context, _ string, _ ...clientv3.OpOption) clientv3.WatchChan {
	ch := make(chan clientv3.WatchResponse)
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}

// TestWait_SilentWatch_LooksEveryRenewal: a waiter whose watch of the key
// ahead of it hears nothing still takes the lock once that key is gone:
// it looks at the key every RenewEvery.
func TestWait_SilentWatch_LooksEveryRenewal(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	client := testsvc.Client(t, srv.Endpoint)
	client.Watcher = silentWatcher{client.Watcher}
	w, err := etcd.New(client, baton.WithTTL(3*time.Second), baton.WithHolder("w")) // RenewEvery 1s
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	takesOver(t, srv, w, func() {}, 10*time.Second, "watch was silent (RenewEvery 1s)")
}

// TestDial_StalledConnection_WaiterGoesOn: a waiter of a Locker from Dial
// whose connection goes silent both ways (a NAT or firewall that dropped
// its state: the proxy stalls it, while new connections flow) takes the
// lock once the holder leaves: gRPC keep-alive pings find the connection
// dead and the client makes a new one, where TCP would take minutes.
func TestDial_StalledConnection_WaiterGoesOn(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	// TTL 20s: the waiter's session outlives the stall's detection
	// (a ping after 10s without a read, unanswered for a request timeout).
	w, err := etcd.Dial(timeout(t, 10*time.Second), []string{proxy.Addr()}, baton.WithTTL(20*time.Second), baton.WithRequestTimeout(time.Second), baton.WithHolder("w"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	takesOver(t, srv, w, proxy.Stall, 20*time.Second, "connection stalled")
}

// failingTxns is a clientv3.KV whose next n transactions fail as a
// request to an endpoint that has no leader, or went away, does.
type failingTxns struct {
	clientv3.KV
	n *atomic.Int64
}

func (k failingTxns) Txn(ctx context.Context) clientv3.Txn {
	return failingTxn{k.KV.Txn(ctx), k.n}
}

type failingTxn struct {
	clientv3.Txn
	n *atomic.Int64
}

func (t failingTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { return failingTxn{t.Txn.If(cs...), t.n} }
func (t failingTxn) Then(ops ...clientv3.Op) clientv3.Txn { return failingTxn{t.Txn.Then(ops...), t.n} }
func (t failingTxn) Else(ops ...clientv3.Op) clientv3.Txn { return failingTxn{t.Txn.Else(ops...), t.n} }

func (t failingTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.n.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "injected: no answer")
	}
	return t.Txn.Commit()
}

// TestWait_FailedRead_KeepsPlace: a waiter whose look for the key ahead of
// it fails for want of an answer (three times over) looks again, keeping
// its place in line, and takes the lock once the holder leaves.
func TestWait_FailedRead_KeepsPlace(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	client := testsvc.Client(t, srv.Endpoint)
	var fail atomic.Int64
	client.KV = failingTxns{client.KV, &fail}
	w, err := etcd.New(client, baton.WithTTL(3*time.Second), baton.WithHolder("w"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	// The waiter's next looks, once the holder's key goes.
	takesOver(t, srv, w, func() { fail.Store(3) }, 10*time.Second, "looks failed three times")
	if n := fail.Load(); n >= 0 {
		t.Fatalf("%d injected failures left: the case was not tested", n+1)
	}
}

// takesOver has w wait for a lock another Locker on srv holds, calls
// before once w is queued, then releases the lock, and checks that w
// takes it within bound; what names w's plight in a failure.
func takesOver(t *testing.T, srv *testsvc.Etcd, w *baton.FencedLocker, before func(), bound time.Duration, what string) {
	t.Helper()
	holder := newLocker(t, srv.Endpoint, baton.WithHolder("h"))
	l, err := holder.Acquire(timeout(t, 10*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wl, err := w.Acquire(timeout(t, 60*time.Second), "job")
		if err == nil {
			err = wl.Release(context.Background())
		}
		got <- err
	}()
	waitForKeys(t, testsvc.Client(t, srv.Endpoint), etcd.DefaultPrefix+"job/", 2)
	before()
	if err := l.Release(timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter whose %s: %v", what, err)
		}
	case <-time.After(bound):
		t.Fatalf("the waiter whose %s did not take the free lock within %v", what, bound)
	}
}
