package bench

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/benchcycle"
	"github.com/baton-go/baton/internal/testsvc"
)

// runContended has the contenders loop lock/unlock on one name until b.N
// holds, checking mutual exclusion, and reports as
// benchcycle.ReportContention says.
func runContended(b *testing.B, cs []benchcycle.Cycler) {
	b.Helper()
	benchcycle.ReportContention(b, benchcycle.Contend(b, cs))
}

// newClient returns a go-redis client for addr, closed when b ends, set up
// as a program using baton should set it up (context deadlines honoured,
// no request sent again by go-redis). The peers get the same clients; no
// request fails in a benchmark, so MaxRetries changes nothing for them.
func newClient(b *testing.B, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// delayed puts a proxy in front of each of addrs that delays every chunk,
// both ways, by oneWay (testsvc.Proxy.SetLatency). It returns the
// proxies' addresses, and report, which reports on b the mean delay they
// gave (µs-delay-mean): the Go runtime's millisecond timer steps make it
// longer than oneWay while the process idles.
func delayed(b *testing.B, oneWay time.Duration, addrs ...string) (proxied []string, report func()) {
	b.Helper()
	ps := make([]*testsvc.Proxy, len(addrs))
	proxied = make([]string, len(addrs))
	for i, a := range addrs {
		ps[i] = testsvc.NewDelayedProxy(b, a, oneWay)
		proxied[i] = ps[i].Addr()
	}
	return proxied, func() {
		var sum time.Duration
		for _, p := range ps {
			sum += p.MeanDelay()
		}
		b.ReportMetric(float64(sum/time.Duration(len(ps)))/float64(time.Microsecond), "µs-delay-mean")
	}
}
