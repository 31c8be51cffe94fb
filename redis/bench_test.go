package redis_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
)

// cycler is what every contender in a benchmark does: take and give back
// the lock on one key.
type cycler interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

type batonCycler struct {
	l     *baton.Locker
	lease *baton.Lease
}

func (c *batonCycler) lock(ctx context.Context) (err error) {
	c.lease, err = c.l.Acquire(ctx, "bench")
	return err
}
func (c *batonCycler) unlock(ctx context.Context) error { return c.lease.Release(ctx) }

// redislockCycler is bsm/redislock with the linear back-off its README
// shows for waiting (10ms).
type redislockCycler struct {
	c    *redislock.Client
	held *redislock.Lock
}

func (c *redislockCycler) lock(ctx context.Context) (err error) {
	c.held, err = c.c.Obtain(ctx, redis.DefaultPrefix+"bench", 10*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
	return err
}
func (c *redislockCycler) unlock(ctx context.Context) error { return c.held.Release(ctx) }

// newCyclers builds n contenders of one kind, each with its own client, as
// n processes would have.
func newCyclers(b *testing.B, addr, kind string, n int) []cycler {
	b.Helper()
	out := make([]cycler, n)
	for i := range out {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { _ = c.Close() })
		switch kind {
		case "baton":
			l, err := redis.New(c, baton.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			out[i] = &batonCycler{l: l}
		case "redislock":
			out[i] = &redislockCycler{c: redislock.New(c)}
		}
	}
	return out
}

// BenchmarkCycle measures one uncontended acquire+release against
// bsm/redislock, in the same run on the same server.
func BenchmarkCycle(b *testing.B) {
	srv := testsvc.StartRedis(b)
	for _, kind := range []string{"baton", "redislock"} {
		b.Run(kind, func(b *testing.B) {
			c := newCyclers(b, srv.Addr, kind, 1)[0]
			ctx := context.Background()
			for b.Loop() {
				if err := c.lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := c.unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkContended has 8 contenders loop lock/unlock on one key. It
// reports throughput, the handoff latency (a release to the next holder's
// acquisition, when the next holder is another client), how often the
// releasing client took the lock again at once, the median and longest
// wait for the lock and their ratio, and the busiest client's share of
// holds over a fair share; and checks mutual exclusion as it goes.
func BenchmarkContended(b *testing.B) {
	srv := testsvc.StartRedis(b)
	for _, kind := range []string{"baton", "redislock"} {
		b.Run(kind+"/8", func(b *testing.B) {
			runContended(b, newCyclers(b, srv.Addr, kind, 8))
		})
	}
}

// holdEvent is one critical section in a contended benchmark.
type holdEvent struct {
	client             int
	asked, got, handed time.Time
}

func runContended(b *testing.B, cs []cycler) {
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(b.N))
	var inside, overlaps atomic.Int64
	var mu sync.Mutex
	var events []holdEvent
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i, c := range cs {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				asked := time.Now()
				if err := c.lock(ctx); err != nil {
					b.Error(err)
					return
				}
				got := time.Now()
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				handed := time.Now()
				if err := c.unlock(ctx); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				events = append(events, holdEvent{client: i, asked: asked, got: got, handed: handed})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := overlaps.Load(); n != 0 {
		b.Fatalf("mutual exclusion broken %d times", n)
	}
	reportContention(b, events, len(cs), elapsed)
}

func reportContention(b *testing.B, events []holdEvent, clients int, elapsed time.Duration) {
	b.ReportMetric(float64(len(events))/elapsed.Seconds(), "holds/s")
	if len(events) < 2*clients {
		return
	}
	slices.SortFunc(events, func(x, y holdEvent) int { return x.got.Compare(y.got) })
	var handoffs, waits []time.Duration
	same := 0
	per := make([]int, clients)
	for i, e := range events {
		per[e.client]++
		waits = append(waits, e.got.Sub(e.asked))
		if i == 0 {
			continue
		}
		prev := events[i-1]
		if e.client == prev.client {
			same++
		} else {
			handoffs = append(handoffs, e.got.Sub(prev.handed))
		}
	}
	slices.Sort(waits)
	slices.Sort(handoffs)
	med := waits[len(waits)/2]
	longest := waits[len(waits)-1]
	b.ReportMetric(float64(same)/float64(len(events)-1)*100, "%same-client")
	if len(handoffs) > 0 {
		b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "µs-handoff-p50")
	}
	b.ReportMetric(float64(med.Microseconds()), "µs-wait-p50")
	b.ReportMetric(float64(longest.Microseconds())/1000, "ms-wait-max")
	b.ReportMetric(float64(longest)/float64(max(med, time.Microsecond)), "wait-max/p50")
	fair := float64(len(events)) / float64(clients)
	b.ReportMetric(float64(slices.Max(per))/fair, "max-share/fair")
}
