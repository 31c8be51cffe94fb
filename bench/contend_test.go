package bench

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/benchcycle"
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
