package benchcycle

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
)

// mutexCycler is a correct lock: a sync.Mutex.
type mutexCycler struct{ mu *sync.Mutex }

func (c mutexCycler) Lock(context.Context) error   { c.mu.Lock(); return nil }
func (c mutexCycler) Unlock(context.Context) error { c.mu.Unlock(); return nil }

// openCycler is a broken lock: it lets everyone in.
type openCycler struct{}

func (openCycler) Lock(context.Context) error   { return nil }
func (openCycler) Unlock(context.Context) error { return nil }

// failingCycler fails its lock call after ok cycles, and closes failed
// then.
type failingCycler struct {
	ok     int
	failed chan struct{}
}

func (c *failingCycler) Lock(context.Context) error {
	if c.ok == 0 {
		close(c.failed)
		return errors.New("lock failed")
	}
	c.ok--
	return nil
}
func (c *failingCycler) Unlock(context.Context) error { return nil }

// waitingCycler lets its contender in only once after has closed.
type waitingCycler struct{ after <-chan struct{} }

func (c waitingCycler) Lock(context.Context) error   { <-c.after; return nil }
func (c waitingCycler) Unlock(context.Context) error { return nil }

func TestRun_MutualExclusion(t *testing.T) {
	var mu sync.Mutex
	cs := make([]Cycler, 8)
	for i := range cs {
		cs[i] = mutexCycler{&mu}
	}
	const cycles = 20000
	r, err := run(t.Context(), cs, cycles)
	if err != nil {
		t.Fatal(err)
	}
	if r.Overlaps != 0 {
		t.Errorf("%d overlaps under a sync.Mutex", r.Overlaps)
	}
	if len(r.Holds) != cycles || r.Cycles != cycles || r.Contenders != len(cs) {
		t.Fatalf("%d holds, Cycles %d, Contenders %d; want %d, %d, %d", len(r.Holds), r.Cycles, r.Contenders, cycles, cycles, len(cs))
	}
	total := 0
	for i, n := range perContender(r) {
		if n == 0 {
			t.Logf("contender %d got no hold", i) // possible, not wrong
		}
		total += n
	}
	if total != cycles {
		t.Errorf("per-contender holds add up to %d, want %d", total, cycles)
	}
	for i, h := range r.Holds {
		if h.Got.Before(h.Asked) || h.Handed.Before(h.Got) {
			t.Fatalf("hold %d out of order: %+v", i, h)
		}
		if i > 0 && h.Got.Before(r.Holds[i-1].Got) {
			t.Fatalf("holds not ordered by Got at %d", i)
		}
		if i > 0 && h.Got.Before(r.Holds[i-1].Handed) {
			t.Fatalf("hold %d began before hold %d was handed back under a sync.Mutex", i, i-1)
		}
	}
}

// TestRun_CatchesOverlap runs contenders on a lock that lets everyone in:
// with the inside mark held across the critical section, two contenders
// running at once are caught.
func TestRun_CatchesOverlap(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two contenders running in parallel")
	}
	cs := make([]Cycler, 8)
	for i := range cs {
		cs[i] = openCycler{}
	}
	r, err := run(t.Context(), cs, 200000)
	if err != nil {
		t.Fatal(err)
	}
	if r.Overlaps == 0 {
		t.Fatal("no overlap caught on a lock that lets everyone in")
	}
	t.Logf("%d overlaps in %d cycles", r.Overlaps, r.Cycles)
}

func TestRun_ErrorEndsOneContender(t *testing.T) {
	failed := make(chan struct{})
	cs := []Cycler{&failingCycler{ok: 3, failed: failed}, waitingCycler{after: failed}}
	r, err := run(t.Context(), cs, 100)
	if err == nil || err.Error() != "lock failed" {
		t.Fatalf("err = %v, want the failing contender's", err)
	}
	// The second contender starts with one cycle counted and waits for the
	// first to fail; the failed cycle is lost, the rest are the second's.
	if per := perContender(r); per[0] != 3 || per[1] != 96 {
		t.Errorf("holds per contender %v, want [3 96]", per)
	}
}

func TestBaton(t *testing.T) {
	var released int
	acquire := func(_ context.Context, name string) (*fakeLease, error) {
		if name != "bench" {
			t.Errorf("acquired %q, want bench", name)
		}
		return &fakeLease{released: &released}, nil
	}
	c := Baton(acquire)
	Warm(t, c, c)
	if released != 2 {
		t.Errorf("%d releases after two cycles", released)
	}
}

type fakeLease struct{ released *int }

func (l *fakeLease) Release(context.Context) error { *l.released++; return nil }
