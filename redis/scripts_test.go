package redis

import (
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediskit/redistest"
)

// scriptKeys are a lock's keys, for running the scripts by hand.
var scriptKeys = (&backend{prefix: DefaultPrefix}).keys("job")

// acquireAs runs the acquire script for value as a waiting attempt.
func acquireAs(s *redistest.Server, value string) rediskit.Reply {
	return s.Acquire(acquireScript, scriptKeys.all(), value, 10000, "1", rediskit.Tell("1", "ch-"+value), "0")
}

// TestAcquireScript_RefreshFindsDeadHeadGone: a waiter that joins behind
// an entry that ran out is told it is not first (its rank says so); when
// it refreshes its place, the dead entry is dropped and it is told it is
// first, with the key's PTTL, so that it looks again at the key's expiry
// and takes over a crashed holder then.
func TestAcquireScript_RefreshFindsDeadHeadGone(t *testing.T) {
	s, k := redistest.Start(t), scriptKeys
	s.Hold(k.lock, "holder")
	s.Plant(k.q, k.w, "dead", 1, fmt.Sprintf("00 %d 1000 1 ch-dead", s.NowMS()-5000))

	if r := acquireAs(s, "w"); r.Held || r.Holder != "holder" || r.Head || r.PTTL != 0 {
		t.Fatalf("joining behind a dead entry: %+v, want not held, holder, not first, PTTL 0", r)
	}
	r := acquireAs(s, "w")
	if r.Held || r.Holder != "holder" || !r.Head || r.PTTL <= 0 {
		t.Fatalf("refreshing behind a dead entry: %+v, want first with the key's PTTL", r)
	}
	if _, err := s.C.ZScore(s.Ctx, k.q, "dead").Result(); err != goredis.Nil {
		t.Errorf("the dead entry is still queued (%v)", err)
	}
}

// TestReleaseScript_EarlierFormatNeverLive: entries in the formats of
// earlier versions are never taken for live: "DEADLINE_MS TTL_MS
// CHANNEL", here one whose deadline just passed (read as "SEEN_MS TTL_MS
// CHANNEL" it would live a TTL longer), and "0 SEEN_MS TTL_MS CHANNEL",
// whose waiter would not know the handoff's tag. The release passes them
// by and hands the lock to the live waiter behind them.
func TestReleaseScript_EarlierFormatNeverLive(t *testing.T) {
	s, k := redistest.Start(t), scriptKeys
	s.Hold(k.lock, "holder")
	now := s.NowMS()
	s.Plant(k.q, k.w, "old", 1, fmt.Sprintf("%d 30000 ch-old", now-1))
	s.Plant(k.q, k.w, "prev", 2, fmt.Sprintf("0 %d 30000 ch-prev", now))
	s.Plant(k.q, k.w, "live", 3, fmt.Sprintf("00 %d 30000 4 ch-live", now))
	old, prev, live := s.Subscribe("ch-old"), s.Subscribe("ch-prev"), s.Subscribe("ch-live")

	n, err := releaseScript.Run(s.Ctx, s.C, k.all(), "holder").Int()
	if err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if v := s.C.Get(s.Ctx, k.lock).Val(); v != "live" {
		t.Fatalf("the release handed the lock to %q, want the live waiter", v)
	}
	if n := s.C.ZCard(s.Ctx, k.q).Val(); n != 0 {
		t.Errorf("%d entries left in the queue, want none", n)
	}
	s.Message(live, "live 4") // the handoff, naming the attempt its entry holds
	s.Told(old, "ch-old", false)
	s.Told(prev, "ch-prev", false)
}

// TestForceScript_OnlyTheValueRead: see redistest.ForceOnlyTheValueRead.
func TestForceScript_OnlyTheValueRead(t *testing.T) {
	redistest.ForceOnlyTheValueRead(t, forceScript, scriptKeys.all())
}

// TestAcquireScript_ClaimYields: after a claim took a free key reserved
// for a live waiter, the script answers "yielded" and changes nothing
// (the caller's release hands the key over), also when run again as a
// late copy; with only dead waiters queued it keeps the key and drops
// them; and once the key holds another value, a late copy only answers.
func TestAcquireScript_ClaimYields(t *testing.T) {
	k := scriptKeys
	claim := func(t *testing.T, s *redistest.Server) []any {
		t.Helper()
		res, err := acquireScript.Run(s.Ctx, s.C, k.all(), "claimer", 10000, "0", rediskit.Tell("0", "ch-c"), "1").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	t.Run("live waiter first", func(t *testing.T) {
		s := redistest.Start(t)
		s.Plant(k.q, k.w, "waiter", 50, fmt.Sprintf("00 %d 10000 1 ch-w", s.NowMS()))
		s.Hold(k.lock, "claimer")
		for range 2 {
			if res := claim(t, s); fmt.Sprint(res) != "[0 waiter -2 0 1]" {
				t.Errorf("answer %v; want [0 waiter -2 0 1] (not held, the waiter first, yielded)", res)
			}
		}
		if got := s.C.Get(s.Ctx, k.lock).Val(); got != "claimer" {
			t.Errorf("key holds %q; want the claimer's, left for its release", got)
		}
		if n := s.C.ZCard(s.Ctx, k.q).Val(); n != 1 {
			t.Errorf("%d queued; want the waiter still", n)
		}
	})
	t.Run("only dead waiters", func(t *testing.T) {
		s := redistest.Start(t)
		s.Plant(k.q, k.w, "dead", 50, fmt.Sprintf("00 %d 1000 1 ch-d", s.NowMS()-5000))
		s.Hold(k.lock, "claimer")
		if res := claim(t, s); fmt.Sprint(res) != "[1]" {
			t.Errorf("answer %v; want [1], kept", res)
		}
		if n := s.C.ZCard(s.Ctx, k.q).Val(); n != 0 {
			t.Errorf("%d queued; want the dead waiter dropped", n)
		}
	})
	t.Run("late copy, key free", func(t *testing.T) {
		s := redistest.Start(t)
		if res := claim(t, s); fmt.Sprint(res) != "[0  -2 0]" {
			t.Errorf("answer %v; want [0 '' -2 0], not held", res)
		}
		if n := s.C.Exists(s.Ctx, k.lock).Val(); n != 0 {
			t.Error("a late copy took the free key")
		}
	})
}

// TestScripts_NoNumberArgs: no script passes a number it computes to a
// command as a Lua number, which Redis 7.2.0 to 7.2.4 may write in
// exponent form and refuse (see rediskit.LuaQueue).
func TestScripts_NoNumberArgs(t *testing.T) {
	redistest.NoNumberArgs(t, map[string]*goredis.Script{"acquire": acquireScript, "release": releaseScript, "renew": renewScript, "force": forceScript, "state": stateScript})
}

// TestReleaseScript_LeaverBehindDeadEntries: see
// redistest.LeaverBehindDeadEntries.
func TestReleaseScript_LeaverBehindDeadEntries(t *testing.T) {
	k := scriptKeys
	redistest.LeaverBehindDeadEntries(t, k.q, k.w, func(s *redistest.Server, v string) {
		t.Helper()
		if n, err := releaseScript.Run(s.Ctx, s.C, k.all(), v).Int(); err != nil || n != 0 {
			t.Fatalf("release of %s, a waiter: %d, %v; want 0", v, n, err)
		}
	})
}

// TestStreamIDLess: stream entry IDs compare by milliseconds, then by
// sequence, as numbers; IDs that do not parse never compare less.
func TestStreamIDLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"1-0", "2-0", true},
		{"2-0", "1-0", false},
		{"5-1", "5-2", true},
		{"5-2", "5-2", false},
		{"9-0", "10-0", true}, // as numbers, not strings
		{"0-0", "1700000000000-0", true},
		{"x", "1-0", false},
		{"1-0", "", false},
	} {
		if got := streamIDLess(c.a, c.b); got != c.want {
			t.Errorf("streamIDLess(%q, %q) = %v; want %v", c.a, c.b, got, c.want)
		}
	}
}

// TestTrimCount: the changes an observer missed are those added since it
// was last counted that it neither read nor will; none when the count is
// not known or the stream was made anew; counted at once when every entry
// the stream holds is after the observer's, and not in between.
func TestTrimCount(t *testing.T) {
	caughtUp := func(added int64) lockState { return lockState{last: "9-0", added: added, held: 3, first: "7-0"} }
	for _, c := range []struct {
		base, added, read, want int64
	}{
		{10, 15, 5, 0}, // read every one
		{10, 15, 2, 3}, // three trimmed unread
		{10, 10, 0, 0}, // nothing new
		{-1, 15, 0, 0}, // no count (before Redis 7, or the stream went back)
		{10, -1, 0, 0}, // no count now
		{10, 3, 3, 0},  // the stream was made anew
		{10, 15, 7, 0}, // read more than counted (a stream made anew meanwhile)
	} {
		tc := trimCount{base: c.base, read: c.read}
		if got := tc.at(caughtUp(c.added), "9-0"); got != c.want {
			t.Errorf("caught up, base %d, added %d, read %d: %d missed; want %d", c.base, c.added, c.read, got, c.want)
		}
		if want := max(c.added, -1); tc.base != want || tc.read != 0 {
			t.Errorf("caught up, base %d, added %d: counting from %d, %d read; want from %d, 0 read", c.base, c.added, tc.base, tc.read, want)
		}
	}

	// Behind: every entry held (4, from 20-0) is after ours (12-0).
	tc := trimCount{base: 10, read: 2}
	behind := lockState{last: "23-0", added: 20, held: 4, first: "20-0"}
	if got := tc.at(behind, "12-0"); got != 20-10-2-4 {
		t.Errorf("behind: %d missed; want %d", got, 20-10-2-4)
	}
	if tc.base != 16 || tc.read != 0 {
		t.Errorf("behind: counting from %d, %d read; want from 16 (the entries before the first held), 0 read", tc.base, tc.read)
	}
	// In between (an entry up to ours is still held): no count, nothing
	// changed.
	tc = trimCount{base: 10, read: 2}
	between := lockState{last: "23-0", added: 20, held: 4, first: "20-0"}
	if got := tc.at(between, "21-0"); got != 0 || tc.base != 10 || tc.read != 2 {
		t.Errorf("in between: %d missed, counting from %d, %d read; want none, unchanged (10, 2)", got, tc.base, tc.read)
	}
}

// TestReleaseScript_HolderStillQueued: a holder whose key a late copy of
// its claim set while it waited (the copy knows no queue) holds the lock
// and still has its entry; at its next attempt it finds the key its own,
// and holds on. Its release hands the lock to the waiter behind it, its
// own entry taken out, or frees it: it handed the lock back to the value
// releasing it, which no one would use, so that the lock stayed taken for
// up to one TTL. The forced release does the same.
func TestReleaseScript_HolderStillQueued(t *testing.T) {
	for _, forced := range []bool{false, true} {
		for _, behind := range []bool{false, true} {
			t.Run(fmt.Sprintf("forced=%v,waiter_behind=%v", forced, behind), func(t *testing.T) {
				s, k := redistest.Start(t), scriptKeys
				s.Hold(k.lock, "x")
				if r := acquireAs(s, "v"); r.Held {
					t.Fatalf("v joining behind x: %+v, want queued", r)
				}
				if behind {
					if r := acquireAs(s, "w"); r.Held {
						t.Fatalf("w joining behind v: %+v, want queued", r)
					}
				}
				s.Hold(k.lock, "v") // the late copy of v's claim
				if r := acquireAs(s, "v"); !r.Held {
					t.Fatalf("v's next attempt with the key its own: %+v, want held", r)
				}
				var n int
				var err error
				if forced {
					n, err = forceScript.Run(s.Ctx, s.C, k.all(), "v").Int()
				} else {
					n, err = releaseScript.Run(s.Ctx, s.C, k.all(), "v").Int()
				}
				if err != nil || n != 1 {
					t.Fatalf("release: %d, %v", n, err)
				}
				got, err := s.C.Get(s.Ctx, k.lock).Result()
				switch {
				case behind && got != "w":
					t.Fatalf("after v's release the lock holds %q (%v); want w's, the waiter behind", got, err)
				case !behind && err != goredis.Nil:
					t.Fatalf("after v's release the lock holds %q (%v); want it free", got, err)
				}
				if _, err := s.C.ZScore(s.Ctx, k.q, "v").Result(); err != goredis.Nil {
					t.Errorf("v is still queued after its release (%v)", err)
				}
			})
		}
	}
}
