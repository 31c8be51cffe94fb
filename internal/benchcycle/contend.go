package benchcycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Hold is one critical section: which contender (its index in the slice
// given to Run) held the lock, when it called lock, when that call returned,
// and when it called unlock.
type Hold struct {
	Contender          int
	Asked, Got, Handed time.Time
}

// Result is what one Run saw.
type Result struct {
	// Contenders is how many contenders ran; Cycles how many cycles they
	// were asked for in all.
	Contenders, Cycles int
	// Elapsed runs from before the first contender started to after the
	// last one ended.
	Elapsed time.Duration
	// Holds are the completed critical sections, ordered by Got.
	Holds []Hold
	// Overlaps counts the holds that began while another contender was
	// inside; any is a broken mutual exclusion.
	Overlaps int
}

// Contend runs Run for b.N cycles on the contenders cs, timed by b: the
// timer is reset before and stopped after, so what the caller reports
// from the Result is not timed.
//
// Before that, an untimed, unreported warm-up round has the contenders
// contend for warmCycles cycles per contender, in all (taken first come,
// first served, so a lock that lets the releasing client take it back may
// give most to one). What a contender sets up the first time it has to
// wait (a Pub/Sub subscription, a script loaded on a NOSCRIPT answer, a
// pooled connection) is paid once per Locker or client; left in the
// measured round, it made the first holds' waits 7 to 18 times the median
// (Redis, 8 contenders, in a one-off listing of the longest waits) and the
// longest-wait figure a measure of start-up. A warm-up that fails ends the
// benchmark.
func Contend(b *testing.B, cs []Cycler) Result {
	b.Helper()
	Run(b, cs, warmCycles*len(cs))
	if b.Failed() {
		b.FailNow()
	}
	b.ResetTimer()
	r := Run(b, cs, b.N)
	b.StopTimer()
	return r
}

// warmCycles is how many cycles per contender Contend's warm-up round
// runs, in all.
const warmCycles = 8

// Run has the contenders cs loop lock and unlock, each as fast as it can,
// until they have begun cycles cycles in all, and returns what they saw. A
// lock or unlock that fails is reported with tb.Error and ends that
// contender's loop; the others go on. A broken mutual exclusion fails tb
// with tb.Fatalf. Run must be called from the goroutine running tb.
func Run(tb testing.TB, cs []Cycler, cycles int) Result {
	tb.Helper()
	r, err := run(context.Background(), cs, cycles)
	if err != nil {
		tb.Error(err)
	}
	if r.Overlaps != 0 {
		tb.Fatalf("mutual exclusion broken %d times", r.Overlaps)
	}
	return r
}

// run is Run without a testing.TB: it returns the contenders' errors
// joined.
func run(ctx context.Context, cs []Cycler, cycles int) (Result, error) {
	var left atomic.Int64
	left.Store(int64(cycles))
	var inside, overlaps atomic.Int64
	holds := make([][]Hold, len(cs)) // each contender's own, merged after
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cs {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				asked := time.Now()
				if err := c.Lock(ctx); err != nil {
					errs[i] = err
					return
				}
				// Inside from here until Unlock is called: another
				// contender entering meanwhile is an overlap.
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				got := time.Now()
				handed := time.Now()
				inside.Add(-1)
				if err := c.Unlock(ctx); err != nil {
					errs[i] = err
					return
				}
				holds[i] = append(holds[i], Hold{Contender: i, Asked: asked, Got: got, Handed: handed})
			}
		})
	}
	wg.Wait()
	r := Result{
		Contenders: len(cs),
		Cycles:     cycles,
		Elapsed:    time.Since(start),
		Holds:      slices.Concat(holds...),
		Overlaps:   int(overlaps.Load()),
	}
	slices.SortFunc(r.Holds, func(x, y Hold) int { return x.Got.Compare(y.Got) })
	return r, errors.Join(errs...)
}

// Alternate has the contenders a and z run rounds of per cycles in turn,
// for as long as b.Loop says, a first in one round and z first in the
// next, and returns the time each side took in all and the cycles each
// began. Taking turns puts the machine's slow spells (a neighbour on a
// shared VM, a JIT compiling) on both sides alike, which two benchmarks
// run one after the other do not.
func Alternate(b *testing.B, a, z []Cycler, per int) (ta, tz time.Duration, cycles int) {
	b.Helper()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			ta += Run(b, a, per).Elapsed
			tz += Run(b, z, per).Elapsed
		} else {
			tz += Run(b, z, per).Elapsed
			ta += Run(b, a, per).Elapsed
		}
		cycles += per
	}
	return ta, tz, cycles
}

// Paired warms up every contender of a and z, runs Alternate on them, and
// reports each side's time per cycle (aName-us/cycle, zName-us/cycle) and
// a's speed relative to z (speedup; above 1: a is faster).
func Paired(b *testing.B, a, z []Cycler, per int, aName, zName string) {
	b.Helper()
	Warm(b, slices.Concat(a, z)...)
	ta, tz, n := Alternate(b, a, z, per)
	b.ReportMetric(float64(ta.Microseconds())/float64(n), aName+"-us/cycle")
	b.ReportMetric(float64(tz.Microseconds())/float64(n), zName+"-us/cycle")
	b.ReportMetric(float64(tz)/float64(ta), "speedup")
}
