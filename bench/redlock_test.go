package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/benchcycle"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redlock"
)

// redsyncCycler is go-redsync/redsync with its defaults (32 tries, a
// random 50-250ms delay between them); a lock that fails after its tries
// is tried again, so the benchmark measures waiting, not giving up.
type redsyncCycler struct{ m *redsync.Mutex }

func (c *redsyncCycler) Lock(ctx context.Context) error {
	for {
		err := c.m.LockContext(ctx)
		var taken *redsync.ErrTaken
		if err == nil || !(errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken)) {
			return err
		}
	}
}
func (c *redsyncCycler) Unlock(ctx context.Context) error {
	_, err := c.m.UnlockContext(ctx)
	return err
}

// newRedlockCyclers builds n contenders of one kind on the nodes at
// addrs, each with its own clients, as n processes would have.
func newRedlockCyclers(b *testing.B, addrs []string, kind string, n int) []benchcycle.Cycler {
	b.Helper()
	out := make([]benchcycle.Cycler, n)
	for i := range out {
		cs := make([]*goredis.Client, len(addrs))
		for j, addr := range addrs {
			cs[j] = newClient(b, addr)
		}
		switch kind {
		case "baton":
			ucs := make([]goredis.UniversalClient, len(cs))
			for j, c := range cs {
				ucs[j] = c
			}
			l, err := redlock.New(ucs, baton.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			out[i] = benchcycle.Baton(l.Acquire)
		case "redsync":
			pools := make([]redsyncredis.Pool, len(cs))
			for j, c := range cs {
				pools[j] = redsyncgoredis.NewPool(c)
			}
			out[i] = &redsyncCycler{m: redsync.New(pools...).NewMutex(redlock.DefaultPrefix+"bench", redsync.WithExpiry(10*time.Second))}
		}
	}
	return out
}

// BenchmarkRedlockCycle measures one uncontended acquire+release on 5
// nodes, against go-redsync/redsync, in the same run on the same nodes.
func BenchmarkRedlockCycle(b *testing.B) {
	nodes := testsvc.StartRedisNodes(b, 5)
	for _, kind := range []string{"baton", "redsync"} {
		b.Run(kind+"/5-nodes", func(b *testing.B) {
			benchcycle.Cycle(b, newRedlockCyclers(b, testsvc.RedisAddrs(nodes), kind, 1)[0])
		})
	}
}

// BenchmarkRedlockContended has 8 contenders loop lock/unlock on one name
// on 5 nodes.
func BenchmarkRedlockContended(b *testing.B) {
	nodes := testsvc.StartRedisNodes(b, 5)
	for _, kind := range []string{"baton", "redsync"} {
		b.Run(kind+"/5-nodes/8", func(b *testing.B) {
			runContended(b, newRedlockCyclers(b, testsvc.RedisAddrs(nodes), kind, 8))
		})
	}
}

// BenchmarkRedlockContendedLatency is BenchmarkRedlockContended over a
// network, as BenchmarkRedisContendedLatency is for one node: every node
// is reached through a proxy of its own that delays every chunk by a
// one-way latency. baton's handoff is one round and the messages it
// sends (a release hands each node's key to the first waiter there, which
// holds the lock once a majority told it so); redsync's releasing client
// takes the lock back in two (release, obtain).
func BenchmarkRedlockContendedLatency(b *testing.B) {
	nodes := testsvc.StartRedisNodes(b, 5)
	for _, oneWay := range latencies {
		for _, kind := range []string{"baton", "redsync"} {
			b.Run(fmt.Sprintf("latency=%v/%s/5-nodes/8", oneWay, kind), func(b *testing.B) {
				addrs, report := delayed(b, oneWay, testsvc.RedisAddrs(nodes)...)
				runContended(b, newRedlockCyclers(b, addrs, kind, 8))
				report()
			})
		}
	}
}

// BenchmarkRedlockPaired alternates baton and go-redsync/redsync, one
// uncontended client each on the same 5 nodes, in rounds of 16 cycles
// (benchcycle.Alternate), so that a slow spell of the machine falls on
// both alike, and reports each one's cycle and baton's speed relative to
// redsync (above 1: baton is faster).
func BenchmarkRedlockPaired(b *testing.B) {
	nodes := testsvc.StartRedisNodes(b, 5)
	benchcycle.Paired(b, newRedlockCyclers(b, testsvc.RedisAddrs(nodes), "baton", 1), newRedlockCyclers(b, testsvc.RedisAddrs(nodes), "redsync", 1), 16, "baton", "redsync")
}
