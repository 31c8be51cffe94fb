package etcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestWait_PredecessorMadeAgain: etcd's concurrency.Mutex, which shares
// baton's key layout, keeps one key name per session, so a Mutex that
// unlocks and locks again makes its key anew, behind a baton waiter
// queued meanwhile. A waiter whose watch started after that must see its
// predecessor gone (the key now has a later create revision), not wait
// for it: the Mutex waits for the waiter, and both would wait for ever.
func TestWait_PredecessorMadeAgain(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	// W's TTL is a minute: the held watch stalls W's one connection, its
	// session's keepalives too, and at 2s the session could end before
	// the test lets the watch go.
	w := newLocker(t, "http://"+proxy.Addr(), baton.WithHolder("w"), baton.WithTTL(time.Minute))
	ctx := timeout(t, 60*time.Second)
	cli := testsvc.Client(t, srv.Endpoint)
	mu := lockedMutex(t, ctx, cli, "job")
	first, key := mu.Header().Revision, mu.Key() // Lock below writes them
	held := proxy.HoldFirst([]byte(key))         // W's watch on its predecessor, the Mutex's key
	got := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctx, "job")
		if err == nil {
			_ = l.Release(context.Background())
		}
		got <- err
	}()
	select {
	case <-held.Caught():
	case <-time.After(10 * time.Second):
		t.Fatal("W sent no watch on the Mutex's key")
	}
	if err := mu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	relocked := make(chan error, 1)
	go func() { relocked <- mu.Lock(ctx) }() // the same key name, made again behind W
	for {
		g, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Kvs) == 1 && g.Kvs[0].CreateRevision > first {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	held.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("W: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("W still waits for the Mutex's key made again behind it, and the Mutex waits for W")
	}
	if err := <-relocked; err != nil {
		t.Fatalf("the Mutex after W: %v", err)
	}
	_ = mu.Unlock(context.Background())
}

// lockedMutex takes lock name as etcdctl lock and concurrency.Mutex do,
// on a session of its own (TTL 5s) on c, closed when t ends.
func lockedMutex(t *testing.T, ctx context.Context, c *clientv3.Client, name string) *concurrency.Mutex {
	t.Helper()
	sess, err := concurrency.NewSession(c, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	mu := concurrency.NewMutex(sess, etcd.DefaultPrefix+name)
	if err := mu.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	return mu
}
