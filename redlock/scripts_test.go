package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestAcquireScript_RefreshFindsDeadHeadGone: on one node, a waiter that
// joins behind an entry that ran out is told it is not first (its rank
// says so); when it refreshes its place, the dead entry is dropped and it
// is told it is first, with the key's PTTL, so that it looks again at the
// key's expiry. An entry in the earlier format ("DEADLINE_MS CHANNEL") is
// dropped as well.
func TestAcquireScript_RefreshFindsDeadHeadGone(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := (&backend{prefix: DefaultPrefix}).keys("job")
	if err := c.Set(ctx, k.lock, "holder", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms := now.UnixMilli()
	for i, e := range []string{fmt.Sprintf("0 %d 1000 ch-dead", ms-5000), fmt.Sprintf("%d ch-old", ms+30000)} {
		v := fmt.Sprintf("dead%d", i)
		if err := c.ZAdd(ctx, k.q, goredis.Z{Score: float64(i + 1), Member: v}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.HSet(ctx, k.w, v, e).Err(); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func() rediskit.Reply {
		t.Helper()
		res, err := acquireScript.Run(ctx, c, k.all(), "w", 10000, "1", 100, "ch-w", "0").Slice()
		if err != nil {
			t.Fatal(err)
		}
		r, err := rediskit.ParseReply(res)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := acquire(); r.Held || r.Holder != "holder" || r.Head || r.PTTL != 0 {
		t.Fatalf("joining behind dead entries: %+v, want not held, holder, not first, PTTL 0", r)
	}
	if r := acquire(); r.Held || r.Holder != "holder" || !r.Head || r.PTTL <= 0 {
		t.Fatalf("refreshing behind dead entries: %+v, want first with the key's PTTL", r)
	}
	if n := c.ZCard(ctx, k.q).Val(); n != 1 {
		t.Errorf("%d entries queued, want ours alone", n)
	}
}
