package batontest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// election runs three contenders for one election, crashes the first two
// leaders in turn, and checks that a new one takes office within TTL +
// takeoverSlack of the crash with a higher token, and that an
// observer saw every term in order, including the empty one at the start
// and at the end. Each crashed leader's lease must have been reported
// lost, its local deadline passed, by the time its successor's Campaign
// returned.
//
// Two contenders, at the suite's TTL, race for the first term; the loser
// waits and takes the second. The third, which is never crashed, takes
// steadyTTL and campaigns only once the second leads, so that it is the
// last to lead whatever order the service keeps among its waiters, and a
// stall of the machine cannot end its lease while it waits or leads.
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
	select {
	case first, ok := <-seen:
		if !ok {
			t.Fatal("observation ended before its first term")
		}
		if !first.NoLeader() {
			t.Fatalf("first term %+v, want no leader yet", first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no first term within 10s of Observe")
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
	campaign := func(c *contender) {
		if fl, ok := c.c.Locker.Fenced(); ok {
			l, err := fl.Campaign(ctx, name)
			if err != nil {
				errc <- fmt.Errorf("%s: %w", c.id, err)
				return
			}
			c.lease, c.tok = l.Lease(), l.Token()
		} else {
			l, err := c.c.Locker.Campaign(ctx, name)
			if err != nil {
				errc <- fmt.Errorf("%s: %w", c.id, err)
				return
			}
			c.lease = l
		}
		c.wonAt = time.Now()
		won <- c
	}
	for i := range 2 {
		id := fmt.Sprintf("contender-%d", i)
		go campaign(&contender{c: s.client(t, baton.WithHolder(id)), id: id})
	}
	last := &contender{c: s.client(t, baton.WithTTL(steadyTTL), baton.WithHolder("contender-2")), id: "contender-2"}

	var order []*contender
	var crashed time.Time
	for round := range 3 {
		var leader *contender
		select {
		case leader = <-won:
			if prev := len(order) - 1; prev >= 0 && order[prev].c.Crash != nil {
				// As in the crash case: see takeoverSlack.
				took := leader.wonAt.Sub(crashed)
				t.Logf("leader %d took office %v after its predecessor crashed, %v after the crashed lease's deadline (TTL %v)", round, took.Round(time.Millisecond), leader.wonAt.Sub(order[prev].lease.Deadline()).Round(time.Millisecond), s.f.TTL)
				if took > s.f.TTL+takeoverSlack {
					t.Errorf("leader %d took office %v after its predecessor crashed, want within TTL + %v = %v", round, took.Round(time.Millisecond), takeoverSlack, s.f.TTL+takeoverSlack)
				}
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
		if round == 1 {
			// The third contender queues behind this leader, alone.
			go campaign(last)
			waitQueued(t, obsLocker, name, 1, nil)
		}
		if round < 2 {
			if leader.c.Crash == nil {
				// Without a crash hook, resign instead.
				_ = leader.lease.Release(context.Background())
			} else {
				leader.c.Crash()
				crashed = time.Now() // as in the crash case
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
	select {
	case tm, ok := <-terms:
		if !ok {
			t.Fatal("observation ended before its first term")
		}
		if !tm.NoLeader() {
			t.Fatalf("first term %+v, want no leader", tm)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no first term within 10s of Observe")
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
