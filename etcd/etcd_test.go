package etcd_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// factory builds the conformance factory for an etcd server at endpoint.
func factory(endpoint string) batontest.Factory {
	return batontest.Factory{
		TTL:               2 * time.Second,
		Fenced:            true,
		Holds:             func(l *baton.Locker) int { return len(etcd.Watchers(l)) },
		Observe:           true,
		HearsExpiryAtOnce: true,
		New: func(t testing.TB, opts ...baton.Option) (batontest.Client, error) {
			c := testsvc.Client(t, endpoint)
			fl, err := etcd.New(c, opts...)
			if err != nil {
				return batontest.Client{}, err
			}
			return batontest.Client{Locker: fl.Locker(), Crash: func() { _ = c.Close() }}, nil
		},
		Slow: func(t testing.TB, latency time.Duration, opts ...baton.Option) (batontest.Client, error) {
			u, err := url.Parse(endpoint)
			if err != nil {
				t.Fatalf("endpoint %q: %v", endpoint, err)
			}
			p := testsvc.NewDelayedProxy(t, u.Host, latency)
			u.Host = p.Addr()
			fl, err := etcd.New(testsvc.Client(t, u.String()), opts...)
			if err != nil {
				return batontest.Client{}, err
			}
			return batontest.Client{Locker: fl.Locker()}, nil
		},
		ExpireSeenByRenewal: true,
		Expire: func(t testing.TB, l *baton.Lease) {
			revokeLeaseOf(t, testsvc.Client(t, endpoint), l.Key())
		},
	}
}

// revokeLeaseOf revokes the etcd lease that key is attached to, as if it
// had expired.
func revokeLeaseOf(t testing.TB, c *clientv3.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := c.Get(ctx, key)
	if err != nil || len(g.Kvs) == 0 {
		t.Fatalf("get %s: %v (kvs %d)", key, err, len(g.Kvs))
	}
	if _, err := c.Revoke(ctx, clientv3.LeaseID(g.Kvs[0].Lease)); err != nil {
		t.Fatalf("revoke lease of %s: %v", key, err)
	}
}

func TestConformance_Embedded(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	batontest.Run(t, factory(srv.Endpoint))
}

// TestConformance_Etcd34 runs the suite against Debian's etcd 3.4 server,
// the release line the guide used.
func TestConformance_Etcd34(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	srv := testsvc.StartEtcdBinary(t)
	t.Logf("etcd server version %s", srv.Version)
	f := factory(srv.Endpoint)
	f.Rounds = 100
	batontest.Run(t, f)
}
