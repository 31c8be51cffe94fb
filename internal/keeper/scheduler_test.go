package keeper

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton"
)

// TestScheduler_KeepersShareOneTimer: Keepers started on one Scheduler at
// different times, with different intervals, each renew on their own
// schedule; a later Keeper with a shorter interval is called before the
// tick the timer was armed for; a stopped Keeper is never called again,
// while the others go on.
func TestScheduler_KeepersShareOneTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewScheduler()
		slow, err := baton.NewConfig(baton.WithTTL(30*time.Second), baton.WithDrift(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		fast := config(t) // renews every second
		start := time.Now()
		var a, b, c recorder
		ka := s.Start(start, slow, a.renew) // armed for 10s
		defer ka.Stop(baton.ErrReleased)
		time.Sleep(500 * time.Millisecond)
		kb := s.Start(time.Now(), fast, b.renew) // due at 1.5s, before 10s
		defer kb.Stop(baton.ErrReleased)
		kc := s.Start(time.Now(), fast, c.renew)

		time.Sleep(3 * time.Second) // at 3.5s: b and c renewed at 1.5s, 2.5s, 3.5s
		synctest.Wait()
		kc.Stop(baton.ErrReleased)
		stopped := c.count()
		time.Sleep(7 * time.Second) // at 10.5s
		synctest.Wait()

		if n := a.count(); n != 1 || !a.calls[0].Equal(start.Add(10*time.Second)) {
			t.Errorf("slow keeper renewed at %v, want once, at 10s", offsets(start, a.calls))
		}
		if n := b.count(); n != 10 {
			t.Errorf("fast keeper renewed %d times by 10.5s (at %v), want 10", n, offsets(start, b.calls))
		}
		for i, at := range b.calls {
			if want := start.Add(1500*time.Millisecond + time.Duration(i)*time.Second); !at.Equal(want) {
				t.Errorf("fast keeper's renewal %d at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
		if stopped != 3 || c.count() != stopped {
			t.Errorf("stopped keeper renewed %d times before its stop at 3.5s and %d after, want 3 and 0", stopped, c.count()-stopped)
		}
	})
}

// TestScheduler_EmptyQueueLeavesNothingRunning: once every Keeper stopped,
// the Scheduler's timer fires at most once more and calls nothing; a
// Keeper started afterwards is served.
func TestScheduler_EmptyQueueLeavesNothingRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewScheduler()
		cfg := config(t)
		var r recorder
		k := s.Start(time.Now(), cfg, r.renew)
		k.Stop(baton.ErrReleased)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := r.count(); n != 0 {
			t.Fatalf("a stopped keeper was called %d times", n)
		}
		start := time.Now()
		k = s.Start(start, cfg, r.renew)
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		k.Stop(baton.ErrReleased)
		if n := r.count(); n != 1 || !r.calls[0].Equal(start.Add(time.Second)) {
			t.Fatalf("keeper started on an idle scheduler renewed at %v, want once, at 1s", offsets(start, r.calls))
		}
	})
}

func offsets(start time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}
