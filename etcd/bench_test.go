package etcd_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// locker is what both contenders in a benchmark do: take and give back a
// lock on one name.
type cycler interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

type batonCycler struct {
	l     *baton.FencedLocker
	lease *baton.FencedLease
}

func (c *batonCycler) lock(ctx context.Context) (err error) {
	c.lease, err = c.l.Acquire(ctx, "bench")
	return err
}
func (c *batonCycler) unlock(ctx context.Context) error { return c.lease.Release(ctx) }

type mutexCycler struct{ m *concurrency.Mutex }

func (c *mutexCycler) lock(ctx context.Context) error   { return c.m.Lock(ctx) }
func (c *mutexCycler) unlock(ctx context.Context) error { return c.m.Unlock(ctx) }

// newCyclers builds n contenders of one kind, each with its own client and
// session, as n processes would have.
func newCyclers(b *testing.B, endpoint, kind string, n int) []cycler {
	b.Helper()
	out := make([]cycler, n)
	for i := range out {
		c := testsvc.Client(b, endpoint)
		switch kind {
		case "baton":
			fl, err := etcd.New(c, baton.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = fl.Close() })
			out[i] = &batonCycler{l: fl}
		case "concurrency.Mutex":
			s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			out[i] = &mutexCycler{m: concurrency.NewMutex(s, etcd.DefaultPrefix+"bench")}
		}
	}
	return out
}

// BenchmarkCycle measures one uncontended acquire+release, against
// concurrency.Mutex with a reused session, in the same run.
func BenchmarkCycle(b *testing.B) {
	srv := testsvc.StartEtcd(b)
	for _, kind := range []string{"baton", "concurrency.Mutex"} {
		b.Run(kind, func(b *testing.B) {
			c := newCyclers(b, srv.Endpoint, kind, 1)[0]
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

// BenchmarkContended has 8 contenders loop lock/unlock on one name and
// reports lock cycles per second, checking mutual exclusion as it goes.
func BenchmarkContended(b *testing.B) {
	srv := testsvc.StartEtcd(b)
	const contenders = 8
	for _, kind := range []string{"baton", "concurrency.Mutex"} {
		b.Run(fmt.Sprintf("%s/%d", kind, contenders), func(b *testing.B) {
			cs := newCyclers(b, srv.Endpoint, kind, contenders)
			ctx := context.Background()
			var left atomic.Int64
			left.Store(int64(b.N))
			var inside, overlaps atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						if err := c.lock(ctx); err != nil {
							b.Error(err)
							return
						}
						if inside.Add(1) != 1 {
							overlaps.Add(1)
						}
						inside.Add(-1)
						if err := c.unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
			if n := overlaps.Load(); n != 0 {
				b.Fatalf("mutual exclusion broken %d times", n)
			}
		})
	}
}
