package redlock

import (
	"fmt"
	"testing"

	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediskit/redistest"
)

// TestAcquireScript_RefreshFindsDeadHeadGone: on one node, a waiter that
// joins behind an entry that ran out is told it is not first (its rank
// says so); when it refreshes its place, the dead entry is dropped and it
// is told it is first, with the key's PTTL, so that it looks again at the
// key's expiry. An entry in the earlier format ("DEADLINE_MS CHANNEL") is
// dropped as well.
func TestAcquireScript_RefreshFindsDeadHeadGone(t *testing.T) {
	s := redistest.Start(t)
	k := (&backend{prefix: DefaultPrefix}).keys("job")
	s.Hold(k.lock, "holder")
	ms := s.NowMS()
	s.Plant(k.q, k.w, "dead0", 1, fmt.Sprintf("0 %d 1000 ch-dead", ms-5000))
	s.Plant(k.q, k.w, "dead1", 2, fmt.Sprintf("%d ch-old", ms+30000))
	acquire := func() rediskit.Reply {
		t.Helper()
		return s.Acquire(acquireScript, k.all(), "w", 10000, "1", 100, "ch-w", "0")
	}
	if r := acquire(); r.Held || r.Holder != "holder" || r.Head || r.PTTL != 0 {
		t.Fatalf("joining behind dead entries: %+v, want not held, holder, not first, PTTL 0", r)
	}
	if r := acquire(); r.Held || r.Holder != "holder" || !r.Head || r.PTTL <= 0 {
		t.Fatalf("refreshing behind dead entries: %+v, want first with the key's PTTL", r)
	}
	if n := s.C.ZCard(s.Ctx, k.q).Val(); n != 1 {
		t.Errorf("%d entries queued, want ours alone", n)
	}
}
