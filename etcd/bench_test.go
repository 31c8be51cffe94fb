package etcd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/benchcycle"
	"github.com/baton-go/baton/internal/testsvc"
)

type mutexCycler struct{ m *concurrency.Mutex }

func (c *mutexCycler) Lock(ctx context.Context) error   { return c.m.Lock(ctx) }
func (c *mutexCycler) Unlock(ctx context.Context) error { return c.m.Unlock(ctx) }

// newCyclers builds n contenders of one kind, each with its own client and
// session, as n processes would have.
func newCyclers(b *testing.B, endpoint, kind string, n int) []benchcycle.Cycler {
	b.Helper()
	out := make([]benchcycle.Cycler, n)
	for i := range out {
		c := testsvc.Client(b, endpoint)
		switch kind {
		case "baton":
			fl, err := etcd.New(c, baton.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = fl.Close() })
			out[i] = benchcycle.Baton(fl.Acquire)
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
			benchcycle.Cycle(b, newCyclers(b, srv.Endpoint, kind, 1)[0])
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
			r := benchcycle.Contend(b, newCyclers(b, srv.Endpoint, kind, contenders))
			benchcycle.ReportCycles(b, r)
		})
	}
}
