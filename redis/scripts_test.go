package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/testsvc"
)

// scriptEnv is a lock's keys on a fresh server, for running the scripts
// by hand against entries a test plants.
type scriptEnv struct {
	t   *testing.T
	ctx context.Context
	c   *goredis.Client
	k   keys
}

func newScriptEnv(t *testing.T) *scriptEnv {
	srv := testsvc.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	k := (&backend{prefix: DefaultPrefix}).keys("job")
	return &scriptEnv{t: t, ctx: ctx, c: c, k: k}
}

// nowMS is the server's clock in milliseconds.
func (e *scriptEnv) nowMS() int64 {
	now, err := e.c.Time(e.ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return now.UnixMilli()
}

// plant queues value with score and entry as they are stored.
func (e *scriptEnv) plant(value string, score float64, entry string) {
	e.t.Helper()
	if err := e.c.ZAdd(e.ctx, e.k.q, goredis.Z{Score: score, Member: value}).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.c.HSet(e.ctx, e.k.w, value, entry).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// acquire runs the acquire script for value as a waiting attempt.
func (e *scriptEnv) acquire(value string) rediskit.Reply {
	e.t.Helper()
	res, err := acquireScript.Run(e.ctx, e.c, e.k.all(), value, 10000, "1", "ch-"+value, "0").Slice()
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := rediskit.ParseReply(res)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// TestAcquireScript_RefreshFindsDeadHeadGone: a waiter that joins behind
// an entry that ran out is told it is not first (its rank says so); when
// it refreshes its place, the dead entry is dropped and it is told it is
// first, with the key's PTTL, so that it looks again at the key's expiry
// and takes over a crashed holder then.
func TestAcquireScript_RefreshFindsDeadHeadGone(t *testing.T) {
	e := newScriptEnv(t)
	if err := e.c.Set(e.ctx, e.k.lock, "holder", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	now := e.nowMS()
	e.plant("dead", 1, fmt.Sprintf("0 %d 1000 ch-dead", now-5000))

	if r := e.acquire("w"); r.Held || r.Holder != "holder" || r.Head || r.PTTL != 0 {
		t.Fatalf("joining behind a dead entry: %+v, want not held, holder, not first, PTTL 0", r)
	}
	r := e.acquire("w")
	if r.Held || r.Holder != "holder" || !r.Head || r.PTTL <= 0 {
		t.Fatalf("refreshing behind a dead entry: %+v, want first with the key's PTTL", r)
	}
	if _, err := e.c.ZScore(e.ctx, e.k.q, "dead").Result(); err != goredis.Nil {
		t.Errorf("the dead entry is still queued (%v)", err)
	}
}

// TestReleaseScript_EarlierFormatNeverLive: an entry in the format of
// earlier versions ("DEADLINE_MS TTL_MS CHANNEL"), here one whose deadline
// just passed, is never taken for live: the release passes it by and
// hands the lock to the live waiter behind it. Read as "SEEN_MS TTL_MS
// CHANNEL" it would live a TTL longer and be handed the lock.
func TestReleaseScript_EarlierFormatNeverLive(t *testing.T) {
	e := newScriptEnv(t)
	if err := e.c.Set(e.ctx, e.k.lock, "holder", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	now := e.nowMS()
	e.plant("old", 1, fmt.Sprintf("%d 30000 ch-old", now-1))
	e.plant("live", 2, fmt.Sprintf("0 %d 30000 ch-live", now))

	n, err := releaseScript.Run(e.ctx, e.c, e.k.all(), "holder").Int()
	if err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if v := e.c.Get(e.ctx, e.k.lock).Val(); v != "live" {
		t.Fatalf("the release handed the lock to %q, want the live waiter", v)
	}
	if n := e.c.ZCard(e.ctx, e.k.q).Val(); n != 0 {
		t.Errorf("%d entries left in the queue, want none", n)
	}
}
