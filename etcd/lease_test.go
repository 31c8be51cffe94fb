package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

func newLocker(t *testing.T, endpoint string, opts ...baton.Option) *baton.FencedLocker {
	t.Helper()
	fl, err := etcd.New(testsvc.Client(t, endpoint), append([]baton.Option{baton.WithTTL(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.Close() })
	return fl
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestLease_CutOff_StopsBeforeTakeover cuts a holder off from etcd (a proxy
// that stops forwarding) and checks that its work context is cancelled no
// later than the moment a second client acquires.
func TestLease_CutOff_StopsBeforeTakeover(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	a := newLocker(t, "http://"+proxy.Addr())
	b := newLocker(t, srv.Endpoint)

	la, err := a.Acquire(timeout(t, 10*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	var stopped time.Time
	stoppedSet := make(chan struct{})
	context.AfterFunc(la.Context(), func() { stopped = time.Now(); close(stoppedSet) })

	proxy.Block()
	cut := time.Now()
	lb, err := b.Acquire(timeout(t, 20*time.Second), "invoices")
	acquired := time.Now()
	if err != nil {
		t.Fatalf("B could not take over from a cut-off holder: %v", err)
	}
	defer lb.Release(context.Background())
	select {
	case <-stoppedSet:
	default:
		t.Fatalf("B acquired %v after the cut while A's work context was still live", acquired.Sub(cut))
	}
	if !stopped.Before(acquired) {
		t.Fatalf("A stopped at +%v, after B acquired at +%v", stopped.Sub(cut), acquired.Sub(cut))
	}
	if !errors.Is(la.Err(), baton.ErrLeaseLost) {
		t.Errorf("A's Err = %v, want ErrLeaseLost", la.Err())
	}
	if lb.Token() <= la.Token() {
		t.Errorf("B's token %d <= A's %d", lb.Token(), la.Token())
	}
	t.Logf("cut at 0; A stopped at +%v; B acquired at +%v (margin %v)", stopped.Sub(cut).Round(time.Millisecond), acquired.Sub(cut).Round(time.Millisecond), acquired.Sub(stopped).Round(time.Millisecond))
	proxy.Unblock()
}

// TestAcquire_WaiterSessionDies checks etcd issue 19597: a waiter whose
// session dies stops waiting with a lease-lost error and never reports the
// lock as acquired.
func TestAcquire_WaiterSessionDies(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	for _, how := range []string{"cut-off", "revoked"} {
		t.Run(how, func(t *testing.T) {
			proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
			holder := newLocker(t, srv.Endpoint)
			waiter := newLocker(t, "http://"+proxy.Addr())
			name := "nightly-" + how

			lh, err := holder.Acquire(timeout(t, 10*time.Second), name)
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				lw, err := waiter.Acquire(timeout(t, 30*time.Second), name)
				if err == nil {
					_ = lw.Release(context.Background())
				}
				errc <- err
			}()
			admin := testsvc.Client(t, srv.Endpoint)
			waiterKey := waitForKeys(t, admin, etcd.DefaultPrefix+name+"/", 2)[1]

			start := time.Now()
			switch how {
			case "cut-off":
				proxy.Block()
			case "revoked":
				revokeLeaseOf(t, admin, waiterKey)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, baton.ErrLeaseLost) {
					t.Fatalf("waiter returned %v, want ErrLeaseLost", err)
				}
				t.Logf("waiter gave up %v after its session died", time.Since(start).Round(time.Millisecond))
			case <-time.After(5 * time.Second):
				_ = lh.Release(context.Background())
				t.Fatalf("waiter still waiting 5s after its session died; after release it returned %v", <-errc)
			}
			proxy.Unblock()
			_ = lh.Release(context.Background())
		})
	}
}

// waitForKeys waits until at least n keys exist under prefix and returns
// them in create order.
func waitForKeys(t *testing.T, c *clientv3.Client, prefix string, n int) []string {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	for {
		g, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatalf("list %s: %v", prefix, err)
		}
		if len(g.Kvs) >= n {
			keys := make([]string, len(g.Kvs))
			for i, kv := range g.Kvs {
				keys[i] = string(kv.Key)
			}
			return keys
		}
		// Watch for the next change instead of polling blindly.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		<-c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(g.Header.Revision+1))
		cancel()
	}
}

// TestAcquire_FIFO checks that waiters get the lock in the order they
// started waiting.
func TestAcquire_FIFO(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	admin := testsvc.Client(t, srv.Endpoint)
	holder := newLocker(t, srv.Endpoint)
	lh, err := holder.Acquire(timeout(t, 10*time.Second), "fifo")
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range waiters {
		l := newLocker(t, srv.Endpoint)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Acquire(timeout(t, 30*time.Second), "fifo")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = lease.Release(context.Background())
		}()
		waitForKeys(t, admin, etcd.DefaultPrefix+"fifo/", i+2) // waiter i is queued
	}
	_ = lh.Release(context.Background())
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("acquisition order %v, want 0..%d", order, waiters-1)
		}
	}
}

// TestLease_KeyDeleted_IsLost: an operator deleting the holder's key (a
// forced release) ends the lease at once.
func TestLease_KeyDeleted_IsLost(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	l := newLocker(t, srv.Endpoint)
	lease, err := l.Acquire(timeout(t, 10*time.Second), "forced")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testsvc.Client(t, srv.Endpoint).Delete(timeout(t, 5*time.Second), lease.Key()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost 5s after its key was deleted")
	}
	if !errors.Is(lease.Err(), baton.ErrLeaseLost) || !strings.Contains(lease.Err().Error(), "deleted") {
		t.Errorf("Err = %v, want a loss saying the key was deleted", lease.Err())
	}
}

// TestRun_KeyDeletedJustBefore_Lost: a lock key deleted by someone else
// just before fn returns, before the hold's watcher can say so, is found
// by the release: Run's error matches ErrLeaseLost, since fn's work may
// have overlapped the next holder's.
func TestRun_KeyDeletedJustBefore_Lost(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	l := newLocker(t, srv.Endpoint)
	admin := testsvc.Client(t, srv.Endpoint)
	for range 5 {
		err := l.Run(timeout(t, 10*time.Second), "forced", nil, func(ctx context.Context, lease *baton.FencedLease) error {
			_, err := admin.Delete(ctx, lease.Key())
			return err
		})
		if !errors.Is(err, baton.ErrLeaseLost) {
			t.Fatalf("Run whose lock key was deleted under it = %v, want ErrLeaseLost", err)
		}
	}
}

// TestLease_ManyLocksOneSession: one Locker holds many locks on one etcd
// lease, and a renewal keeps them all.
func TestLease_ManyLocksOneSession(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	l := newLocker(t, srv.Endpoint)
	admin := testsvc.Client(t, srv.Endpoint)
	leases := map[int64]bool{}
	for _, name := range []string{"a", "b", "c"} {
		lease, err := l.Acquire(timeout(t, 10*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := admin.Get(timeout(t, 5*time.Second), lease.Key())
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("get %s: %v", lease.Key(), err)
		}
		leases[g.Kvs[0].Lease] = true
		if !strings.Contains(string(g.Kvs[0].Value), `"holder":"`+l.Locker().Config().Holder+`"`) {
			t.Errorf("key value %q, want the holder identity %q in it", g.Kvs[0].Value, l.Locker().Config().Holder)
		}
	}
	if len(leases) != 1 {
		t.Fatalf("3 locks on %d etcd leases, want 1", len(leases))
	}
}

func TestNew_TTLBelowServerMinimum(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	l := newLocker(t, srv.Endpoint, baton.WithTTL(time.Second))
	_, err := l.TryAcquire(timeout(t, 10*time.Second), "x")
	if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "at least 2s") {
		t.Fatalf("TTL 1s on a server whose minimum is 2s: err = %v, want ErrInvalidOption naming the minimum", err)
	}
}

func TestNew_TTLNotWholeSeconds(t *testing.T) {
	_, err := etcd.New(&clientv3.Client{}, baton.WithTTL(1500*time.Millisecond))
	if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "whole seconds") {
		t.Fatalf("err = %v, want ErrInvalidOption about whole seconds", err)
	}
}

// TestNew_TTLTooLong: etcd grants leases up to 9e9s; a TTL a second longer
// is an option error (the CLI's exit 2), not the server's "too large lease
// TTL" at the first acquisition, which read as the service unreachable
// (exit 69); the longest one is not.
func TestNew_TTLTooLong(t *testing.T) {
	const longest = 9_000_000_000 * time.Second // etcd's MaxLeaseTTL
	// New sends nothing: a client of no server will do.
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		ttl     time.Duration
		refused bool
	}{
		{longest + time.Second, true},
		{2562047 * time.Hour, true},
		{longest, false},
	} {
		fl, err := etcd.New(c, baton.WithTTL(tc.ttl))
		if err == nil {
			_ = fl.Close()
		}
		refused := errors.Is(err, baton.ErrInvalidOption) && strings.Contains(err.Error(), "longer than etcd grants")
		if refused != tc.refused {
			t.Errorf("TTL %v: err = %v; want refused as longer than etcd grants: %v", tc.ttl, err, tc.refused)
		}
	}
}

// TestDial_Unreachable: a Dial to endpoints that all refuse the connection
// fails at once, saying so, and does not wait out the request timeout
// (here a minute, which the bound below is far from) for a server that is
// not there.
func TestDial_Unreachable(t *testing.T) {
	ports := []int{testsvc.ClosedPort(t), testsvc.ClosedPort(t)} // refuse connections until the test ends
	start := time.Now()
	_, err := etcd.Dial(context.Background(), []string{"127.0.0.1:" + itoa(ports[0]), "127.0.0.1:" + itoa(ports[1])}, baton.WithRequestTimeout(time.Minute))
	if !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("Dial to closed ports: err = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Dial took %v to fail on refused connections, as if it waited for the 1m request timeout", d)
	}
	for _, want := range []string{"127.0.0.1:" + itoa(ports[0]), "cannot reach any of the 2 endpoints (one of them: dial tcp 127.0.0.1:", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if st, ok := status.FromError(err); !ok || st.Code() != codes.Unavailable {
		t.Errorf("error %q does not wrap gRPC's Unavailable", err)
	}

	// With credentials, which the client sends before its first read.
	u, err := url.Parse("etcd://app:s3cret@127.0.0.1:" + itoa(ports[0]) + "?request-timeout=1m")
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = etcd.Open(context.Background(), u)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach the server: dial tcp 127.0.0.1:"+itoa(ports[0])+": connect: connection refused") {
		t.Errorf("Open with credentials to a closed port: err = %v, want ErrUnavailable, cannot reach the server", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Open with credentials took %v to fail on a refused connection, as if it waited for the 1m request timeout", d)
	}
}

// TestDial_Silent: an endpoint that takes the connection and never answers
// is waited for until the request timeout, and said to have given no
// answer; with credentials too, once, not a second time to authenticate.
func TestDial_Silent(t *testing.T) {
	addr := testsvc.Listen(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }) // until the client closes it
	start := time.Now()
	_, err := etcd.Dial(context.Background(), []string{addr}, baton.WithRequestTimeout(time.Second))
	took := time.Since(start)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "no answer within 1s") {
		t.Fatalf("Dial to a silent endpoint: err = %v, want ErrUnavailable, no answer within 1s", err)
	}
	if took < time.Second {
		t.Errorf("Dial gave up after %v, before its 1s request timeout", took)
	}

	u, err := url.Parse("etcd://app:s3cret@" + addr + "?request-timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = etcd.Open(context.Background(), u)
	took = time.Since(start)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "no answer within 2s") {
		t.Fatalf("Open with credentials to a silent endpoint: err = %v, want ErrUnavailable, no answer within 2s", err)
	}
	// Under twice the timeout: not waited out again to authenticate
	// (4s); 3.5s leaves a loaded machine half a second.
	if took < 2*time.Second || took > 3500*time.Millisecond {
		t.Errorf("Open with credentials gave up after %v; want its 2s request timeout, once", took)
	}
}

// TestDial_NotEtcd: a server that answers, but not as etcd (an HTTP/2
// server that has no gRPC), is told as the read's failure, at once, not as
// a server that gave no answer.
func TestDial_NotEtcd(t *testing.T) {
	srv := &http.Server{Handler: http.NotFoundHandler(), Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-served })
	_, err = etcd.Dial(context.Background(), []string{ln.Addr().String()}, baton.WithRequestTimeout(time.Minute))
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "a read under /baton/lock/ failed") || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Dial to an HTTP server: err = %v, want ErrUnavailable, the read failed with its 404", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestTryAcquire_HeldWritesNothing: a TryAcquire that finds the lock held
// writes nothing, on the embedded server and on Debian's etcd 3.4 (the
// range compare it sends). It created its key and deleted it: a key that,
// when the holder left in between, was first in line for a moment, which
// an observer, Leader and a forced release took for the holder's. The
// first change to the lock's keys after the TryAcquire must be the
// holder's own release.
func TestTryAcquire_HeldWritesNothing(t *testing.T) {
	for _, srv := range []struct {
		name     string
		endpoint func(t *testing.T) string
	}{
		{"embedded", func(t *testing.T) string { return testsvc.StartEtcd(t).Endpoint }},
		{"etcd34", func(t *testing.T) string { return testsvc.StartEtcdBinary(t).Endpoint }},
	} {
		t.Run(srv.name, func(t *testing.T) {
			endpoint := srv.endpoint(t)
			ctx := timeout(t, 20*time.Second)
			h, err := newLocker(t, endpoint, baton.WithHolder("h")).Acquire(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			admin := testsvc.Client(t, endpoint)
			pfx := h.Key()[:strings.LastIndex(h.Key(), "/")+1]
			g, err := admin.Get(ctx, pfx, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			var nae *baton.NotAcquiredError
			if _, err := newLocker(t, endpoint, baton.WithHolder("t")).TryAcquire(ctx, "x"); !errors.As(err, &nae) || nae.Holder != "h" {
				t.Fatalf("TryAcquire of a lock h holds = %v; want not acquired, held by h", err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			wr := <-admin.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(g.Header.Revision+1))
			if err := wr.Err(); err != nil || len(wr.Events) == 0 {
				t.Fatalf("watch of %s: %v, %d events", pfx, err, len(wr.Events))
			}
			if ev := wr.Events[0]; ev.Type != clientv3.EventTypeDelete || string(ev.Kv.Key) != h.Key() {
				t.Fatalf("first change to the lock's keys after the TryAcquire: %v %s; want the holder's release, a delete of %s", ev.Type, ev.Kv.Key, h.Key())
			}
		})
	}
}

// TestAcquire_AnswerLost_KeyDeleted: when the create of a lock key is
// applied but its answer does not reach the caller (here a client
// interceptor drops it, as a cancelled context or a broken connection
// would), Acquire fails and deletes the key, instead of leaving it to hold
// the lock for as long as the session lives. Dropped once, the client's
// retry finds the key there (the test checks it did); dropped every time,
// the error comes back.
func TestAcquire_AnswerLost_KeyDeleted(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	for _, always := range []bool{false, true} {
		t.Run(fmt.Sprintf("always=%v", always), func(t *testing.T) {
			var dropping, dropped atomic.Bool
			dropping.Store(true)
			drop := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if err == nil && method == "/etcdserverpb.KV/Txn" && dropping.Load() {
					dropping.Store(always)
					dropped.Store(true)
					return status.Error(codes.Canceled, "answer dropped by the test")
				}
				return err
			}
			c := interceptedClient(t, srv.Endpoint, drop)
			l, err := etcd.New(c, baton.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })

			_, err = l.TryAcquire(timeout(t, 10*time.Second), "invoices")
			dropping.Store(false)
			if err == nil || !dropped.Load() {
				t.Fatalf("TryAcquire with its answer dropped = %v (dropped %v), want an error", err, dropped.Load())
			}
			t.Logf("TryAcquire with its answer dropped: %v", err)
			if retried := strings.Contains(err.Error(), "already exists (a retried request?)"); retried == always {
				t.Fatalf("TryAcquire with its answer dropped (always %v): %v; want the retry to find the key exactly when dropped once", always, err)
			}
			// The Locker's session lives on; its key must not.
			other := newLocker(t, srv.Endpoint)
			lease, err := other.TryAcquire(timeout(t, 10*time.Second), "invoices")
			if err != nil {
				t.Fatalf("another Locker cannot take the lock after the lost answer: %v", err)
			}
			_ = lease.Release(context.Background())
		})
	}
}

// TestAcquire_SessionEndsDuringCreate: the create of a lock key is applied
// but its answer is stuck (a partition: here a client interceptor holds
// it, and any delete, until the request's context ends), and the session
// ends meanwhile (its lease revoked). Acquire reports the session's end
// at once. It used to try deleting the key first, through the same stuck
// connection, for up to the release timeout, though the lease's end
// deletes it anyway: TestAcquire_WaiterSessionDies/cut-off failed about
// one run in ten under load when its partition came at that moment.
func TestAcquire_SessionEndsDuringCreate(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	admin := testsvc.Client(t, srv.Endpoint)
	var stall atomic.Bool
	applied := make(chan struct{}, 1)
	stuck := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if stall.Load() && (method == "/etcdserverpb.KV/Txn" || method == "/etcdserverpb.KV/DeleteRange") {
			if method == "/etcdserverpb.KV/Txn" {
				select {
				case applied <- struct{}{}:
				default:
				}
			}
			<-ctx.Done()
			return ctx.Err()
		}
		return err
	}
	c := interceptedClient(t, srv.Endpoint, stuck)
	const releaseTimeout = 5 * time.Second
	l, err := etcd.New(c, baton.WithTTL(2*time.Second), baton.WithReleaseTimeout(releaseTimeout), baton.WithRequestTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	// Start the session before anything is stuck.
	warm, err := l.TryAcquire(timeout(t, 10*time.Second), "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	stall.Store(true)
	errc := make(chan error, 1)
	go func() {
		_, err := l.Acquire(timeout(t, 30*time.Second), "job")
		errc <- err
	}()
	<-applied
	revokeLeaseOf(t, admin, waitForKeys(t, admin, etcd.DefaultPrefix+"job/", 1)[0])
	revoked := time.Now()
	select {
	case err := <-errc:
		if !errors.Is(err, baton.ErrLeaseLost) {
			t.Fatalf("Acquire returned %v, want ErrLeaseLost", err)
		}
		// The keeper learns of the revoke at its next renewal, within
		// RenewEvery (667ms); the delete would have added up to 5s.
		if d := time.Since(revoked); d > 2*time.Second {
			t.Errorf("Acquire returned %v after the revoke, want within RenewEvery", d.Round(time.Millisecond))
		}
		t.Logf("Acquire returned %v after the revoke: %v", time.Since(revoked).Round(time.Millisecond), err)
	case <-time.After(releaseTimeout + 5*time.Second):
		t.Fatal("Acquire still waiting long after its session ended")
	}
	stall.Store(false)
}

// interceptedLocker is a Locker with opts on interceptedClient, closed
// when t ends.
func interceptedLocker(t *testing.T, endpoint string, intercept grpc.UnaryClientInterceptor, opts ...baton.Option) *baton.FencedLocker {
	t.Helper()
	l, err := etcd.New(interceptedClient(t, endpoint, intercept), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// interceptedClient is an etcd client for endpoint whose unary calls go
// through intercept, closed when t ends.
func interceptedClient(t *testing.T, endpoint string, intercept grpc.UnaryClientInterceptor) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRelease_SlowCleanReleaseIsNoLoss: a release sent before the local
// deadline whose delete reaches the server only after the session's lease
// ran out there (the holder is cut off: the delete and the renewals are
// held up) finds the key gone, but the work had stopped before the
// deadline, so nothing could overlap: a release, not a loss.
func TestRelease_SlowCleanReleaseIsNoLoss(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	l := newLocker(t, "http://"+proxy.Addr(), baton.WithReleaseTimeout(20*time.Second))
	admin := testsvc.Client(t, srv.Endpoint)
	lease, err := l.Acquire(timeout(t, 10*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	proxy.Block()
	released := make(chan error, 1)
	go func() { released <- lease.Release(context.Background()) }()
	<-lease.Done() // the release has begun: the work is stopped
	// The key runs out with the session's lease on the server, after the
	// local deadline (one drift earlier).
	for {
		g, err := admin.Get(timeout(t, 5*time.Second), lease.Key())
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Kvs) == 0 {
			break
		}
		select {
		case err := <-released:
			t.Fatalf("Release returned %v while its delete was held up", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if d := lease.Deadline(); time.Now().Before(d) {
		t.Fatalf("the key is gone on the server before the local deadline %v", d)
	}
	proxy.Unblock()
	if err := <-released; err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if err := lease.Err(); !errors.Is(err, baton.ErrReleased) || errors.Is(err, baton.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrReleased: the work stopped before the deadline", err)
	}
}

// TestRelease_StaleUnnoticed_ComparesCreateRevision: a release sent before
// the hold heard of its loss (its watcher held up, here by a hook) deletes
// nothing but its own key: not the next holder's, and not a key of its
// very name written since (baton never writes one name twice, as names
// carry the session's lease, but another client may): the delete is
// compared on our key's create revision. The conformance suite's cases
// cannot reach this on etcd, whose watcher hears of a revoke at once, and
// a hold that knows it is lost sends nothing.
func TestRelease_StaleUnnoticed_ComparesCreateRevision(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	ctx := timeout(t, 60*time.Second)
	// A round counts only when A's release went out before A heard of
	// its loss some other way (its session's keepalive, every TTL/3): A's
	// TTL is a minute, so that keepalive does not come within the round,
	// however slow the machine.
	for round := range 5 {
		name := fmt.Sprintf("stale-release-%d", round)
		a := newLocker(t, srv.Endpoint, baton.WithTTL(time.Minute))
		b := newLocker(t, srv.Endpoint)
		etcd.OnWatchEvent(a.Locker(), func(ctx context.Context) { <-ctx.Done() }) // A hears of nothing until it releases
		la, err := a.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := testsvc.Client(t, srv.Endpoint).Get(ctx, la.Key())
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("get A's key: %v", err)
		}
		aValue := string(got.Kvs[0].Value)
		revokeLeaseOf(t, testsvc.Client(t, srv.Endpoint), la.Key())
		lb, err := b.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if la.Err() != nil {
			continue // heard already: its release sends nothing
		}
		// A's very name and value, written by another client on no lease:
		// only the create revision tells it from A's key.
		admin := testsvc.Client(t, srv.Endpoint)
		if _, err := admin.Put(ctx, la.Key(), aValue); err != nil {
			t.Fatal(err)
		}
		_ = la.Release(ctx)
		if g, err := admin.Get(ctx, la.Key()); err != nil || len(g.Kvs) != 1 {
			t.Fatalf("after A's stale release, the key of A's name written since: %v, %d keys; want it kept (a plain delete took it)", err, len(g.Kvs))
		}
		if !errors.Is(la.Err(), baton.ErrLeaseLost) {
			t.Errorf("A's release of a key someone else holds: Err %v, want the loss", la.Err())
		}
		c := newLocker(t, srv.Endpoint)
		if lc, err := c.TryAcquire(ctx, name); !errors.Is(err, baton.ErrNotAcquired) {
			if lc != nil {
				_ = lc.Release(ctx)
			}
			t.Fatalf("after A's stale release, TryAcquire = %v: A deleted B's key", err)
		}
		if lb.Err() != nil {
			t.Fatalf("B's lease ended after A's stale release: %v", lb.Err())
		}
		return
	}
	t.Fatal("in 5 rounds, A always heard of its loss before it released")
}

// TestRelease_Unanswered_NamesReleaseTimeout: a release the server does not
// answer gives up after the release timeout, and its message names that
// bound, not the request timeout.
func TestRelease_Unanswered_NamesReleaseTimeout(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	l := newLocker(t, "http://"+proxy.Addr(), baton.WithTTL(15*time.Second), baton.WithReleaseTimeout(time.Second), baton.WithRequestTimeout(4*time.Second))
	defer proxy.Unblock()
	batontest.ReleaseSilent(t, l.Locker(), proxy.Block)
}

// TestClose_WatchersExited: no hold's watcher outlives Close, nor runs on
// a client Close has closed; before, Close revoked the sessions, which
// ends the watchers, but did not wait for them (a hook makes them slow to
// exit).
func TestClose_WatchersExited(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	u, err := baton.ParseURL("etcd://" + strings.TrimPrefix(srv.Endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := etcd.Open(timeout(t, 10*time.Second), u, baton.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Set before the holds: each watcher reads the hook as it starts. The
	// sleep widens the window a correct Close must wait out; a channel
	// cannot stand in for it, since Close would then wait on the test.
	etcd.OnWatchExit(l, func() { time.Sleep(200 * time.Millisecond) })
	for _, name := range []string{"a", "b"} {
		if _, err := l.Acquire(timeout(t, 10*time.Second), name); err != nil {
			t.Fatal(err)
		}
	}
	watchers := etcd.Watchers(l)
	if len(watchers) != 2 {
		t.Fatalf("%d watchers, want one per hold (2)", len(watchers))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i, w := range watchers {
		select {
		case <-w:
		default:
			t.Errorf("hold %d's watcher still runs after Close returned", i)
		}
	}
}
