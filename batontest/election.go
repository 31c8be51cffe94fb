package batontest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// election runs three contenders for one election, crashes each leader in
// turn, and checks that a new one takes office within about one TTL with a
// higher token, and that an observer saw every term in order, including the
// empty one at the start and at the end. Each crashed leader's lease must
// have been reported lost, its local deadline passed, by the time its
// successor's Campaign returned.
func (s *suite) election(t *testing.T) {
	name := lockName(t)
	obsLocker := s.locker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms, err := obsLocker.Observe(ctx, name)
	switch {
	case err != nil && !s.f.Observe:
		t.Skipf("backend does not observe elections: %v", err)
	case err != nil:
		t.Fatalf("Observe on a backend declared to observe: %v", err)
	case !s.f.Observe:
		t.Fatal("backend not declared to observe (Factory.Observe), yet its Locker observes elections")
	}
	seen := make(chan baton.Term, 64)
	go func() {
		defer close(seen)
		for tm := range terms {
			seen <- tm
		}
	}()
	first := <-seen
	if !first.NoLeader() {
		t.Fatalf("first term %+v, want no leader yet", first)
	}

	type contender struct {
		c     Client
		id    string
		lease *baton.Lease
		tok   baton.Token
		wonAt time.Time // when its Campaign returned
	}
	won := make(chan *contender, 3)
	errc := make(chan error, 3)
	cs := make([]*contender, 3)
	for i := range cs {
		id := fmt.Sprintf("contender-%d", i)
		cs[i] = &contender{c: s.client(t, baton.WithHolder(id)), id: id}
		go func(c *contender) {
			if fl, ok := c.c.Locker.Fenced(); ok {
				l, err := fl.Campaign(ctx, name)
				if err != nil {
					errc <- err
					return
				}
				c.lease, c.tok = l.Lease(), l.Token()
			} else {
				l, err := c.c.Locker.Campaign(ctx, name)
				if err != nil {
					errc <- err
					return
				}
				c.lease = l
			}
			c.wonAt = time.Now()
			won <- c
		}(cs[i])
	}

	var order []*contender
	var crashed time.Time
	for round := range 3 {
		var leader *contender
		select {
		case leader = <-won:
			if !crashed.IsZero() {
				took := leader.wonAt.Sub(crashed)
				t.Logf("leader %d took office %v after its predecessor crashed (TTL %v)", round, took.Round(time.Millisecond), s.f.TTL)
				if took > s.f.TTL+time.Second {
					t.Errorf("takeover took %v, want within TTL + 1s = %v", took, s.f.TTL+time.Second)
				}
			}
			if prev := len(order) - 1; prev >= 0 && order[prev].c.Crash != nil {
				stoppedBefore(t, "crashed leader "+order[prev].id, order[prev].lease, leader.id+" took office", leader.wonAt, s.f.TTL)
			}
		case err := <-errc:
			t.Fatalf("round %d: campaign failed: %v", round, err)
		case <-time.After(2*s.f.TTL + 5*time.Second):
			t.Fatalf("round %d: no leader within 2 TTL + 5s", round)
		}
		order = append(order, leader)
		if s.f.Fenced && round > 0 && leader.tok <= order[round-1].tok {
			t.Errorf("leader %d token %d after %d", round, leader.tok, order[round-1].tok)
		}
		now, err := obsLocker.Leader(ctxFor(t, 10*time.Second), name)
		if err != nil {
			t.Fatalf("Leader: %v", err)
		}
		if now.Leader != leader.id || (s.f.Fenced && now.Token != leader.tok) {
			t.Errorf("Leader() = %q token %d, want %q token %d", now.Leader, now.Token, leader.id, leader.tok)
		}
		if round < 2 {
			if leader.c.Crash == nil {
				// Without a crash hook, resign instead.
				_ = leader.lease.Release(context.Background())
			} else {
				crashed = time.Now()
				leader.c.Crash()
			}
		} else {
			_ = leader.lease.Release(context.Background())
		}
	}

	// The observer saw each leader in order, then no leader. Where a leader
	// crashed, its successor takes office only once the crashed one's lease
	// has run out: a backend whose waiters find that out by looking again
	// (Redis, PostgreSQL) has a real moment with no leader between the two,
	// which an observer may report. Nowhere else may one appear.
	want := make([]string, 0, 4)
	crashedLeader := map[string]bool{}
	for i, c := range order {
		want = append(want, c.id)
		crashedLeader[c.id] = i < 2 && c.c.Crash != nil
	}
	want = append(want, "")
	var got, raw []string
	deadline := time.After(2*s.f.TTL + 10*time.Second)
	for len(got) < len(want) {
		select {
		case tm, ok := <-seen:
			if !ok {
				t.Fatalf("observation ended early; saw %q, want %q", raw, want)
			}
			raw = append(raw, tm.Leader)
			if n := len(got); n > 0 && tm.NoLeader() && crashedLeader[got[n-1]] {
				continue // between a crashed leader and its successor
			}
			got = append(got, tm.Leader)
			if !tm.NoLeader() && s.f.Fenced {
				for _, c := range order {
					if c.id == tm.Leader && c.tok != tm.Token {
						t.Errorf("observed %s with token %d, its lease has %d", c.id, tm.Token, c.tok)
					}
				}
			}
		case <-deadline:
			t.Fatalf("observed %q, want %q", raw, want)
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("observed leaders %q, want %q in that order (no leader allowed only right after a crashed one)", raw, want)
		}
	}
}

// observeEnds: closing the Locker ends its observations (the channel is
// closed, though their ctx lives on), and a closed Locker refuses to
// observe.
func (s *suite) observeEnds(t *testing.T) {
	if !s.f.Observe {
		t.Skip("backend does not observe elections")
	}
	name := lockName(t)
	l := s.steady(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms, err := l.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if tm := <-terms; !tm.NoLeader() {
		t.Fatalf("first term %+v, want no leader", tm)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Closed by the time Close returns: Close waits for the observation.
	select {
	case tm, ok := <-terms:
		if ok {
			t.Fatalf("a term after Close: %+v", tm)
		}
	default:
		t.Fatal("the observation still runs after its Locker's Close returned")
	}
	if _, err := l.Observe(ctx, name); !errors.Is(err, baton.ErrClosed) {
		t.Errorf("Observe on a closed Locker = %v, want ErrClosed", err)
	}
}
