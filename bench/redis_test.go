package bench

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/benchcycle"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
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
