package redlock_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redlock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clients returns one go-redis client per node, connected (as Open
// leaves them: the first request on a new client also dials, which a
// per-node timeout of TTL/10 may not cover), closed when tb ends.
func clients(tb testing.TB, nodes []*testsvc.Redis) []goredis.UniversalClient {
	tb.Helper()
	out := make([]goredis.UniversalClient, len(nodes))
	for i, n := range nodes {
		c := client(tb, n.Addr)
		select {
		case <-n.Exited():
		default:
			_ = c.Ping(timeout(tb, 5*time.Second)).Err()
		}
		out[i] = c
	}
	return out
}

// client returns a go-redis client for addr, closed when tb ends.
func client(tb testing.TB, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func newLocker(tb testing.TB, nodes []*testsvc.Redis, opts ...baton.Option) *baton.Locker {
	tb.Helper()
	return lockerOn(tb, clients(tb, nodes), opts...)
}

// lockerOn returns a Locker on the clients cs, one per node, closed when
// tb ends.
func lockerOn(tb testing.TB, cs []goredis.UniversalClient, opts ...baton.Option) *baton.Locker {
	tb.Helper()
	l, err := redlock.New(cs, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

func timeout(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// proxiedClients is clients, each through a proxy of its own, returned
// too: a conformance client's Crash blocks them all, a cut cable, so that
// its requests go unanswered (not refused at once, as by closed clients)
// and its leases end at their local deadline at the latest, as
// batontest.Client says.
func proxiedClients(tb testing.TB, nodes []*testsvc.Redis) ([]goredis.UniversalClient, []*testsvc.Proxy) {
	tb.Helper()
	cs := make([]goredis.UniversalClient, len(nodes))
	ps := make([]*testsvc.Proxy, len(nodes))
	for i, n := range nodes {
		ps[i] = testsvc.NewProxy(tb, n.Addr)
		c := client(tb, ps[i].Addr())
		select {
		case <-n.Exited():
		default:
			_ = c.Ping(timeout(tb, 5*time.Second)).Err() // connected, as clients leaves them
		}
		cs[i] = c
	}
	return cs, ps
}

// TestConformance runs the suite, the guide's 500-round race included, on
// five independent nodes.
func TestConformance(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 5)
	batontest.Run(t, batontest.Factory{
		TTL:   2 * time.Second,
		Holds: redlock.Holds,
		New: func(t testing.TB, opts ...baton.Option) (batontest.Client, error) {
			cs, ps := proxiedClients(t, nodes)
			l, err := redlock.New(cs, opts...)
			if err != nil {
				return batontest.Client{}, err
			}
			// No case here is about a slow node: a stall of the
			// machine past 200ms (TTL/10) must not count as one, in
			// 1,500 racing attempts. (The node timeout also bounds the
			// random pause before a waiter's next look after a failed
			// round, up to 1s here instead of 200ms: no case bounds
			// that pause.)
			redlock.SetNodeTimeout(l, time.Second)
			return batontest.Client{Locker: l, Crash: func() {
				for _, p := range ps {
					p.Block()
					t.Cleanup(p.Unblock) // before the Locker's Close: cleanups run last first
				}
			}}, nil
		},
		Slow: func(t testing.TB, latency time.Duration, opts ...baton.Option) (batontest.Client, error) {
			cs := make([]goredis.UniversalClient, len(nodes))
			for i, n := range nodes {
				p := testsvc.NewDelayedProxy(t, n.Addr, latency)
				cs[i] = client(t, p.Addr())
			}
			l, err := redlock.New(cs, opts...)
			if err != nil {
				return batontest.Client{}, err
			}
			// A node's first answer on a new connection takes three
			// round trips (HELLO, EVALSHA, EVAL after NOSCRIPT): 600ms,
			// more than TTL/10; 2s leaves a loaded machine room.
			redlock.SetNodeTimeout(l, 2*time.Second)
			return batontest.Client{Locker: l}, nil
		},
		ExpireSeenByRenewal: true,
		Expire: func(t testing.TB, l *baton.Lease) {
			for _, c := range clients(t, nodes) {
				if err := c.Del(timeout(t, 5*time.Second), l.Key()).Err(); err != nil {
					t.Fatalf("DEL %s: %v", l.Key(), err)
				}
			}
		},
	})
}
