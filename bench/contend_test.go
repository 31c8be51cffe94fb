package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
)

// cycler is what every contender in a benchmark does: take and give back
// the lock on one name.
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

// runCycle measures one uncontended acquire+release.
func runCycle(b *testing.B, c cycler) {
	ctx := context.Background()
	for b.Loop() {
		if err := c.lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := c.unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// holdEvent is one critical section in a contended benchmark.
type holdEvent struct {
	client             int
	asked, got, handed time.Time
}

// runContended has the contenders loop lock/unlock on one name until b.N
// holds, checking mutual exclusion, and reports as reportContention says.
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

// reportContention reports throughput, the handoff latency (a release to
// the next holder's acquisition, when the next holder is another client),
// how often the releasing client took the lock again at once, the median
// and longest wait and their ratio, and the busiest client's share of
// holds over a fair share.
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

// newClient returns a go-redis client for addr, closed when b ends, set up
// as a program using baton should set it up (context deadlines honoured).
func newClient(b *testing.B, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	return c
}
