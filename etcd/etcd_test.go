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
		// Each client goes through a proxy of its own, which its Crash
		// blocks: a cut cable, so that its keep-alives go unanswered (not
		// refused at once, as by a closed client) and its leases end at
		// their local deadline, as batontest.Client says.
		New: func(t testing.TB, opts ...baton.Option) (batontest.Client, error) {
			p := proxy(t, endpoint, 0)
			fl, err := etcd.New(testsvc.Client(t, p.endpoint), opts...)
			if err != nil {
				return batontest.Client{}, err
			}
			return batontest.Client{Locker: fl.Locker(), Crash: func() {
				p.Block()
				t.Cleanup(p.Unblock) // before the Locker's Close: cleanups run last first
			}}, nil
		},
		Slow: func(t testing.TB, latency time.Duration, opts ...baton.Option) (batontest.Client, error) {
			fl, err := etcd.New(testsvc.Client(t, proxy(t, endpoint, latency).endpoint), opts...)
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

// endpointProxy is a proxy to an etcd server, and its endpoint.
type endpointProxy struct {
	*testsvc.Proxy
	endpoint string
}

// proxy returns a proxy to the server at endpoint, each way latency late,
// closed when t ends.
func proxy(t testing.TB, endpoint string, latency time.Duration) endpointProxy {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	p := testsvc.NewDelayedProxy(t, u.Host, latency)
	u.Host = p.Addr()
	return endpointProxy{p, u.String()}
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
	// The guide's 500 rounds of the race, as on the embedded server: they
	// took 6.1 to 8.6s here with -race on a loaded 2-core machine
	// (measured 2026-12-03).
	batontest.Run(t, factory(srv.Endpoint))
}
