package redlock

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediskit/redistest"
)

// scriptKeys are a lock's keys, for running the scripts by hand.
var scriptKeys = (&backend{prefix: DefaultPrefix}).keys("job")

// TestAcquireScript_RefreshFindsDeadHeadGone: on one node, a waiter that
// joins behind an entry that ran out is told it is not first (its rank
// says so); when it refreshes its place, the dead entry is dropped and it
// is told it is first, with the key's PTTL, so that it looks again at the
// key's expiry. Entries in the earlier formats ("DEADLINE_MS CHANNEL",
// "0 SEEN_MS TTL_MS CHANNEL") are dropped as well.
func TestAcquireScript_RefreshFindsDeadHeadGone(t *testing.T) {
	s := redistest.Start(t)
	k := scriptKeys
	s.Hold(k.lock, "holder")
	ms := s.NowMS()
	s.Plant(k.q, k.w, "dead0", 1, fmt.Sprintf("00 %d 1000 1 ch-dead", ms-5000))
	s.Plant(k.q, k.w, "dead1", 2, fmt.Sprintf("%d ch-old", ms+30000))
	s.Plant(k.q, k.w, "dead2", 3, fmt.Sprintf("0 %d 10000 ch-prev", ms))
	acquire := func() rediskit.Reply {
		t.Helper()
		return s.Acquire(acquireScript, k.all(), "w", 10000, "1", 100, rediskit.Tell("1", "ch-w"), "0")
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

// TestAcquireScript_OldValues: a value the acquisition gave up (ARGV[7]
// and on) hands its place and its key to the new one, and nothing of it
// stays behind.
func TestAcquireScript_OldValues(t *testing.T) {
	k := scriptKeys
	// Planted entries name attempt 3; the script's attempt is 5, which the
	// new value's entry must name after it, whatever entry it took over.
	live := func(s *redistest.Server, ch string) string { return fmt.Sprintf("00 %d 10000 3 %s", s.NowMS(), ch) }
	// holdFor sets the key to an old value with 5s left, half our TTL.
	holdFor := func(t *testing.T, s *redistest.Server, v string) {
		if err := s.C.Set(s.Ctx, k.lock, v, 5*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, s *redistest.Server)
		olds     []any
		held     bool
		head     bool
		queue    []string // the queue after, in order
		key      string   // K after ("" free)
		newEntry bool     // new has an entry after
	}{{
		name:  "the key still holds an old value: it becomes ours, with our TTL",
		setup: func(t *testing.T, s *redistest.Server) { holdFor(t, s, "old") },
		held:  true, key: "new",
	}, {
		name: "the key holds the older of two old values, the newer is queued: the key is ours, the entry gone",
		setup: func(t *testing.T, s *redistest.Server) {
			holdFor(t, s, "older")
			s.Plant(k.q, k.w, "old", 100, live(s, "ch-a"))
			s.Plant(k.q, k.w, "behind", 200, live(s, "ch-b"))
		},
		olds: []any{"older", "old"},
		held: true, queue: []string{"behind"}, key: "new",
	}, {
		name: "the key holds an old value that is also queued: the key is ours, the entry gone",
		setup: func(t *testing.T, s *redistest.Server) {
			holdFor(t, s, "old")
			s.Plant(k.q, k.w, "old", 100, live(s, "ch-a"))
		},
		held: true, key: "new",
	}, {
		name: "the key holds an old value, the new one is queued: the key is ours, and ours leaves the queue",
		setup: func(t *testing.T, s *redistest.Server) {
			holdFor(t, s, "old")
			s.Plant(k.q, k.w, "new", 100, live(s, "ch-new"))
			s.Plant(k.q, k.w, "behind", 200, live(s, "ch-b"))
		},
		held: true, queue: []string{"behind"}, key: "new",
	}, {
		name: "the new value already queued beside the old: one place, first",
		setup: func(t *testing.T, s *redistest.Server) {
			s.Hold(k.lock, "other")
			s.Plant(k.q, k.w, "old", 100, live(s, "ch-a"))
			s.Plant(k.q, k.w, "new", 100, live(s, "ch-new"))
			s.Plant(k.q, k.w, "behind", 200, live(s, "ch-b"))
		},
		head: true, queue: []string{"new", "behind"}, key: "other", newEntry: true,
	}, {
		name: "an old value first in the queue, the key held: ours takes its place",
		setup: func(t *testing.T, s *redistest.Server) {
			s.Hold(k.lock, "other")
			s.Plant(k.q, k.w, "old", 100, live(s, "ch-a"))
			s.Plant(k.q, k.w, "behind", 200, live(s, "ch-b"))
		},
		head: true, queue: []string{"new", "behind"}, key: "other", newEntry: true,
	}, {
		name: "an old value first in the queue, the key free: ours takes the key",
		setup: func(t *testing.T, s *redistest.Server) {
			s.Plant(k.q, k.w, "old", 100, live(s, "ch-a"))
			s.Plant(k.q, k.w, "behind", 200, live(s, "ch-b"))
		},
		held: true, queue: []string{"behind"}, key: "new",
	}, {
		name: "a dead entry ahead of the old value, the key free: ours takes the key",
		setup: func(t *testing.T, s *redistest.Server) {
			s.Plant(k.q, k.w, "dead", 50, fmt.Sprintf("00 %d 1000 1 ch-d", s.NowMS()-5000))
			s.Plant(k.q, k.w, "old", 100, live(s, "ch-a"))
			s.Plant(k.q, k.w, "behind", 200, live(s, "ch-b"))
		},
		held: true, queue: []string{"behind"}, key: "new",
	}, {
		name: "the old value gone already: a plain join",
		setup: func(t *testing.T, s *redistest.Server) {
			s.Hold(k.lock, "other")
			s.Plant(k.q, k.w, "first", 50, live(s, "ch-f"))
		},
		queue: []string{"first", "new"}, key: "other", newEntry: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			tc.setup(t, s)
			olds := tc.olds
			if olds == nil {
				olds = []any{"old"}
			}
			r := s.Acquire(acquireScript, k.all(), append([]any{"new", 10000, "1", 100, rediskit.Tell("5", "ch-new"), "0"}, olds...)...)
			if r.Held != tc.held || (!tc.held && r.Head != tc.head) {
				t.Errorf("answer %+v; want held %v, first %v", r, tc.held, tc.head)
			}
			if got := s.C.ZRange(s.Ctx, k.q, 0, -1).Val(); fmt.Sprint(got) != fmt.Sprint(tc.queue) {
				t.Errorf("queue %v; want %v", got, tc.queue)
			}
			if got := s.C.Get(s.Ctx, k.lock).Val(); got != tc.key {
				t.Errorf("key holds %q; want %q", got, tc.key)
			}
			for _, o := range olds {
				if s.C.HExists(s.Ctx, k.w, o.(string)).Val() {
					t.Errorf("the entry of old value %v is still there", o)
				}
			}
			if tc.key == "new" {
				// The old value had 5s left; ours is 10s.
				if pttl := s.C.PTTL(s.Ctx, k.lock).Val(); pttl < 9*time.Second {
					t.Errorf("key's PTTL %v after the script; want ours, about 10s", pttl)
				}
			}
			e, err := s.C.HGet(s.Ctx, k.w, "new").Result()
			if got := err == nil; got != tc.newEntry {
				t.Errorf("new value's entry there: %v (%v); want %v", got, err, tc.newEntry)
			}
			if tc.newEntry && !strings.HasSuffix(e, " 5 ch-new") {
				t.Errorf("new value's entry %q; want it to name the script's attempt, 5, and channel", e)
			}
		})
	}
}

// TestAcquireScript_ClaimYields: after a claim took a free key reserved
// for a live waiter, the script answers "yielded" and leaves the key as
// it is: only the caller's undo frees it, so a late copy of the script
// can delete nothing.
func TestAcquireScript_ClaimYields(t *testing.T) {
	s := redistest.Start(t)
	k := scriptKeys
	s.Plant(k.q, k.w, "waiter", 50, fmt.Sprintf("00 %d 10000 1 ch-w", s.NowMS()))
	s.Hold(k.lock, "claimer")
	res, err := acquireScript.Run(s.Ctx, s.C, k.all(), "claimer", 10000, "0", 100, rediskit.Tell("0", "ch-c"), "1").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res) != "[0 waiter -2 0 1]" {
		t.Errorf("answer %v; want [0 waiter -2 0 1] (not held, the waiter first, yielded)", res)
	}
	if got := s.C.Get(s.Ctx, k.lock).Val(); got != "claimer" {
		t.Errorf("key holds %q; want the claimer's value, left for its undo", got)
	}
	for range 2 { // a late copy changes nothing
		if _, err := acquireScript.Run(s.Ctx, s.C, k.all(), "claimer", 10000, "0", 100, rediskit.Tell("0", "ch-c"), "1").Slice(); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.C.Get(s.Ctx, k.lock).Val(); got != "claimer" {
		t.Errorf("after a late copy the key holds %q; want the claimer's value", got)
	}
}

// TestForceScript_OnlyTheValueRead: see redistest.ForceOnlyTheValueRead.
func TestForceScript_OnlyTheValueRead(t *testing.T) {
	redistest.ForceOnlyTheValueRead(t, forceScript, scriptKeys.all())
}

// unlock runs the unlock script with leave, notify and values.
func unlock(t *testing.T, s *redistest.Server, leave, notify string, values ...any) int64 {
	t.Helper()
	n, err := unlockScript.Run(s.Ctx, s.C, scriptKeys.all(), append([]any{leave, notify}, values...)...).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUnlockScript_HandsOver: a release hands the key to the first live
// waiter, dropping the dead entries before it, for what its entry had
// left to live (its TTL from its last attempt), and tells it on its
// channel which of its attempts the handoff came after (the number its
// entry holds).
func TestUnlockScript_HandsOver(t *testing.T) {
	k := scriptKeys
	for _, tc := range []struct {
		name     string
		ago      int64 // ms since the waiter's last attempt, by the server's clock
		min, max time.Duration
	}{
		{"fresh entry", 0, 9 * time.Second, 10*time.Second + 2*time.Millisecond},
		{"entry 4s old", 4000, 5500 * time.Millisecond, 6*time.Second + 2*time.Millisecond},
		// The clock stepped back 5s since the waiter's attempt: one TTL.
		{"entry 5s ahead", -5000, 9 * time.Second, 10*time.Second + 2*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			s.Hold(k.lock, "holder")
			now := s.NowMS()
			seen := now - tc.ago
			s.Plant(k.q, k.w, "dead", 1, fmt.Sprintf("00 %d 1000 1 ch-dead", now-5000))
			s.Plant(k.q, k.w, "w", 2, fmt.Sprintf("00 %d 10000 7 ch-w", seen))
			msgs := s.Subscribe("ch-w")
			dead := s.Subscribe("ch-dead")
			if n := unlock(t, s, "1", "1", "holder"); n != 1 {
				t.Fatalf("release answered %d, want 1 (the key was ours)", n)
			}
			if got := s.C.Get(s.Ctx, k.lock).Val(); got != "w" {
				t.Errorf("key holds %q after the release; want the waiter's value", got)
			}
			if pttl := s.C.PTTL(s.Ctx, k.lock).Val(); pttl < tc.min || pttl > tc.max {
				t.Errorf("key's PTTL %v; want what the waiter's entry had left, %v to %v", pttl, tc.min, tc.max)
			}
			if n, m := s.C.ZCard(s.Ctx, k.q).Val(), s.C.HLen(s.Ctx, k.w).Val(); n != 0 || m != 0 {
				t.Errorf("%d entries left in the queue, %d in the entries' hash; want none (the dead one dropped, the waiter's taken out)", n, m)
			}
			s.Message(msgs, "w 7")
			s.Told(dead, "ch-dead", false)
		})
	}
}

// TestUnlockScript_UndoFirstInLine: an undo by an acquisition first in
// line, which tries again at once and wakes no one, deletes its key when
// it is first in the queue there (or one of its old values is); when
// another waiter is (taking the key took it out of the queue), the undo
// hands the key to that waiter, whom no one would tell otherwise: a free
// key is reserved for it, and it sleeps.
func TestUnlockScript_UndoFirstInLine(t *testing.T) {
	k := scriptKeys
	for _, tc := range []struct {
		name  string
		queue map[string]float64 // value -> score
		key   string             // K after the undo ("" free)
		told  string             // the waiter told, if any
	}{
		{"queued first", map[string]float64{"me": 100}, "", ""},
		{"nobody queued", map[string]float64{}, "", ""},
		{"an old value of ours first", map[string]float64{"old": 100, "x": 200}, "", ""},
		{"another waiter first", map[string]float64{"x": 200}, "x", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			s.Hold(k.lock, "me")
			seen := s.NowMS()
			for v, score := range tc.queue {
				s.Plant(k.q, k.w, v, score, fmt.Sprintf("00 %d 10000 3 ch-%s", seen, v))
			}
			msgs := map[string]<-chan *goredis.Message{}
			for v := range tc.queue {
				msgs[v] = s.Subscribe("ch-" + v)
			}
			if n := unlock(t, s, "0", "0", "old", "me"); n != 1 {
				t.Fatalf("undo answered %d, want 1", n)
			}
			if got := s.C.Get(s.Ctx, k.lock).Val(); got != tc.key {
				t.Errorf("key holds %q after the undo; want %q", got, tc.key)
			}
			for v, ch := range msgs {
				if v == tc.told {
					s.Message(ch, v+" 3")
				} else {
					s.Told(ch, "ch-"+v, false)
				}
			}
		})
	}
}

// TestHandoffs_Look: a handoff counts only when its tag is the number
// of the round now: not one that came after an earlier round (the key
// may have moved on since), nor one without a tag, nor one to a value
// given up.
func TestHandoffs_Look(t *testing.T) {
	h := newHandoffs(4, "v1")
	h.round("v1", "1")
	for i := range 4 {
		h.deliver(i, "v1", "1")
	}
	if n, other := h.look(); n != 4 || other {
		t.Errorf("after 4 handoffs tagged with the round: count %d, other %v; want 4, false", n, other)
	}
	h.round("v1", "2")
	if n, _ := h.look(); n != 0 {
		t.Errorf("count %d after a new round began; want 0", n)
	}
	h.deliver(0, "v1", "1") // after round 1, held up on its way
	h.deliver(1, "v1", "2")
	if n, other := h.look(); n != 1 || other {
		t.Errorf("after handoffs tagged with rounds 1 and 2: count %d, other %v; want 1, false", n, other)
	}
	h.deliver(2, "v1", "") // untagged: a waiter told it is first now
	if n, other := h.look(); n != 1 || !other {
		t.Errorf("after an untagged message: count %d, other %v; want 1, true", n, other)
	}
	h.round("v2", "3")
	h.deliver(0, "v1", "3") // a handoff to the value given up
	if n, other := h.look(); n != 0 || !other {
		t.Errorf("after a handoff to a value given up: count %d, other %v; want 0, true", n, other)
	}
	h.deliver(0, "v2", "3")
	if n, other := h.look(); n != 1 || other {
		t.Errorf("after a handoff to the value now: count %d, other %v; want 1, false", n, other)
	}
}

// TestScripts_NoNumberArgs: no script passes a number it computes to a
// command as a Lua number, which Redis 7.2.0 to 7.2.4 may write in
// exponent form and refuse (see rediskit.LuaQueue).
func TestScripts_NoNumberArgs(t *testing.T) {
	redistest.NoNumberArgs(t, map[string]*goredis.Script{"acquire": acquireScript, "unlock": unlockScript, "renew": renewScript, "force": forceScript})
}

// TestUnlockScript_LeaverBehindDeadEntries: see
// redistest.LeaverBehindDeadEntries; the waiter leaves with its current
// value and one it gave up (only the latter queued).
func TestUnlockScript_LeaverBehindDeadEntries(t *testing.T) {
	k := scriptKeys
	redistest.LeaverBehindDeadEntries(t, k.q, k.w, func(s *redistest.Server, v string) {
		t.Helper()
		if n := unlock(t, s, "1", "1", "me", v); n != 0 {
			t.Fatalf("a waiter's leave answered %d, want 0", n)
		}
	})
}

// TestRetryIn_PastExpiry: a waiter first in line behind another's
// majority looks again just past the keys' PTTL, within 200ms of it at any
// TTL, so that a crashed holder is taken over right after its keys
// expire: the jitter is no share of the PTTL (19s/20 was up to 950ms).
func TestRetryIn_PastExpiry(t *testing.T) {
	cs := make([]goredis.UniversalClient, 3)
	for i := range cs {
		c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + strconv.Itoa(i+1), MaxRetries: -1}) // never asked
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	b, err := newBackend(cs, []baton.Option{baton.WithTTL(time.Minute)}) // RenewEvery 20s
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	for _, pttl := range []time.Duration{time.Millisecond, 100 * time.Millisecond, 19 * time.Second} {
		for range 1000 {
			if got := b.retryIn(round{heads: b.quorum, pttl: pttl}, true, 0); got <= pttl || got > pttl+200*time.Millisecond {
				t.Fatalf("retryIn(first, pttl %v) at a 60s TTL = %v, want just past the PTTL, within 200ms", pttl, got)
			}
		}
	}
}
