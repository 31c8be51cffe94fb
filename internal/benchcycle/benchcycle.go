// Package benchcycle is the harness the lock benchmarks share: baton's
// backends (etcd, zk, postgres) and the bench module's peers (Redis,
// Redlock). A benchmark builds its contenders as Cyclers, one per
// simulated process, and hands them to Cycle (one uncontended lock and
// unlock per iteration) or Contend (several contenders on one lock).
//
// Contend checks mutual exclusion as it goes: each contender marks itself
// inside from the moment its lock call returns to the moment it calls
// unlock, and a contender that finds another one inside when it enters is
// counted as an overlap; any overlap fails the benchmark. The mark spans
// the whole critical section as the harness sees it, but that section is
// short (two clock reads, well under a microsecond), so two holds granted
// milliseconds apart are caught only when their sections happen to meet:
// this is a smoke check that costs the figures nothing, not a proof. The
// proofs are the conformance suite's races and the fault tests. A correct lock
// can never trip it: a holder calls unlock before the server lets the next
// one in, and the next one's lock call returns after that. Nothing is
// checked about fencing tokens here.
package benchcycle

import (
	"context"
	"testing"
)

// Cycler is what every contender in a benchmark does: take and give back
// one lock, always the same one.
type Cycler interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// Baton returns a Cycler that acquires the lock "bench" with acquire, the
// Acquire method of a *baton.Locker or *baton.FencedLocker, and releases
// the lease it got.
func Baton[L interface{ Release(context.Context) error }](acquire func(ctx context.Context, name string) (L, error)) Cycler {
	return &batonCycler[L]{acquire: acquire}
}

type batonCycler[L interface{ Release(context.Context) error }] struct {
	acquire func(ctx context.Context, name string) (L, error)
	held    L
}

func (c *batonCycler[L]) Lock(ctx context.Context) (err error) {
	c.held, err = c.acquire(ctx, "bench")
	return err
}

func (c *batonCycler[L]) Unlock(ctx context.Context) error { return c.held.Release(ctx) }

// Warm has each of cs take and give back the lock once, so that connecting
// and creating what the lock needs on the server is not timed. It fails tb
// on an error.
func Warm(tb testing.TB, cs ...Cycler) {
	tb.Helper()
	ctx := context.Background()
	for _, c := range cs {
		if err := c.Lock(ctx); err != nil {
			tb.Fatal(err)
		}
		if err := c.Unlock(ctx); err != nil {
			tb.Fatal(err)
		}
	}
}

// Cycle measures one uncontended lock and unlock of c per b.Loop
// iteration, after one untimed cycle (which dials, and loads scripts).
func Cycle(b *testing.B, c Cycler) {
	b.Helper()
	Warm(b, c)
	ctx := context.Background()
	for b.Loop() {
		if err := c.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := c.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
