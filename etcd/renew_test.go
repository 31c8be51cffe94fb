package etcd_test

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestRenewal_StuckEndpoint_TriesAnother: a client of two endpoints, one
// of which stops answering (a member cut off from its leader holds a
// renewal for its own request timeout, about 7s). Each renewal is bounded
// by the request timeout, then tried again, on the client's next endpoint,
// well before the local deadline: the lease lives on. Before, a renewal
// sent to the stuck endpoint waited for it until the local deadline, and
// the lease was lost with a live member a connection away.
func TestRenewal_StuckEndpoint_TriesAnother(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + proxy.Addr(), srv.Endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	const ttl = 5 * time.Second
	var retried atomic.Int32 // renewals that failed and were tried again
	fl, err := etcd.New(client, baton.WithTTL(ttl), baton.WithRequestTimeout(700*time.Millisecond),
		baton.WithLogger(slog.New(logTap(func(r slog.Record) {
			if strings.Contains(r.Message, "lease renewal failed; retrying") {
				retried.Add(1)
			}
		}))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.Close() })
	lease, err := fl.Acquire(timeout(t, 10*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	proxy.Block()
	// Renewals every TTL/3, the client's endpoints taken in turn: in two
	// TTLs about half of six renewals go to the stuck one first. Each try
	// waits 700ms; the deadline leaves time for four.
	select {
	case <-lease.Done():
		t.Fatalf("lease lost with one of two endpoints answering: %v", lease.Err())
	case <-time.After(2 * ttl):
	}
	proxy.Unblock() // the release's own request is not tried on another endpoint
	flushLog(t, fl)
	if retried.Load() == 0 {
		t.Fatal("no renewal went to the stuck endpoint: the test tried nothing")
	}
	if err := lease.Release(timeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
