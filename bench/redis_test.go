package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/benchcycle"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
	goredis "github.com/redis/go-redis/v9"
)

// redislockCycler is bsm/redislock with the linear back-off its README
// shows for waiting (10ms).
type redislockCycler struct {
	c    *redislock.Client
	held *redislock.Lock
}

func (c *redislockCycler) Lock(ctx context.Context) (err error) {
	c.held, err = c.c.Obtain(ctx, redis.DefaultPrefix+"bench", 10*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
	return err
}
func (c *redislockCycler) Unlock(ctx context.Context) error { return c.held.Release(ctx) }

// newRedisCyclers builds n contenders of one kind on one Redis server,
// each with its own client, as n processes would have.
func newRedisCyclers(b *testing.B, addr, kind string, n int) []benchcycle.Cycler {
	b.Helper()
	out := make([]benchcycle.Cycler, n)
	for i := range out {
		c := newClient(b, addr)
		switch kind {
		case "baton":
			l, err := redis.New(c, baton.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			out[i] = benchcycle.Baton(l.Acquire)
		case "redislock":
			out[i] = &redislockCycler{c: redislock.New(c)}
		case "guide":
			out[i] = &guideCycler{c: c}
		}
	}
	return out
}

// BenchmarkRedisCycle measures one uncontended acquire+release against
// bsm/redislock, in the same run on the same server.
func BenchmarkRedisCycle(b *testing.B) {
	srv := testsvc.StartRedis(b)
	for _, kind := range []string{"baton", "redislock"} {
		b.Run(kind, func(b *testing.B) {
			benchcycle.Cycle(b, newRedisCyclers(b, srv.Addr, kind, 1)[0])
		})
	}
}

// BenchmarkRedisContended has 8 contenders loop lock/unlock on one key.
func BenchmarkRedisContended(b *testing.B) {
	srv := testsvc.StartRedis(b)
	for _, kind := range []string{"baton", "redislock"} {
		b.Run(kind+"/8", func(b *testing.B) {
			runContended(b, newRedisCyclers(b, srv.Addr, kind, 8))
		})
	}
}

// latencies are the one-way latencies the Latency benchmarks run at: a
// millisecond and more. The Go runtime's timers step in milliseconds while
// the process idles, so below that the delay given depends on how busy
// the process is, and two peers whose traffic differs would see different
// networks (asked for 100µs, baton's Redlock got 0.43ms and redsync's
// 0.66ms).
var latencies = []time.Duration{time.Millisecond, 2 * time.Millisecond}

// BenchmarkRedisContendedLatency is BenchmarkRedisContended over a
// network: the clients reach the server through a proxy that delays every
// chunk, both ways, by a one-way latency; each sub-benchmark reports the
// mean delay the proxy gave (see delayed). On loopback the eight clients
// and the server share the machine's two cores, and the throughput is the
// CPU's; over a network it is the round trips'. baton hands the lock over
// in about one round trip per hold (the release reaches the server, which
// tells the next waiter), where redislock's releasing client takes it
// back in two (release, obtain).
func BenchmarkRedisContendedLatency(b *testing.B) {
	srv := testsvc.StartRedis(b)
	for _, oneWay := range latencies {
		for _, kind := range []string{"baton", "redislock"} {
			b.Run(fmt.Sprintf("latency=%v/%s/8", oneWay, kind), func(b *testing.B) {
				addrs, report := delayed(b, oneWay, srv.Addr)
				runContended(b, newRedisCyclers(b, addrs[0], kind, 8))
				report()
			})
		}
	}
}

// BenchmarkRedisPaired alternates baton and bsm/redislock, one uncontended
// client each on one server, in rounds of 16 cycles (benchcycle.Alternate),
// so that a slow spell of the machine falls on both alike, and reports
// each one's cycle and baton's speed relative to redislock (above 1: baton
// is faster). Only the uncontended cycle is paired: with contenders,
// redislock's 10ms back-off at every round's edge would cap its figure.
func BenchmarkRedisPaired(b *testing.B) {
	srv := testsvc.StartRedis(b)
	benchcycle.Paired(b, newRedisCyclers(b, srv.Addr, "baton", 1), newRedisCyclers(b, srv.Addr, "redislock", 1), 16, "baton", "redislock")
}

// BenchmarkRedisPairedLatency is BenchmarkRedisPaired over a network: both
// clients reach the server through a proxy that delays every chunk, both
// ways, by a one-way latency (see delayed). On loopback a cycle's time is
// mostly the CPU's (the client's and the server's, on two cores); here it
// is its round trips', and both locks take two per cycle (SET NX, then a
// compare-and-delete), the floor: the ratio shows what the lease's work
// costs once a round trip is no longer free.
func BenchmarkRedisPairedLatency(b *testing.B) {
	srv := testsvc.StartRedis(b)
	for _, oneWay := range latencies {
		b.Run(fmt.Sprintf("latency=%v", oneWay), func(b *testing.B) {
			addrs, report := delayed(b, oneWay, srv.Addr, srv.Addr)
			benchcycle.Paired(b, newRedisCyclers(b, addrs[0], "baton", 1), newRedisCyclers(b, addrs[1], "redislock", 1), 16, "baton", "redislock")
			report()
		})
	}
}

// guideRelease is the guide's compare-and-delete.
var guideRelease = goredis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)

// guideCycler is the guide's lock and nothing more: SET key value NX PX
// ttl, with a random value, and the guide's compare-and-delete. It keeps
// no lease: no renewal, no local deadline, no work context, no wait queue,
// no observers. No program should use it; it is the floor of a cycle of
// two round trips on this client and server, which both redislock and
// baton are measured against in BenchmarkRedisFloor.
type guideCycler struct {
	c     *goredis.Client
	value string
}

func (g *guideCycler) Lock(ctx context.Context) error {
	g.value = rand.Text()
	ok, err := g.c.SetNX(ctx, guideKey, g.value, 10*time.Second).Result()
	if err == nil && !ok {
		err = errTaken
	}
	return err
}

func (g *guideCycler) Unlock(ctx context.Context) error {
	return guideRelease.Run(ctx, g.c, []string{guideKey}, g.value).Err()
}

// guideKey is the bare lock's key.
const guideKey = redis.DefaultPrefix + "guide"

var errTaken = errors.New("guide lock: key taken (a benchmark's cycles never contend)")

// BenchmarkRedisFloor measures the uncontended cycle's floor: the guide's
// bare lock (guideCycler) against redislock (guide/redislock: above 1, the
// bare lock is faster) and baton against the bare lock (baton/guide: what
// a lease's renewal, local deadline, work context, fair queue and
// observers cost over it), in alternating rounds as BenchmarkRedisPaired.
// All three use the same client settings and two round trips per cycle.
func BenchmarkRedisFloor(b *testing.B) {
	srv := testsvc.StartRedis(b)
	guide := newRedisCyclers(b, srv.Addr, "guide", 1)
	b.Run("guide-vs-redislock", func(b *testing.B) {
		benchcycle.Paired(b, guide, newRedisCyclers(b, srv.Addr, "redislock", 1), 16, "guide", "redislock")
	})
	b.Run("baton-vs-guide", func(b *testing.B) {
		benchcycle.Paired(b, newRedisCyclers(b, srv.Addr, "baton", 1), guide, 16, "baton", "guide")
	})
}
