package batontest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// fenceAhead: a fence that refuses a lease's token while the lock service
// still names that lease the holder got its token from somewhere else,
// and FencedLease.Raise says so (Ahead); a fence that refuses it because a
// later holder raised it does not (the forced-out holder's Raise).
func (s *suite) fenceAhead(t *testing.T) {
	if !s.f.Fenced {
		t.Skip("backend gives no tokens")
	}
	name := lockName(t)
	// A must still be the holder the lock service names when the fence's
	// answer comes: a lease at the suite's TTL, lost to a stall of the
	// machine, would turn Ahead off and blame the backend. Steady.
	fa, _ := s.steady(t).Fenced()
	a, err := fa.Acquire(ctxFor(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	// A fence raised by another lock service, whose tokens run ahead.
	elsewhere := &memFence{newest: map[string]baton.Token{name: a.Token() + 1000}}
	var stale *baton.StaleTokenError
	if err := a.Raise(ctxFor(t, 10*time.Second), elsewhere); !errors.As(err, &stale) || !stale.Ahead {
		t.Fatalf("Raise on a fence ahead of the lock service: %v; want a *StaleTokenError with Ahead", err)
	}
	if err := a.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("release A: %v", err)
	}

	// A later holder of this lock service raised the fence. On a backend
	// whose holder hears of its lease's end at once, the expired holder's
	// Err already says so; on the others (PostgreSQL), the lock service's
	// answer naming b is what keeps Ahead unset. The expired holder, x,
	// has the suite's TTL: its end is the point (and the ZooKeeper Expire
	// waits out its session); b must outlive the case: steady.
	if s.f.Expire == nil {
		t.Log("backend has no Expire hook: the later holder's case is not checked")
		return
	}
	fx, _ := s.locker(t).Fenced()
	x, err := fx.Acquire(ctxFor(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	s.f.Expire(t, x.Lease())
	fb, _ := s.steady(t).Fenced()
	b, err := fb.Acquire(ctxFor(t, 10*s.f.TTL), name)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	ours := &memFence{newest: map[string]baton.Token{}}
	if err := b.Raise(ctxFor(t, 10*time.Second), ours); err != nil {
		t.Fatalf("the later holder's Raise: %v", err)
	}
	stale = nil
	if err := x.Raise(ctxFor(t, 10*time.Second), ours); !errors.As(err, &stale) || stale.Ahead {
		t.Fatalf("the expired holder's Raise after a later holder's: %v; want a *StaleTokenError without Ahead", err)
	}
}

// memFence is the fence's rule in memory, for the cases that test what a
// lease does with its answer, not the fence.
type memFence struct {
	mu     sync.Mutex
	newest map[string]baton.Token
}

func (f *memFence) Raise(_ context.Context, resource string, token baton.Token) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.newest[resource]; token < n {
		return &baton.StaleTokenError{Resource: resource, Got: token, Newest: n}
	}
	f.newest[resource] = token
	return nil
}
