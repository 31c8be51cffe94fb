package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/keeper"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediskit/redistest"
	"github.com/baton-go/baton/internal/rounds"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
)

// TestGuide_RedisCLICheck is the guide's redis-cli session in Go: while
// baton holds the lock, a second SET NX gets nothing, and PTTL is just
// under the TTL.
func TestGuide_RedisCLICheck(t *testing.T) {
	srv := testsvc.StartRedis(t)
	const ttl = 15 * time.Minute // the guide's PX 900000
	l := newLocker(t, srv.Addr, baton.WithTTL(ttl))
	lease, err := l.Acquire(timeout(t, 5*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if lease.Key() != "baton:lock:invoices" {
		t.Errorf("key %q, want baton:lock:invoices", lease.Key())
	}
	cli := client(t, srv.Addr)
	ctx := timeout(t, 5*time.Second)
	ok, err := cli.SetNX(ctx, lease.Key(), "test-2", 900*time.Second).Result()
	if err != nil || ok {
		t.Fatalf("SET %s test-2 NX PX 900000 = %v, %v; want (nil)", lease.Key(), ok, err)
	}
	pttl, err := cli.PTTL(ctx, lease.Key()).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PTTL %s = %d", lease.Key(), pttl.Milliseconds())
	if pttl > ttl || pttl < ttl-5*time.Second {
		t.Errorf("PTTL %v, want just under %v", pttl, ttl)
	}
	v, err := cli.Get(ctx, lease.Key()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(v, " "+l.Config().Holder) || len(v) != 33+len(l.Config().Holder) {
		t.Errorf("value %q, want 32 hex digits (128 random bits), a space and the holder", v)
	}
	// A second acquisition's value differs: unique per acquisition.
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := cli.Exists(ctx, lease.Key()).Result(); n != 0 {
		t.Fatal("key still there after Release")
	}
	lease2, err := l.Acquire(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	defer lease2.Release(context.Background())
	if v2, _ := cli.Get(ctx, lease.Key()).Result(); v2 == v {
		t.Errorf("two acquisitions stored the same value %q", v)
	}
}

// TestExpiredEarly_OldHolderStopsAndTouchesNothing stands in for a jump of
// the Redis server's wall clock, which ends keys early (libfaketime cannot
// be loaded into Debian's redis-server): a third client makes the holder's
// key expire now with PEXPIRE key 1. The holder cannot tell this apart
// from a clock jump. A waiter takes over; the old holder's work context is
// cancelled by its next renewal's refusal, before the local deadline it
// had when the key ended; its renewals and its release leave the new
// holder's key alone.
func TestExpiredEarly_OldHolderStopsAndTouchesNothing(t *testing.T) {
	srv := testsvc.StartRedis(t)
	// 3s: A's next renewal (every 1s) is refused about 2s before its
	// local deadline, a margin a loaded machine does not use up.
	const ttlA = 3 * time.Second
	a := newLocker(t, srv.Addr, baton.WithTTL(ttlA), baton.WithHolder("old"))
	b := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("new"))
	cli := client(t, srv.Addr)

	la, err := a.Acquire(timeout(t, 5*time.Second), "stock")
	if err != nil {
		t.Fatal(err)
	}
	var lostAt time.Time
	lost := make(chan struct{})
	context.AfterFunc(la.Context(), func() { lostAt = time.Now(); close(lost) })

	got := make(chan *baton.Lease, 1)
	go func() {
		lb, err := b.Acquire(timeout(t, 10*time.Second), "stock")
		if err != nil {
			t.Errorf("B: %v", err)
		}
		got <- lb
	}()
	waitQueued(t, cli, la.Key(), 1)

	jump := time.Now()
	if err := cli.PExpire(timeout(t, 5*time.Second), la.Key(), time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	// A's local deadline when its key ended: a renewal confirmed since
	// (one that ran before the PEXPIRE) can only move it on.
	deadline := la.Deadline()
	var lb *baton.Lease
	select {
	case lb = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("B did not take over within 15s of the key's end")
	}
	if lb == nil {
		t.FailNow()
	}
	defer lb.Release(context.Background())
	tookOver := time.Now()
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("A's work context was not cancelled within 10s of its key's end")
	}
	t.Logf("key ended at 0, A's local deadline then at +%v; B acquired at +%v; A's work ctx cancelled at +%v (its deadline by then at +%v)",
		deadline.Sub(jump).Round(time.Millisecond), tookOver.Sub(jump).Round(time.Millisecond),
		lostAt.Sub(jump).Round(time.Millisecond), la.Deadline().Sub(jump).Round(time.Millisecond))
	// A learns from its renewal's refusal, not from its local deadline: a
	// loss by the deadline comes no sooner than the deadline A had when
	// the key ended, whatever the machine's load. No bound on how soon
	// after the PEXPIRE: A's next renewal is due up to RenewEvery later,
	// and a stall holds it up further; before the deadline is the claim.
	if !lostAt.Before(deadline) {
		t.Errorf("A's work ctx was cancelled %v after the local deadline it had when its key ended: not by its next renewal's refusal", lostAt.Sub(deadline).Round(time.Millisecond))
	}
	if err := la.Err(); !errors.Is(err, baton.ErrLeaseLost) || errors.Is(err, keeper.ErrDeadline) || !strings.Contains(err.Error(), "no longer holds") {
		t.Errorf("A's Err = %v, want a refused renewal", err)
	}

	// Nothing of B's was touched: A's refused renewal did not shorten B's
	// key to A's TTL, and A's release does not delete it.
	if err := la.Release(context.Background()); err != nil {
		t.Errorf("A's release after the loss: %v", err)
	}
	ctx := timeout(t, 5*time.Second)
	v, err := cli.Get(ctx, lb.Key()).Result()
	if err != nil || !strings.HasSuffix(v, " new") {
		t.Fatalf("B's key after A's release = %q, %v; want B's value", v, err)
	}
	if pttl := cli.PTTL(ctx, lb.Key()).Val(); pttl <= ttlA {
		t.Errorf("B's key PTTL %v, at most A's TTL %v: A's renewal reset it", pttl, ttlA)
	}
	if lb.Err() != nil {
		t.Errorf("B's lease ended: %v", lb.Err())
	}
}

// waitQueued waits until at least n waiters are queued on the lock key.
func waitQueued(t *testing.T, c *goredis.Client, key string, n int64) {
	t.Helper()
	redistest.WaitQueued(t, []goredis.UniversalClient{c}, key, "", n)
}

// TestRenewal_1sLeaseFor10s: renewal every TTL/3 keeps a 1s lease for 10s;
// another client cannot take it meanwhile.
func TestRenewal_1sLeaseFor10s(t *testing.T) {
	if testing.Short() {
		t.Skip("10s")
	}
	t.Parallel()
	srv := testsvc.StartRedis(t)
	a := newLocker(t, srv.Addr, baton.WithTTL(time.Second))
	b := newLocker(t, srv.Addr, baton.WithTTL(time.Second))
	cli := client(t, srv.Addr)
	// A renewal unanswered for about two thirds of the TTL (a stall of a
	// loaded machine) ends the lease by its local deadline, rightly: such
	// a round, where nothing overlapped, runs again. A holder that does
	// not renew loses every round.
	rounds.Run(t, 3, func(round int) error {
		name := fmt.Sprintf("report-%d", round)
		lease, err := a.Acquire(timeout(t, 5*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		start := time.Now()
		minPTTL := time.Second
		for time.Since(start) < 10*time.Second {
			tried := time.Now()
			if lb, err := b.TryAcquire(timeout(t, 5*time.Second), name); !errors.Is(err, baton.ErrNotAcquired) {
				if err == nil && rounds.TakenAfterEnd(lease, tried, 10*time.Second) {
					_ = lb.Release(context.Background())
					return fmt.Errorf("the lease ended by its local deadline after %v (%v), and another client then took the lock", time.Since(start), lease.Err())
				}
				t.Fatalf("after %v another client's TryAcquire = %v, the lease's Err %v", time.Since(start), err, lease.Err())
			}
			sent := time.Now()
			pttl := cli.PTTL(timeout(t, time.Second), lease.Key()).Val()
			// The key outlives the local deadline: gone before it, it
			// expired while held. The deadline moves on only with a
			// renewal, which a key gone refuses.
			if pttl <= 0 && sent.Before(lease.Deadline()) {
				t.Fatalf("PTTL %v after %v, read before the lease's local deadline: the key expired while held", pttl, time.Since(start))
			}
			if err := rounds.Ended(lease, 10*time.Second); err != nil {
				return rounds.ByDeadline(t, err, fmt.Sprintf("after %v", time.Since(start)))
			}
			minPTTL = min(minPTTL, pttl)
			time.Sleep(100 * time.Millisecond)
		}
		// The claim is that the key never expired (checked above by b's
		// attempts and the PTTLs); the lowest PTTL shows how much margin
		// renewal left, which on a loaded machine can be well below 2/3 of
		// the TTL.
		t.Logf("held for %v; lowest PTTL seen %v", time.Since(start).Round(time.Millisecond), minPTTL)
		return nil
	})
}

// TestRenewal_ServerFrozen_LostAtLocalDeadline freezes the server: no
// renewal is answered, and the lease must be reported lost at its local
// deadline, not when the client's read timeout fires.
func TestRenewal_ServerFrozen_LostAtLocalDeadline(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	// A client that ignores context deadlines, with a long read timeout:
	// the worst case for a user's own client.
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second, MaxRetries: -1})
	defer c.Close()
	l, err := redis.New(c, baton.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A lease lost before the freeze (a renewal unanswered for 0.4s under
	// load) would pass below without a case: such a round runs again.
	rounds.Run(t, 3, func(round int) error {
		lease, err := l.Acquire(timeout(t, 5*time.Second), fmt.Sprintf("frozen-%d", round))
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background()) // after the Resume below
		freezing := time.Now()
		srv.Pause()
		defer srv.Resume()
		if past, err := rounds.PastDeadline(lease, freezing, 10*time.Second); past {
			return rounds.ByDeadline(t, err, "before the server froze")
		}
		late := -batontest.LostBeforeDeadline(t, lease, 5*time.Second)
		// At the local deadline, not when the client's 10s read timeout
		// fires; the margin allows for a loaded machine.
		if late > time.Second {
			t.Errorf("lost %v after the local deadline", late)
		}
		if !errors.Is(lease.Err(), keeper.ErrDeadline) {
			t.Errorf("Err = %v; want a loss by the local deadline", lease.Err())
		}
		return nil
	})
}

// TestAcquire_FIFO_NoHerd queues five waiters in order behind a holder.
// Each release hands the lock to the first waiter, so they get it in
// arrival order, and a handoff costs one script run (the release) plus
// none by the other waiters: no herd.
func TestAcquire_FIFO_NoHerd(t *testing.T) {
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	holder := newLocker(t, srv.Addr)
	lh, err := holder.Acquire(timeout(t, 5*time.Second), "fifo")
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := range waiters {
		l := newLocker(t, srv.Addr)
		wg.Go(func() {
			lease, err := l.Acquire(timeout(t, 30*time.Second), "fifo")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			<-release
			_ = lease.Release(context.Background())
		})
		waitQueued(t, cli, lh.Key(), int64(i+1))
	}
	before := scriptCalls(t, cli)
	_ = lh.Release(context.Background())
	for range waiters {
		release <- struct{}{}
	}
	wg.Wait()
	calls := scriptCalls(t, cli) - before
	t.Logf("order %v; %d script calls for %d handoffs", order, calls, waiters)
	for i, w := range order {
		if w != i {
			t.Fatalf("acquisition order %v, want 0..%d", order, waiters-1)
		}
	}
	// One release per holder; a waiter's timed refresh may add a few.
	if calls > 2*(waiters+1) {
		t.Errorf("%d script calls for %d handoffs: waiters are polling or herding", calls, waiters)
	}
}

// TestClaim_YieldsToQueuedWaiter: a waiter queued behind a holder whose
// key vanished (a crash: the key expired) is first in line; a newcomer's
// claim (a plain SET NX) finds the key free and sets it, then sees the
// queue and hands the lock to that waiter instead of keeping it.
func TestClaim_YieldsToQueuedWaiter(t *testing.T) {
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	// Long TTLs: w's timed retry (a third of its TTL at the soonest, as
	// a's key had 30s left) must not be what gives it the lock.
	a := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("a"))
	w := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("w"))
	n := newLocker(t, srv.Addr, baton.WithHolder("newcomer"))
	la, err := a.Acquire(timeout(t, 5*time.Second), "queued")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *baton.Lease, 1)
	go func() {
		lw, err := w.Acquire(timeout(t, 10*time.Second), "queued")
		if err != nil {
			t.Error(err)
		}
		got <- lw
	}()
	waitQueued(t, cli, la.Key(), 1)
	if err := cli.Del(timeout(t, time.Second), la.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = n.TryAcquire(timeout(t, 5*time.Second), "queued")
	var na *baton.NotAcquiredError
	if !errors.As(err, &na) || na.Holder != "w" {
		t.Fatalf("newcomer's try: %v, want not acquired, held by w", err)
	}
	if lw := <-got; lw == nil || lw.Err() != nil {
		t.Fatalf("the queued waiter did not get the lock")
	}
	if v := cli.Get(timeout(t, time.Second), la.Key()).Val(); rediskit.HolderOf(v) != "w" {
		t.Fatalf("key holds %q, want w's value", v)
	}
}

// scriptCalls counts EVAL and EVALSHA calls the server has run.
func scriptCalls(t *testing.T, c *goredis.Client) int64 {
	t.Helper()
	info, err := c.Info(timeout(t, time.Second), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				var k int64
				for _, r := range rest {
					if r < '0' || r > '9' {
						break
					}
					k = k*10 + int64(r-'0')
				}
				n += k
			}
		}
	}
	return n
}

// TestScripts_NOSCRIPT: after SCRIPT FLUSH (or a server restart) EVALSHA
// answers NOSCRIPT and the scripts are sent again with EVAL.
func TestScripts_NOSCRIPT(t *testing.T) {
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	l := newLocker(t, srv.Addr, baton.WithTTL(time.Second))
	for i := range 2 {
		if err := cli.ScriptFlush(timeout(t, time.Second)).Err(); err != nil {
			t.Fatal(err)
		}
		lease, err := l.Acquire(timeout(t, 5*time.Second), "flushed")
		if err != nil {
			t.Fatalf("round %d: acquire after SCRIPT FLUSH: %v", i, err)
		}
		if err := cli.ScriptFlush(timeout(t, time.Second)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatalf("round %d: release after SCRIPT FLUSH: %v", i, err)
		}
		if n := cli.Exists(timeout(t, time.Second), lease.Key()).Val(); n != 0 {
			t.Fatalf("round %d: key left after release", i)
		}
	}

	// The uncontended Acquire above runs no script (its claim is a plain
	// SET). A queued attempt runs the acquire script after a flush, and a
	// release after another hands the lock to the queued waiter.
	flush := func() {
		t.Helper()
		if err := cli.ScriptFlush(timeout(t, time.Second)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	loaded := func(sha string) bool {
		t.Helper()
		ok, err := cli.ScriptExists(timeout(t, time.Second), sha).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ok[0]
	}
	var woken atomic.Int32
	redis.OnWake(l, func(string) { woken.Add(1) })
	h := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("h"))
	lh, err := h.Acquire(timeout(t, 5*time.Second), "queued")
	if err != nil {
		t.Fatal(err)
	}
	flush()
	type result struct {
		lease *baton.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		lease, err := l.Acquire(timeout(t, 10*time.Second), "queued")
		got <- result{lease, err}
	}()
	waitQueued(t, cli, lh.Key(), 1)
	if !loaded(redis.AcquireScriptHash) {
		t.Fatal("the waiter queued after SCRIPT FLUSH, but the acquire script is not loaded: it ran no script")
	}
	flush()
	if err := lh.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatalf("release with a waiter queued, after SCRIPT FLUSH: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiter, after a release that followed SCRIPT FLUSH: %v", r.err)
	}
	defer func() { _ = r.lease.Release(context.Background()) }()
	if woken.Load() == 0 {
		t.Error("the waiter got the lock without a handoff message")
	}

	// The renewal script, after a flush, is sent again: the lease lives
	// on past RenewEvery (its deadline moves on), and the script is back.
	flush()
	before := r.lease.Deadline()
	ctx := timeout(t, 5*time.Second)
	for !r.lease.Deadline().After(before) {
		select {
		case <-r.lease.Done():
			t.Fatalf("the lease ended at its first renewal after SCRIPT FLUSH: %v", r.lease.Err())
		case <-ctx.Done():
			t.Fatal("no renewal confirmed within 5s after SCRIPT FLUSH")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !loaded(redis.RenewScriptHash) {
		t.Error("the lease was renewed after SCRIPT FLUSH, but the renewal script is not loaded")
	}
	if err := r.lease.Err(); err != nil {
		t.Errorf("lease after a renewal that followed SCRIPT FLUSH: %v", err)
	}
}

func TestInspect_ForceRelease(t *testing.T) {
	srv := testsvc.StartRedis(t)
	l := newLocker(t, srv.Addr, baton.WithHolder("web-1:42"), baton.WithTTL(10*time.Second))
	insp := l.Backend().(baton.Inspector)
	fr := l.Backend().(baton.ForceReleaser)

	lease, err := l.Acquire(timeout(t, 5*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(timeout(t, 5*time.Second), "stock"); err != nil {
		t.Fatal(err)
	}
	infos, err := insp.Inspect(timeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Name != "invoices" || infos[1].Name != "stock" {
		t.Fatalf("Inspect() = %+v, want invoices and stock", infos)
	}
	if i := infos[0]; i.Holder != "web-1:42" || i.TTLLeft <= 9*time.Second || i.Key != "baton:lock:invoices" || i.Token != 0 {
		t.Errorf("Inspect invoices = %+v", i)
	}
	infos, err = insp.Inspect(timeout(t, 5*time.Second), "nobody")
	if err != nil || len(infos) != 1 || infos[0].Holder != "" {
		t.Fatalf("Inspect(nobody) = %+v, %v; want one free lock", infos, err)
	}
	// Waiters counts the live waiters, not an entry of one that died.
	cli := client(t, srv.Addr)
	w := newLocker(t, srv.Addr)
	_ = batontest.AcquireLater(timeout(t, time.Minute), w.Acquire, "stock")
	waitQueued(t, cli, "baton:lock:stock", 1)
	redistest.Plant(t, timeout(t, 5*time.Second), cli, "{baton:lock:stock}:q", "{baton:lock:stock}:w", "dead", 1, "00 1 1000 1 baton:wake:gone")
	infos, err = insp.Inspect(timeout(t, 5*time.Second), "stock")
	if err != nil || len(infos) != 1 || infos[0].Waiters != 1 {
		t.Fatalf("Inspect(stock) = %+v, %v; want one waiter, the live one", infos, err)
	}

	info, err := fr.ForceRelease(timeout(t, 5*time.Second), "invoices")
	if err != nil || info.Holder != "web-1:42" {
		t.Fatalf("ForceRelease = %+v, %v", info, err)
	}
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("holder not told within one renewal interval of a forced release")
	}
	if _, err := fr.ForceRelease(timeout(t, 5*time.Second), "invoices"); !errors.Is(err, baton.ErrNotAcquired) {
		t.Errorf("ForceRelease of a free lock = %v, want ErrNotAcquired", err)
	}
}

func TestOpen(t *testing.T) {
	srv := testsvc.StartRedis(t)
	u, _ := url.Parse(srv.URL() + "/3?ttl=2s&prefix=jobs:")
	l, err := redis.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, ok := l.Fenced(); ok {
		t.Fatal("a Redis Locker converts to a FencedLocker: it must not, it gives no tokens")
	}
	lease, err := l.Acquire(timeout(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	cli := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DB: 3})
	defer cli.Close()
	if pttl := cli.PTTL(timeout(t, time.Second), "jobs:x").Val(); pttl <= time.Second || pttl > 2*time.Second {
		t.Errorf("PTTL of jobs:x in db 3 = %v, want the URL's 2s TTL", pttl)
	}
}

func TestOpen_Unreachable(t *testing.T) {
	port := testsvc.ClosedPort(t) // refuses connections until the test ends
	u, _ := url.Parse("redis://app:secret@127.0.0.1:" + itoa(port))
	start := time.Now()
	_, err := redis.Open(context.Background(), u, baton.WithRequestTimeout(time.Second))
	if !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("Open on a closed port = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v to fail", d)
	}
	if strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), itoa(port)) {
		t.Errorf("error %q: want the address and no password", err)
	}
	// Refused at once: no wait of a second is claimed.
	if !strings.Contains(err.Error(), "cannot reach the server") || strings.Contains(err.Error(), "within") {
		t.Errorf("error %q: want it to say the server cannot be reached, not that it did not answer in time", err)
	}
}

// TestOpen_Refused: a server that answers but refuses the URL's database
// number or credentials is a configuration error (exit 2 from the CLI),
// reported at once and said to be one, not "no answer within 5s".
func TestOpen_Refused(t *testing.T) {
	srv := testsvc.StartRedis(t)
	for _, c := range []struct{ url, says string }{
		{"redis://" + srv.Addr + "/99", "DB index"},
		{"redis://app:secret@" + srv.Addr, "user:password"},
	} {
		u, _ := url.Parse(c.url)
		_, err := redis.Open(context.Background(), u)
		if !errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) {
			t.Errorf("Open(%s) = %v; want an invalid option, not unavailable", u.Redacted(), err)
			continue
		}
		if !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "within") {
			t.Errorf("Open(%s): %q; want it to say %q, without the password or a timeout", u.Redacted(), err, c.says)
		}
	}
}

// TestRequestTimeout_FrozenServer: an acquisition on a frozen server fails
// as unavailable within the request timeout, whether the client's own
// read timeout is far longer or the same (Open's client).
func TestRequestTimeout_FrozenServer(t *testing.T) {
	srv := testsvc.StartRedis(t)
	const limit = 300 * time.Millisecond
	slow := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = slow.Close() })
	own, err := redis.New(slow, baton.WithRequestTimeout(limit), baton.WithHolder("own"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Close() })
	u, _ := url.Parse(srv.URL())
	opened, err := redis.Open(timeout(t, 5*time.Second), u, baton.WithRequestTimeout(limit), baton.WithHolder("opened"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = opened.Close() })
	lockers := map[string]*baton.Locker{"client with a 1m read timeout": own, "Open's client": opened}
	for _, l := range lockers {
		if _, err := l.TryAcquire(timeout(t, 5*time.Second), "warm-"+l.Config().Holder); err != nil { // connect first
			t.Fatal(err)
		}
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	for name, l := range lockers {
		start := time.Now()
		_, err := l.TryAcquire(context.Background(), "frozen")
		if d := time.Since(start); !errors.Is(err, baton.ErrUnavailable) || d > limit+500*time.Millisecond {
			t.Errorf("%s: TryAcquire on a frozen server = %v after %v, want unavailable within about %v", name, err, d.Round(time.Millisecond), limit)
		}
	}
}

// observedHold starts an observer of name, then has a Locker with holder
// "a" and a 1s TTL take it, and checks the first two terms: no leader,
// then a. It returns a's lease and the observer's next term (waited for at
// most 10s).
func observedHold(t *testing.T, addr, name string) (*baton.Lease, func() string) {
	t.Helper()
	a := newLocker(t, addr, baton.WithTTL(time.Second), baton.WithHolder("a"))
	terms, err := newLocker(t, addr, baton.WithTTL(time.Second)).Observe(timeout(t, 30*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	next := func() string { t.Helper(); return batontest.NextLeader(t, terms, 10*time.Second) }
	if got := next(); got != "-" {
		t.Fatalf("first term %q, want no leader", got)
	}
	la, err := a.Acquire(timeout(t, 5*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "a" {
		t.Fatalf("term %q, want a", got)
	}
	return la, next
}

// TestObserve_Handoff: a release that hands the lock straight to a waiter
// is one change (A to B), with no empty term between, and a DEL from
// outside (an expiry) shows as no leader.
func TestObserve_Handoff(t *testing.T) {
	srv := testsvc.StartRedis(t)
	b := newLocker(t, srv.Addr, baton.WithTTL(time.Second), baton.WithHolder("b"))
	la, next := observedHold(t, srv.Addr, "mailer")
	got := make(chan *baton.Lease, 1)
	go func() {
		lb, err := b.Acquire(timeout(t, 10*time.Second), "mailer")
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	waitQueued(t, client(t, srv.Addr), la.Key(), 1)
	_ = la.Release(context.Background())
	if got := next(); got != "b" {
		t.Fatalf("after a handoff the term is %q, want b directly", got)
	}
	lb := <-got
	if err := client(t, srv.Addr).Del(timeout(t, time.Second), lb.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "-" {
		t.Fatalf("after the key vanished the term is %q, want no leader", got)
	}
}

// TestObserve_UnnotedClaim: a holder whose key is replaced by a claim that
// writes nothing to the change stream (its client died between its plain
// SET and the script that notes it) is reported by the next look at the
// key: the old term ends, the new holder follows.
func TestObserve_UnnotedClaim(t *testing.T) {
	srv := testsvc.StartRedis(t)
	la, next := observedHold(t, srv.Addr, "claimed")
	// a's key expires and a claim takes it at once, noting nothing.
	if err := client(t, srv.Addr).Set(timeout(t, time.Second), la.Key(), rediskit.NewValue("claimer"), 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "-" {
		t.Fatalf("after a's key was replaced the term is %q, want no leader", got)
	}
	if got := next(); got != "claimer" {
		t.Fatalf("then the term is %q, want the claim's holder", got)
	}
}

// TestObserve_StreamOnlyWhileObserved: a lock nobody observes writes no
// change stream; once an observer registers, every change is written.
func TestObserve_StreamOnlyWhileObserved(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := client(t, srv.Addr)
	l := newLocker(t, srv.Addr, baton.WithTTL(time.Second))
	cycle := func() string {
		t.Helper()
		le, err := l.Acquire(timeout(t, 5*time.Second), "quiet")
		if err != nil {
			t.Fatal(err)
		}
		if err := le.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		return le.Key()
	}
	key := cycle()
	stream := "{" + key + "}:o"
	if n := c.Exists(timeout(t, time.Second), stream).Val(); n != 0 {
		t.Fatalf("unobserved lock wrote its change stream %s", stream)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := newLocker(t, srv.Addr).Observe(ctx, "quiet"); err != nil {
		t.Fatal(err)
	}
	before := c.XLen(timeout(t, time.Second), stream).Val() // the holder as the observer came
	cycle()
	if n := c.XLen(timeout(t, time.Second), stream).Val() - before; n != 2 {
		t.Fatalf("observed lock: %d stream entries for one acquire and release, want 2", n)
	}
}

// TestObserve_EndsWithCtx: an observation on the caller's client (which
// baton does not close) ends as soon as its ctx does, though its XREAD
// blocks for up to observerRefresh and go-redis does not end a read at a
// cancellation.
func TestObserve_EndsWithCtx(t *testing.T) {
	srv := testsvc.StartRedis(t)
	l, err := redis.New(client(t, srv.Addr), baton.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	terms, err := l.Observe(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	if got := batontest.NextLeader(t, terms, 5*time.Second); got != "-" {
		t.Fatalf("first term %q, want no leader", got)
	}
	waitBlocked(t, client(t, srv.Addr))
	cancel()
	select {
	case _, ok := <-terms:
		if ok {
			t.Fatal("a term after the ctx ended")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the observation still runs 2s after its ctx ended")
	}
}

// TestObserve_CloseWithServerAway: Locker.Close ends an observation when
// the server stopped answering while the observer's read was blocked
// there (go-redis ends such a read only at its own deadline, and the quit
// entry cannot get through), and when Close returns the observation's
// goroutine and requests are over: the channel is closed, and no
// goroutine of it runs. On the client Open made, Close closes the client,
// which ends the read at once; on a caller's client, Close waits for it,
// at most RenewEvery and the request timeout. With Close waiting for the
// relay to see the backend's channel close, it took 30s; then Close
// returned at once while the observation's read ran on for 5s, on a
// client Close had closed.
func TestObserve_CloseWithServerAway(t *testing.T) {
	const requestTimeout = time.Second
	for _, tc := range []struct {
		name  string
		open  func(t *testing.T, addr string) *baton.Locker
		limit time.Duration // for Close
	}{
		{"Open's client", func(t *testing.T, addr string) *baton.Locker {
			u, _ := url.Parse("redis://" + addr)
			l, err := redis.Open(timeout(t, 5*time.Second), u, baton.WithTTL(time.Second)) // a 5s request timeout
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		}, 2 * time.Second},
		{"a caller's client", func(t *testing.T, addr string) *baton.Locker {
			return newLocker(t, addr, baton.WithTTL(time.Second), baton.WithRequestTimeout(requestTimeout))
		}, time.Second/3 + requestTimeout + 2*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testsvc.StartRedis(t)
			l := tc.open(t, srv.Addr)
			before := observationsAtWork()
			terms := observeThenFreeze(t, context.Background(), l, srv, "idle")
			closed := make(chan error, 1)
			start := time.Now()
			go func() { closed <- l.Close() }()
			select {
			case <-closed:
				t.Logf("Close returned after %v", time.Since(start).Round(time.Millisecond))
			case <-time.After(tc.limit):
				t.Fatalf("Close still waits %v later, with the server away", tc.limit)
			}
			if now := observationsAtWork(); len(now) > len(before) {
				t.Errorf("an observation still runs after Close returned:\n%s", strings.Join(now, "\n\n"))
			}
			select {
			case _, ok := <-terms:
				if ok {
					t.Fatal("a term after Close")
				}
			default:
				t.Fatal("the observation's channel is still open after Close returned")
			}
		})
	}
}

// TestObserve_EndsAtClose: when Locker.Close returns, the observations
// of a server that answers are over too, their requests included: no
// goroutine of theirs runs, their channels are closed, and on a caller's
// client (which Close leaves open) their quit streams are deleted. Close
// used to return while they ran on, sending requests to a client that
// Open's Locker had closed.
func TestObserve_EndsAtClose(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := client(t, srv.Addr)
	for _, opened := range []bool{false, true} {
		before := observationsAtWork()
		var l *baton.Locker
		if opened {
			u, _ := url.Parse(srv.URL())
			var err error
			if l, err = redis.Open(timeout(t, 5*time.Second), u, baton.WithTTL(time.Second)); err != nil {
				t.Fatal(err)
			}
		} else {
			var err error
			if l, err = redis.New(client(t, srv.Addr), baton.WithTTL(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		var chans []<-chan baton.Term
		for _, name := range []string{"x", "y", "z"} {
			terms, err := l.Observe(timeout(t, time.Minute), name)
			if err != nil {
				t.Fatal(err)
			}
			if got := batontest.NextLeader(t, terms, 5*time.Second); got != "-" {
				t.Fatalf("first term %q, want no leader", got)
			}
			chans = append(chans, terms)
		}
		waitBlockedN(t, c, 3)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if now := observationsAtWork(); len(now) > len(before) {
			t.Errorf("opened %v: %d observations still run after Close returned:\n%s", opened, len(now)-len(before), strings.Join(now, "\n\n"))
		}
		for _, terms := range chans {
			select {
			case _, ok := <-terms:
				if ok {
					t.Errorf("opened %v: a term after Close", opened)
				}
			default:
				t.Errorf("opened %v: an observation's channel is still open after Close returned", opened)
			}
		}
		if !opened {
			// Each observation deleted its quit stream before it ended.
			keys, err := c.Keys(timeout(t, 5*time.Second), "{"+redis.DefaultPrefix+"*}:x:*").Result()
			if err != nil || len(keys) != 0 {
				t.Errorf("quit streams left after Close returned: %q, %v", keys, err)
			}
		}
	}
}

// waitBlockedN waits until n clients of c's server are blocked
// (observers' XREADs).
func waitBlockedN(t *testing.T, c *goredis.Client, n int) {
	t.Helper()
	want := fmt.Sprintf("blocked_clients:%d\r\n", n)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.Info(timeout(t, time.Second), "clients").Val(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("not %d clients blocked within 10s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// observations returns the stacks of the goroutines that run an
// observation of the redis backend (or its quit entry's request).
func observations() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "redis.(*backend).observe") || strings.Contains(g, "redis.(*backend).Observe.func") {
			out = append(out, g)
		}
	}
	return out
}

// quitEntry is the frame of an observation's quit-entry goroutine
// (observe's AfterFunc). Close waits for its count, given up as its last
// deferred call (WaitGroup.Done, which wakes Close's Wait before it
// returns), so one seen after Close with only the runtime's and sync's
// frames above this one is done, and only returning (seen under load,
// runnable at its closing brace). One in any other frame is still at
// work: in a request, or in its cancel.
const quitEntry = "github.com/baton-go/baton/redis.(*backend).observe.func1()"

// observationsAtWork is observations without the quit-entry goroutines
// that are only returning.
func observationsAtWork() []string {
	var out []string
	for _, g := range observations() {
		if !onlyReturning(g) {
			out = append(out, g)
		}
	}
	return out
}

// TestOnlyReturning: the Close tests leave out a quit-entry goroutine only
// once its work is done.
func TestOnlyReturning(t *testing.T) {
	const file = "\n\t/x/observe.go:165 +0x245"
	for g, want := range map[string]bool{
		"goroutine 1 [runnable]:\n" + quitEntry + file + "\ncreated by context.(*afterFuncCtx).cancel.func1 in goroutine 2" + file: true,
		"goroutine 1 [runnable]:\nsync.(*WaitGroup).Done(0xc0)" + file + "\n" + quitEntry + file:                                   true,
		"goroutine 1 [select]:\ngithub.com/redis/go-redis/v9.(*baseClient).process(0xc0)" + file + "\n" + quitEntry + file:         false,
		"goroutine 1 [runnable]:\ncontext.(*cancelCtx).cancel(0xc0)" + file + "\n" + quitEntry + file:                              false,
		"goroutine 1 [IO wait]:\ngithub.com/baton-go/baton/redis.(*backend).observe(0xc0)" + file:                                  false,
	} {
		if got := onlyReturning(g); got != want {
			t.Errorf("onlyReturning(%q) = %v, want %v", g, got, want)
		}
	}
}

// onlyReturning reports whether the goroutine whose stack is g is a
// quit-entry goroutine past its work (see quitEntry).
func onlyReturning(g string) bool {
	lines := strings.Split(g, "\n")[1:]    // past the "goroutine N [state]:" line
	for i := 0; i+1 < len(lines); i += 2 { // a function, then its file:line
		switch fn := lines[i]; {
		case fn == quitEntry:
			return true
		case strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "sync.") || strings.HasPrefix(fn, "internal/"):
		default:
			return false
		}
	}
	return false
}

// TestObserve_FrozenServer_Ends: an observation whose server stops
// answering (frozen: its socket stays open) ends within RenewEvery and
// twice the request timeout (its read, then its look at the key), not
// reporting the last leader on for the 30s that go-redis gives a read
// blocked for observerRefresh.
func TestObserve_FrozenServer_Ends(t *testing.T) {
	srv := testsvc.StartRedis(t)
	const ttl, requestTimeout = time.Second, 300 * time.Millisecond
	l := newLocker(t, srv.Addr, baton.WithTTL(ttl), baton.WithRequestTimeout(requestTimeout))
	terms := observeThenFreeze(t, timeout(t, time.Minute), l, srv, "frozen")
	paused := time.Now()
	limit := l.Config().RenewEvery + 2*requestTimeout
	select {
	case tm, ok := <-terms:
		if ok {
			t.Fatalf("a term with the server frozen: %+v", tm)
		}
		t.Logf("the observation ended %v after the freeze (RenewEvery + 2 x request timeout: %v)", time.Since(paused).Round(time.Millisecond), limit)
	case <-time.After(limit + 2*time.Second):
		t.Fatalf("the observation still runs %v after the server froze", limit+2*time.Second)
	}
}

// TestObserve_StreamWentBack: after a failover to a replica that lacked
// the stream's last entries, its end is below the entry the observer read
// last, and entries added after it would come with lower IDs than that
// one, which its XREAD would never return. The observer goes on from the
// stream's end and reports the holder there is.
func TestObserve_StreamWentBack(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := client(t, srv.Addr)
	la, next := observedHold(t, srv.Addr, "failover")
	ctx := timeout(t, 10*time.Second)
	// What the replica had: b holds the lock, and the stream's last entry
	// is an old one, with an ID below every one the observer read.
	stream := "{" + la.Key() + "}:o"
	b := rediskit.NewValue("b")
	if _, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Del(ctx, stream)
		p.XAdd(ctx, &goredis.XAddArgs{Stream: stream, ID: "1-1", Values: []string{"v", b}})
		p.Set(ctx, la.Key(), b, 5*time.Second)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "-" {
		t.Fatalf("after the failover the term is %q, want no leader (a's term ended unseen)", got)
	}
	if got := next(); got != "b" {
		t.Fatalf("then the term is %q, want b", got)
	}
}

// observeThenFreeze has l observe name, a free lock, on srv, and once the
// observer's read is blocked on the server, freezes the server until t
// ends. It returns the terms after the first (no leader).
func observeThenFreeze(t *testing.T, ctx context.Context, l *baton.Locker, srv *testsvc.Redis, name string) <-chan baton.Term {
	t.Helper()
	terms, err := l.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := batontest.NextLeader(t, terms, 5*time.Second); got != "-" {
		t.Fatalf("first term %q, want no leader", got)
	}
	waitBlocked(t, client(t, srv.Addr))
	srv.Pause()
	t.Cleanup(srv.Resume)
	return terms
}

// waitBlocked waits until a client of c's server is blocked (an
// observer's XREAD).
func waitBlocked(t *testing.T, c *goredis.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.Info(timeout(t, time.Second), "clients").Val(), "blocked_clients:1") {
		if time.Now().After(deadline) {
			t.Fatal("no client blocked within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestObserve_StreamGoneThenHolderCrashes: a leader that keeps the lock
// longer than the change stream's own expiry (a day; no change of holder
// writes to it meanwhile) outlives the stream, and then crashes. The
// observer must still report "no leader" once its key runs out. Before,
// with the stream gone, it showed the dead leader until the next change,
// re-reading the lock's state about ten times a second meanwhile. The
// day is stood for by deleting the stream, as an eviction would.
func TestObserve_StreamGoneThenHolderCrashes(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := client(t, srv.Addr)
	ca := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	a, err := redis.New(ca, baton.WithTTL(time.Second), baton.WithHolder("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	terms, err := newLocker(t, srv.Addr, baton.WithTTL(time.Second)).Observe(timeout(t, 30*time.Second), "long")
	if err != nil {
		t.Fatal(err)
	}
	next := func() string { t.Helper(); return batontest.NextLeader(t, terms, 10*time.Second) }
	if got := next(); got != "-" {
		t.Fatalf("first term %q, want no leader", got)
	}
	la, err := a.Acquire(timeout(t, 5*time.Second), "long")
	if err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "a" {
		t.Fatalf("term %q, want a", got)
	}
	if err := c.Del(timeout(t, time.Second), "{"+la.Key()+"}:o").Err(); err != nil {
		t.Fatal(err)
	}
	_ = ca.Close() // a crashes: its key runs out within its TTL
	if got := next(); got != "-" {
		t.Fatalf("after a crashed, term %q, want no leader", got)
	}
}

// TestObserve_RegistrationLapsed: when the observers' registration is gone
// (nobody looked for a minute, or the key was lost to a failover or an
// eviction), changes go unwritten. The next observer to look, the same one
// when its TTL-bound wait ends or another one that starts observing,
// appends the holder there is, and every observer reports it, not a stale
// one and not "no leader".
func TestObserve_RegistrationLapsed(t *testing.T) {
	for _, another := range []bool{false, true} {
		t.Run(map[bool]string{false: "self", true: "another"}[another], func(t *testing.T) {
			srv := testsvc.StartRedis(t)
			c := client(t, srv.Addr)
			a := newLocker(t, srv.Addr, baton.WithTTL(time.Second), baton.WithHolder("a"))
			b := newLocker(t, srv.Addr, baton.WithTTL(time.Second), baton.WithHolder("b"))
			terms, err := newLocker(t, srv.Addr).Observe(timeout(t, 30*time.Second), "lapse")
			if err != nil {
				t.Fatal(err)
			}
			next := func() string { t.Helper(); return batontest.NextLeader(t, terms, 10*time.Second) }
			if got := next(); got != "-" {
				t.Fatalf("first term %q, want no leader", got)
			}
			la, err := a.Acquire(timeout(t, 5*time.Second), "lapse")
			if err != nil {
				t.Fatal(err)
			}
			if got := next(); got != "a" {
				t.Fatalf("term %q, want a", got)
			}
			// The observer registers again after every read: wait until it
			// blocks in its next one, then take the registration away.
			waitBlockedXRead(t, c)
			reg := "{" + la.Key() + "}:n"
			if err := c.Del(timeout(t, 5*time.Second), reg).Err(); err != nil {
				t.Fatal(err)
			}
			_ = la.Release(context.Background())
			if _, err := b.Acquire(timeout(t, 5*time.Second), "lapse"); err != nil {
				t.Fatal(err)
			}
			if another {
				if _, err := newLocker(t, srv.Addr).Observe(timeout(t, 30*time.Second), "lapse"); err != nil {
					t.Fatal(err)
				}
			}
			// Nothing was written for the release and b's acquisition.
			if got := next(); got != "b" {
				t.Fatalf("after the lapse the term is %q, want b", got)
			}
			if n := c.Exists(timeout(t, time.Second), reg).Val(); n != 1 {
				t.Fatal("the observers did not register again")
			}
		})
	}
}

// TestObserve_SlowReader_KeepsRegistration: a reader away for several
// times the observers' registration TTL misses no change: the
// observation, waiting to hand it a term, renews the registration (its
// PTTL goes back up even 2 TTLs into the reader's absence), so the
// scripts go on writing changes to the stream. Before, the registration
// lapsed while the reader was away, and of the changes made then only the
// last holder was reported.
func TestObserve_SlowReader_KeepsRegistration(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := client(t, srv.Addr)
	const ttl = time.Second
	missed := &trimWarnings{}
	obs := newLocker(t, srv.Addr, baton.WithLogger(slog.New(missed)))
	redis.SetObserverTiming(obs, ttl, ttl/4)
	lockers := map[string]*baton.Locker{}
	for _, h := range []string{"a", "b", "c"} {
		lockers[h] = newLocker(t, srv.Addr, baton.WithTTL(time.Second), baton.WithHolder(h))
	}
	ctx := timeout(t, 30*time.Second)
	terms, err := obs.Observe(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	next := func() string { t.Helper(); return batontest.NextLeader(t, terms, 10*time.Second) }
	if got := next(); got != "-" {
		t.Fatalf("first term %q, want no leader", got)
	}
	acquire := func(h string) *baton.Lease {
		t.Helper()
		l, err := lockers[h].Acquire(ctx, "slow")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	la := acquire("a")
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The reader is away: the Locker's relay holds a's term, and the
	// observation waits to hand it the next one, no leader. Nothing else
	// registers: a PTTL higher than at the read before is a renewal made
	// since that read was sent. One seen after a read sent 2 TTLs into
	// the reader's absence shows the observation renews for as long as
	// the reader is away; without its renewals the registration is gone
	// a TTL after the reader left. The reader stays away 3 TTLs, or until
	// such a renewal is seen: a stall of the machine can delay it, not
	// fake it.
	reg := "{" + la.Key() + "}:n"
	away := time.Now()
	sentAt, prev := away, c.PTTL(ctx, reg).Val()
	if prev < 0 {
		t.Fatalf("no registration (PTTL %v) as the reader went away", prev)
	}
	renewals := 0
	var renewedLate time.Duration // when the first renewal after 2 TTLs away was seen
	for {
		if gone := time.Since(away); gone >= 3*ttl && renewedLate > 0 {
			break
		} else if gone >= 10*ttl {
			t.Fatalf("the registration was not renewed after the reader had been away %v (renewed %d times before): it lapses while the reader is away", 2*ttl, renewals)
		}
		time.Sleep(20 * time.Millisecond)
		at := time.Now()
		pttl := c.PTTL(ctx, reg).Val()
		if pttl < 0 { // gone: re-created later, it would pass for a renewal
			t.Fatalf("the registration is gone (PTTL %v) %v after the reader went away", pttl, time.Since(away).Round(time.Millisecond))
		}
		if pttl > prev {
			renewals++
			if renewedLate == 0 && sentAt.Sub(away) >= 2*ttl {
				renewedLate = time.Since(away)
			}
		}
		sentAt, prev = at, pttl
	}
	t.Logf("reader away %v: the registration was renewed %d times, seen after 2 TTLs at +%v", time.Since(away).Round(time.Millisecond), renewals, renewedLate.Round(time.Millisecond))
	if err := acquire("b").Release(ctx); err != nil {
		t.Fatal(err)
	}
	lc := acquire("c")
	defer lc.Release(ctx)
	for _, want := range []string{"a", "-", "b", "-", "c"} {
		if got := next(); got != want {
			t.Fatalf("term %q, want %q: terms a, none, b, none, c in order", got, want)
		}
	}
	// Once it reads the stream again, the observation has looked at the
	// key after c's term: had it counted a gap, it would have said so.
	waitBlockedXRead(t, c)
	flushLog(t, obs)
	if n := missed.warnings.Load(); n != 0 {
		t.Fatalf("%d warnings of %d changes missed, with none missed", n, missed.missed.Load())
	}
}

// TestObserve_SlowReader_PastTheCap: a reader that falls further behind
// than the change stream's cap misses the changes trimmed before it read
// them, and the observation says how many; before, they went unsaid.
// Every change counts: the entries the observation read and the changes
// the warnings name add up to the entries added to the stream.
func TestObserve_SlowReader_PastTheCap(t *testing.T) {
	f := farBehind(t)
	got := 0
	for last := ""; last != "z"; got++ {
		last = batontest.NextLeader(t, f.terms, 10*time.Second)
	}
	// Blocked in XREAD again, the observation has looked at the stream
	// after reading its last entry: every warning is out.
	waitBlockedXRead(t, f.c)
	flushLog(t, f.obs)
	n, read := f.missed.missed.Load(), redis.ObservedEntries(f.obs)
	if n == 0 || read+n != f.changes {
		t.Fatalf("the observation read %d entries (%d terms) and its warnings say %d changes were missed; the stream had %d changes", read, got, n, f.changes)
	}
	t.Logf("%d changes: %d read (%d terms), %d missed, in %d warnings", f.changes, read, got, n, f.missed.warnings.Load())
}

// TestObserve_SlowReader_StaysBehind: the warning of changes trimmed
// unread comes while the reader is still behind, not only once it has
// caught up (which a reader that stays behind never does).
func TestObserve_SlowReader_StaysBehind(t *testing.T) {
	f := farBehind(t)
	// The observation looks at the stream once it has handed over the
	// rest of the batch it read before the reader left: at most 64 terms.
	for i := 0; f.missed.warnings.Load() == 0; i++ {
		if i == 70 {
			t.Fatal("70 terms read, and no warning of the changes trimmed unread")
		}
		if batontest.NextLeader(t, f.terms, 10*time.Second) == "z" {
			t.Fatal("the reader caught up before any warning of the changes trimmed unread")
		}
	}
}

// behind is an observation whose reader was away while a holder took and
// released the lock 150 times (300 changes, past the stream's cap of 64
// and the hundred more that trimming by whole nodes may keep), and z then
// took it.
type behind struct {
	c       *goredis.Client
	obs     *baton.Locker
	terms   <-chan baton.Term
	missed  *trimWarnings
	changes int64 // entries added to the stream since the reader left
}

func farBehind(t *testing.T) behind {
	t.Helper()
	srv := testsvc.StartRedis(t)
	f := behind{c: client(t, srv.Addr), missed: &trimWarnings{}}
	f.obs = newLocker(t, srv.Addr, baton.WithLogger(slog.New(f.missed)))
	a := newLocker(t, srv.Addr, baton.WithHolder("a"))
	z := newLocker(t, srv.Addr, baton.WithHolder("z"))
	ctx := timeout(t, 60*time.Second)
	var err error
	if f.terms, err = f.obs.Observe(ctx, "far"); err != nil {
		t.Fatal(err)
	}
	if got := batontest.NextLeader(t, f.terms, 10*time.Second); got != "-" {
		t.Fatalf("first term %q, want no leader", got)
	}
	stream := "{" + redis.DefaultPrefix + "far}:o"
	added := func() int64 {
		t.Helper()
		info, err := f.c.XInfoStream(ctx, stream).Result()
		if err != nil {
			t.Fatal(err)
		}
		return info.EntriesAdded
	}
	before := added()
	if before == 0 { // the observation's first look added an entry
		t.Skip("this redis-server does not count a stream's entries (XINFO STREAM entries-added, from Redis 7): an observer cannot count the changes it missed")
	}
	for range 150 {
		l, err := a.Acquire(ctx, "far")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lz, err := z.Acquire(ctx, "far")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lz.Release(context.Background()) })
	f.changes = added() - before
	return f
}

// trimWarnings is a slog.Handler that adds up the warnings that an
// observer's reader missed trimmed changes, and drops every record.
type trimWarnings struct{ warnings, missed atomic.Int64 }

func (w *trimWarnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *trimWarnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *trimWarnings) WithGroup(string) slog.Handler            { return w }

func (w *trimWarnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, "trimmed") {
		w.warnings.Add(1)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "missed" {
				w.missed.Add(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}

// waitBlockedXRead waits until a client of the server is blocked in XREAD.
func waitBlockedXRead(t *testing.T, c *goredis.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := c.ClientList(timeout(t, 5*time.Second)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " cmd=xread") && strings.Contains(line, " flags=b ") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no client blocked in XREAD within 10s: %s", list)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRenewal_FailureEndsLeaseAtOnce: a renewal that fails (the server is
// gone: connection refused) ends the lease at that renewal, long before
// the local deadline, as a refused one does.
func TestRenewal_FailureEndsLeaseAtOnce(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	const ttl = 3 * time.Second
	l := newLocker(t, srv.Addr, baton.WithTTL(ttl)) // renews every second
	lease, err := l.Acquire(timeout(t, 5*time.Second), "gone")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	early := batontest.LostBeforeDeadline(t, lease, 2*ttl)
	// The first renewal is due a third of the TTL after the acquisition;
	// its failure ends the lease then, not at the deadline.
	if early < ttl/3 {
		t.Errorf("lost only %v before the local deadline: the failed renewal was retried", early)
	}
	var lost *baton.LostError
	if !errors.As(lease.Err(), &lost) || !errors.Is(lease.Err(), baton.ErrUnavailable) {
		t.Errorf("Err = %v, want a *LostError naming the failure", lease.Err())
	}
}

// TestHandoff_SkipsDeadWaiter: a waiter partitioned from the server while
// queued (or crashed) cannot leave the queue; once its entry has gone a
// TTL without a refresh, a release passes it by and hands the lock to the
// live waiter behind it, and drops the dead entry.
func TestHandoff_SkipsDeadWaiter(t *testing.T) {
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	a := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second))
	la, err := a.Acquire(timeout(t, 5*time.Second), "dead")
	if err != nil {
		t.Fatal(err)
	}

	const deadTTL = time.Second
	px := testsvc.NewProxy(t, srv.Addr)
	dead := newLocker(t, px.Addr(), baton.WithTTL(deadTTL), baton.WithHolder("dead"), baton.WithReleaseTimeout(100*time.Millisecond))
	deadCtx, cancelDead := context.WithCancel(context.Background())
	deadDone := make(chan error, 1)
	go func() {
		_, err := dead.Acquire(deadCtx, "dead")
		deadDone <- err
	}()
	waitQueued(t, cli, la.Key(), 1)

	// The live waiter's TTL is long enough that it makes no attempt of its
	// own while the test waits (it looks again every RenewEvery): such an
	// attempt would drop the dead entry once it ran out, before the
	// release this test is about.
	live := newLocker(t, srv.Addr, baton.WithTTL(5*time.Minute), baton.WithHolder("live"))
	type result struct {
		l   *baton.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := live.Acquire(timeout(t, 30*time.Second), "dead")
		got <- result{l, err}
	}()
	waitQueued(t, cli, la.Key(), 2)

	// Cut off, the dead waiter refreshes its entry no more: wait until
	// the entry has run out by the server's clock, as the release script
	// will judge it (a refresh the proxy let through just before Block
	// moves that moment, and is read with the entry).
	px.Block()
	cancelDead()
	if err := <-deadDone; err == nil {
		t.Fatal("the partitioned waiter acquired")
	}
	redistest.WaitEntriesRunOut(t, cli, "{"+la.Key()+"}:w", "dead", 10*time.Second)
	if n := cli.ZCard(timeout(t, time.Second), "{"+la.Key()+"}:q").Val(); n != 2 {
		t.Fatalf("%d entries queued before the release, want the dead and the live waiter's", n)
	}

	if err := la.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	v, err := cli.Get(timeout(t, time.Second), la.Key()).Result()
	if err != nil {
		t.Fatalf("the lock is free after the release (%v); it should have been handed to the live waiter", err)
	}
	if h := rediskit.HolderOf(v); h != "live" {
		t.Fatalf("the release handed the lock to %q, want the live waiter", h)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.l.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"{" + la.Key() + "}:q", "{" + la.Key() + "}:w"} {
		if n, _ := cli.Exists(timeout(t, time.Second), key).Result(); n != 0 {
			t.Errorf("%s still exists after both entries left", key)
		}
	}
}

// TestClaim_ResentScriptHandsNothingLate: go-redis sends a request again,
// on another connection, after a read timeout (MaxRetries at its default),
// while the first copy may still be on its way. A newcomer's claim that
// found a mark (a queue, an observer) runs the acquire script after its
// SET; a late first copy of that script must change nothing once the
// newcomer holds the lock and another client waits.
//
// n's claim takes the free key, and its script's first copy is held back
// in the network past n's client's read timeout (1s), so the copy sent
// again decides. Then n holds, x queues behind n, and the first copy
// lands: the key must still be n's.
func TestClaim_ResentScriptHandsNothingLate(t *testing.T) {
	// reserved: a holds, w queues, a's key goes: the lock is free but
	// w's. n's claim yields it to w (its release hands it over), n queues
	// and w releases to n.
	t.Run("reserved for a waiter", func(t *testing.T) {
		resentClaim(t, func(t *testing.T, ctx context.Context, env claimEnv) {
			la, err := env.a.Acquire(ctx, "resent")
			if err != nil {
				t.Fatal(err)
			}
			wGot := env.acquire(env.w)
			waitQueued(t, env.cli, la.Key(), 1)
			if err := env.cli.Del(ctx, la.Key()).Err(); err != nil {
				t.Fatal(err)
			}
			env.claim()
			rw := <-wGot
			if rw.err != nil {
				t.Fatal(rw.err)
			}
			waitQueued(t, env.cli, la.Key(), 1) // n
			if err := rw.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
	// observed: only an observer's mark is there; the copy sent again
	// keeps the key for n.
	t.Run("observed", func(t *testing.T) {
		resentClaim(t, func(t *testing.T, ctx context.Context, env claimEnv) {
			if err := env.cli.Set(ctx, "{"+redis.DefaultPrefix+"resent}:n", "1", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			env.claim()
		})
	})
}

// claimEnv is what resentClaim gives its scenario.
type claimEnv struct {
	cli     *goredis.Client
	a, w    *baton.Locker
	acquire func(l *baton.Locker) <-chan acquired
	claim   func() // starts n's Acquire and waits for its script to be held
}

type acquired struct {
	l   *baton.Lease
	err error
}

// resentClaim runs a scenario that leads to n's claim (env.claim), then
// waits for n to hold, queues x, delivers the held first copy of n's
// script, and checks that n still holds the key and x waits.
func resentClaim(t *testing.T, scenario func(t *testing.T, ctx context.Context, env claimEnv)) {
	srv := testsvc.StartRedis(t)
	ctx := timeout(t, 30*time.Second)
	px := testsvc.NewProxy(t, srv.Addr)
	resending := goredis.NewClient(&goredis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, MaxRetries: 2, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = resending.Close() })
	n, err := redis.New(resending, baton.WithTTL(30*time.Second), baton.WithRequestTimeout(5*time.Second), baton.WithHolder("n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	env := claimEnv{
		cli: client(t, srv.Addr),
		a:   newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("a")),
		w:   newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("w")),
	}
	x := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("x"))
	env.acquire = func(l *baton.Locker) <-chan acquired {
		ch := make(chan acquired, 1)
		go func() {
			lease, err := l.Acquire(ctx, "resent")
			ch <- acquired{lease, err}
		}()
		return ch
	}
	// The acquire script must be loaded for the held EVALSHA to run.
	if err := redis.LoadAcquireScript(ctx, env.cli); err != nil {
		t.Fatal(err)
	}
	held := px.HoldFirst([]byte(redis.AcquireScriptHash))
	var nGot <-chan acquired
	env.claim = func() {
		nGot = env.acquire(n)
		select {
		case <-held.Caught():
		case r := <-nGot:
			t.Fatalf("n's Acquire returned before its claim's script was held: %v", r.err)
		case <-ctx.Done():
			t.Fatal("n's claim's script not seen within 30s")
		}
	}
	scenario(t, ctx, env)

	rn := <-nGot
	if rn.err != nil {
		t.Fatal(rn.err)
	}
	key := rn.l.Key()
	xGot := env.acquire(x)
	waitQueued(t, env.cli, key, 1) // x
	held.Deliver(t, ctx)
	if v := env.cli.Get(ctx, key).Val(); rediskit.HolderOf(v) != "n" {
		t.Errorf("after the late copy of n's claim script the key holds %q; want n's", rediskit.HolderOf(v))
	}
	select {
	case rx := <-xGot:
		t.Fatalf("x acquired while n holds (err %v)", rx.err)
	default:
	}
	if err := rn.l.Release(ctx); err != nil {
		t.Error(err)
	}
	if rx := <-xGot; rx.err != nil {
		t.Error(rx.err)
	}
}

// TestForceRelease_AnswerLost: a forced release whose delete ran but whose
// answer was lost sends it again, finds the key no longer the holder's,
// and reports the release done. Told that it failed, an operator would
// force again, and free the next holder's lock.
func TestForceRelease_AnswerLost(t *testing.T) {
	srv := testsvc.StartRedis(t)
	holder := newLocker(t, srv.Addr, baton.WithHolder("web-1:42"), baton.WithTTL(10*time.Second))
	lease, err := holder.Acquire(timeout(t, 5*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, srv.Addr)
	if err := redis.LoadForceScript(timeout(t, 5*time.Second), c); err != nil {
		t.Fatal(err)
	}
	drop := &redistest.DropAnswer{SHA: redis.ForceScriptHash}
	op := hookedLocker(t, srv.Addr, drop)
	drop.Armed.Store(true)
	info, err := op.Backend().(baton.ForceReleaser).ForceRelease(timeout(t, 10*time.Second), "invoices")
	if drop.Armed.Load() {
		t.Fatal("no answer was dropped")
	}
	if err != nil || info.Holder != "web-1:42" {
		t.Fatalf("forced release across a lost answer: %+v, %v; want web-1:42's released", info, err)
	}
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the forced holder's lease did not end")
	}
}

// TestRelease_KeyGoneIsALoss: a Release that finds the key no longer the
// lease's (deleted by an operator here; expired early after a server clock
// jump, or taken by another client, alike) before any renewal said so
// reports the loss: Err is a *LostError, not ErrReleased, so Run and the
// CLI do not report work that may have overlapped another holder's as done.
// A clean release is no loss.
func TestRelease_KeyGoneIsALoss(t *testing.T) {
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	l := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second)) // no renewal within the test
	ctx := timeout(t, 10*time.Second)
	lease, err := l.Acquire(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Del(ctx, lease.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release of a lease whose key was deleted: %v; want nil (the loss is Err's)", err)
	}
	var lost *baton.LostError
	if err := lease.Err(); !errors.As(err, &lost) || !errors.Is(err, baton.ErrLeaseLost) {
		t.Fatalf("Err after a release that found the key gone: %v; want a *LostError", err)
	}
	clean, err := l.Acquire(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := clean.Release(ctx); err != nil || !errors.Is(clean.Err(), baton.ErrReleased) {
		t.Fatalf("clean release: %v, Err %v; want nil, ErrReleased", err, clean.Err())
	}
}

// TestRelease_FailedWhileRenewalRefused_IsALoss: the key was deleted while
// the lease was held; the release gets no answer, and while it is on its
// way a renewal is refused. The loss is reported, not a clean release
// (before, Release returned nil and Err said ErrReleased).
func TestRelease_FailedWhileRenewalRefused_IsALoss(t *testing.T) {
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	hook := redistest.NewFailAfterRefusal(redis.ReleaseScriptHash, redis.RenewScriptHash, 1)
	l := hookedLocker(t, srv.Addr, hook, baton.WithTTL(3*time.Second))
	ctx := timeout(t, 30*time.Second)
	lease, err := l.Acquire(ctx, "swallow")
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Del(ctx, lease.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	hook.Armed.Store(true)
	rerr := lease.Release(ctx)
	hook.Armed.Store(false)
	var lost *baton.LostError
	if err := lease.Err(); !errors.As(err, &lost) || !strings.Contains(err.Error(), "release failed") {
		t.Fatalf("Release = %v, Err = %v; want Err the loss, saying the release failed too", rerr, err)
	}
}

// TestRelease_TimeoutSaysReleaseTimeout: a release cut off by the release
// timeout says so, with that timeout, not the request timeout.
func TestRelease_TimeoutSaysReleaseTimeout(t *testing.T) {
	srv := testsvc.StartRedis(t)
	delay := &delayScripts{d: 600 * time.Millisecond}
	l := hookedLocker(t, srv.Addr, delay, baton.WithTTL(30*time.Second), baton.WithReleaseTimeout(200*time.Millisecond))
	lease, err := l.Acquire(timeout(t, 10*time.Second), "msg")
	if err != nil {
		t.Fatal(err)
	}
	delay.armed.Store(true)
	err = lease.Release(context.Background())
	delay.armed.Store(false)
	if err == nil || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Fatalf("Release = %v; want it to say no answer within the 200ms release timeout", err)
	}
}

// delayScripts is a go-redis hook that holds back every script call
// (EVALSHA) for d once armed, as a stalled network would.
type delayScripts struct {
	redistest.ProcessOnly
	d     time.Duration
	armed atomic.Bool
}

func (h *delayScripts) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if args := cmd.Args(); h.armed.Load() && len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}

// TestRelease_SlowCleanReleaseIsNoLoss: a Release made before the local
// deadline, on a network that stalls it and the renewal alike, reaches
// the server after the key ran out: the work stopped before the deadline
// and nobody took the key, so the answer, which comes after the deadline,
// is no evidence of a loss.
func TestRelease_SlowCleanReleaseIsNoLoss(t *testing.T) {
	srv := testsvc.StartRedis(t)
	delay := &delayScripts{d: 1500 * time.Millisecond}
	l := hookedLocker(t, srv.Addr, delay, baton.WithTTL(time.Second), baton.WithRenewEvery(950*time.Millisecond), baton.WithRequestTimeout(5*time.Second), baton.WithReleaseTimeout(5*time.Second))
	ctx := timeout(t, 20*time.Second)
	lease, err := l.Acquire(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	delay.armed.Store(true)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lease.Err(), baton.ErrReleased) {
		t.Fatalf("Err after a slow clean release: %v; want ErrReleased", lease.Err())
	}
}

// stallRenewals holds back renewal scripts (EVALSHA with 1 key) until
// their context's deadline, as go-redis does on a stalled connection
// (it sets the read deadline from ctx's deadline; cancellation does not
// interrupt a read).
type stallRenewals struct {
	redistest.ProcessOnly
	armed   atomic.Bool
	once    sync.Once
	stalled chan struct{} // closed when the first renewal is held
}

func (h *stallRenewals) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		args := cmd.Args()
		if h.armed.Load() && len(args) > 2 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && fmt.Sprint(args[2]) == "1" {
			h.once.Do(func() { close(h.stalled) })
			if d, ok := ctx.Deadline(); ok {
				time.Sleep(time.Until(d))
			}
			return context.DeadlineExceeded
		}
		return next(ctx, cmd)
	}
}

// TestRelease_LossFoundWhileRenewalStalled: a key deleted by another
// client is found by a Release whose answer comes well before the local
// deadline, while a renewal is stalled in flight (which the release waits
// for as it stops the keeper, until about the deadline): the loss counts
// by when the release's answer came, not when the wait ended.
func TestRelease_LossFoundWhileRenewalStalled(t *testing.T) {
	srv := testsvc.StartRedis(t)
	admin := client(t, srv.Addr)
	st := &stallRenewals{stalled: make(chan struct{})}
	l := hookedLocker(t, srv.Addr, st, baton.WithTTL(2*time.Second), baton.WithRenewEvery(500*time.Millisecond))
	ctx := timeout(t, 20*time.Second)
	lease, err := l.Acquire(ctx, "stalled")
	if err != nil {
		t.Fatal(err)
	}
	st.armed.Store(true)
	select {
	case <-st.stalled: // a renewal is now stalled in flight
	case <-ctx.Done():
		t.Fatal("no renewal was sent")
	}
	if err := admin.Del(ctx, lease.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = lease.Release(ctx)
	t.Logf("Release took %v (deadline was %v away at start); err %v; Err %v", time.Since(start).Round(time.Millisecond), time.Until(lease.Deadline()), err, lease.Err())
	if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
		t.Fatalf("Err after a release that found the key deleted: %v; want a loss", lease.Err())
	}
}

// TestAcquire_CallerDeadline_NotUnavailable: go-redis puts the context's
// deadline on the socket, so a request to a server that does not answer
// fails at that instant, often before the context's own timer has fired.
// The acquisition must still report the caller's deadline
// (context.DeadlineExceeded), not the service failing (ErrUnavailable):
// callers back off and alert on the one, not the other.
func TestAcquire_CallerDeadline_NotUnavailable(t *testing.T) {
	srv := testsvc.StartRedis(t)
	l := newLocker(t, srv.Addr, baton.WithTTL(time.Second))
	lease, err := l.TryAcquire(timeout(t, 5*time.Second), "x") // connected, scripts loaded
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	const rounds = 40
	bad := 0
	for i := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := l.TryAcquire(ctx, "x")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, baton.ErrUnavailable) {
			bad++
			t.Logf("round %d: %v", i, err)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d acquisitions cut off by the caller's deadline were reported otherwise", bad, rounds)
	}
}

// TestUnansweredClaim_Undone: a claim that ran on the server but whose
// answer never came back (dropped, or still on its way when the caller
// gave up) is undone: otherwise our value would hold the lock for one TTL
// after the caller was told it did not get it.
func TestUnansweredClaim_Undone(t *testing.T) {
	srv := testsvc.StartRedis(t)
	for _, untilDone := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancelled=%v", untilDone), func(t *testing.T) {
			drop := &redistest.DropClaimAnswer{UntilDone: untilDone}
			drop.Armed.Store(true)
			ghost := hookedLocker(t, srv.Addr, drop, baton.WithTTL(10*time.Second), baton.WithHolder("ghost"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				<-drop.Caught()
				cancel()
			}()
			if _, err := ghost.TryAcquire(ctx, "g"); err == nil {
				t.Fatal("acquired without an answer")
			}
			select {
			case <-drop.Caught():
			default:
				t.Fatal("the claim was not caught")
			}
			other := newLocker(t, srv.Addr, baton.WithTTL(10*time.Second), baton.WithHolder("other"))
			lease, err := other.Acquire(timeout(t, 5*time.Second), "g")
			if err != nil {
				t.Fatalf("after the failed claim the lock should be free within the undo: %v", err)
			}
			if lease.Holder() != "other" {
				t.Errorf("holder %q", lease.Holder())
			}
			_ = lease.Release(timeout(t, 5*time.Second))
		})
	}
}

// TestRenewal_RefusedOnAnothersKey: a renewal that arrives after the key
// ran out early and another client took it must neither extend nor
// shorten the new holder's key, and must end the old lease. The old
// holder's renewal is held back on the wire until the new holder has the
// key, so that it meets the new holder's value (a renewal that met no key
// is refused by any script, with or without the value's compare).
func TestRenewal_RefusedOnAnothersKey(t *testing.T) {
	srv := testsvc.StartRedis(t)
	// A's TTL is long and its first renewal early: that renewal is held
	// while B takes the lock, and with a 1s TTL A's local deadline came
	// 650ms later, which a loaded machine could pass before B held.
	const ttlA = 10 * time.Second
	hold := redistest.NewHoldScript(redis.RenewScriptHash)
	defer hold.Let()
	a := hookedLocker(t, srv.Addr, hold, baton.WithTTL(ttlA), baton.WithRenewEvery(200*time.Millisecond), baton.WithHolder("old"))
	b := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("new"))
	cli := client(t, srv.Addr)

	la, err := a.Acquire(timeout(t, 5*time.Second), "stock")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.Waiting(): // A's first renewal is due, and held
	case <-time.After(5 * time.Second):
		t.Fatal("A sent no renewal")
	}
	if err := cli.PExpire(timeout(t, 5*time.Second), la.Key(), time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	var lb *baton.Lease
	for lb == nil { // the key ends within a millisecond; Redis may take a moment to notice
		lb, err = b.TryAcquire(timeout(t, 5*time.Second), "stock")
		if err != nil && !errors.Is(err, baton.ErrNotAcquired) {
			t.Fatal(err)
		}
		if la.Err() != nil {
			t.Fatalf("A's lease ended before its renewal was let go: %v", la.Err())
		}
	}
	defer lb.Release(context.Background())
	hold.Let()
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A's renewal met B's key and A's lease goes on: the renewal extended another's key")
	}
	if !errors.Is(la.Err(), baton.ErrLeaseLost) || !strings.Contains(la.Err().Error(), "no longer holds") {
		t.Errorf("A's Err = %v, want a refused renewal", la.Err())
	}
	ctx := timeout(t, 5*time.Second)
	if v, err := cli.Get(ctx, lb.Key()).Result(); err != nil || !strings.HasSuffix(v, " new") {
		t.Fatalf("B's key = %q, %v; want B's value", v, err)
	}
	if pttl := cli.PTTL(ctx, lb.Key()).Val(); pttl <= ttlA {
		t.Errorf("B's key PTTL %v, at most A's TTL %v: A's renewal reset it", pttl, ttlA)
	}
	if lb.Err() != nil {
		t.Errorf("B's lease ended: %v", lb.Err())
	}
}

// TestObserve_KeyWithoutTTL: a lock key set by hand without an expiry
// (PTTL -1) never runs out, so its observer waits for changes, reading
// the lock again only at its registration's refresh. It used to read it
// every few milliseconds (about ten times a second, as Redis rounds a
// short XREAD block up), for as long as it observed.
func TestObserve_KeyWithoutTTL(t *testing.T) {
	srv := testsvc.StartRedis(t)
	if err := client(t, srv.Addr).Set(timeout(t, 5*time.Second), redis.DefaultPrefix+"noexp", rediskit.NewValue("by-hand"), 0).Err(); err != nil {
		t.Fatal(err)
	}
	reads := &redistest.CountScript{SHA: redis.StateScriptHash}
	terms, err := hookedLocker(t, srv.Addr, reads).Observe(timeout(t, 30*time.Second), "noexp")
	if err != nil {
		t.Fatal(err)
	}
	if got := batontest.NextLeader(t, terms, 10*time.Second); got != "by-hand" {
		t.Fatalf("term %q, want by-hand", got)
	}
	// An observation window, not a wait for an event: the bug is reads
	// that keep coming while nothing happens.
	before := reads.N.Load()
	time.Sleep(time.Second)
	if n := reads.N.Load() - before; n > 1 {
		t.Errorf("the observer read the lock %d times in 1s with nothing changing", n)
	}
}

// TestQueue_DeadWaitersBehindLiveHeadDropped: waiters that die while
// queued behind a live first waiter (their leave never reaches the
// server) are dropped once their entries run out, while the holder keeps
// the lock: the first waiter's refreshes sweep the entries behind it. They
// used to stay for the holder's whole tenure (an elected leader's: days),
// one more per crashed candidate, and Inspect counted them as waiters.
func TestQueue_DeadWaitersBehindLiveHeadDropped(t *testing.T) {
	srv := testsvc.StartRedis(t)
	const ttl = time.Second
	cli := client(t, srv.Addr)
	// The leader's lease outlives any stall of the machine (at 1s, one
	// renewal unanswered for 650ms ended it, and the head took the lock);
	// the head and the dead waiters keep the 1s TTL that their entries run
	// out by, and the head still looks, and sweeps, every RenewEvery of its
	// own.
	leader, err := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("leader")).Acquire(timeout(t, 5*time.Second), "elect")
	if err != nil {
		t.Fatal(err)
	}
	head := newLocker(t, srv.Addr, baton.WithTTL(ttl), baton.WithHolder("head"))
	headCtx, stopHead := context.WithCancel(context.Background())
	headDone := make(chan struct{})
	go func() {
		defer close(headDone)
		if _, err := head.Acquire(headCtx, "elect"); !errors.Is(err, context.Canceled) {
			t.Errorf("head: %v", err)
		}
	}()
	defer func() { stopHead(); <-headDone }()
	waitQueued(t, cli, leader.Key(), 1)
	const dead = 5
	for i := range dead {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		who := fmt.Sprintf("crashed-%d", i)
		l, err := redis.New(c, baton.WithTTL(ttl), baton.WithHolder(who))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _, _ = l.Acquire(timeout(t, 30*time.Second), "elect") }()
		for queued := false; !queued; time.Sleep(5 * time.Millisecond) { // earlier ones may be dropped meanwhile
			for _, v := range cli.ZRange(timeout(t, time.Second), "{"+leader.Key()+"}:q", 0, -1).Val() {
				queued = queued || strings.HasSuffix(v, " "+who)
			}
		}
		_ = c.Close() // dies: its leave never reaches the server
		<-done
		_ = l.Close()
	}
	deadline := time.Now().Add(10 * ttl)
	for {
		n := cli.ZCard(timeout(t, time.Second), "{"+leader.Key()+"}:q").Val()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries in the queue %v after the dead waiters' entries ran out; want the live head's only", n, 10*ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if leader.Err() != nil {
		t.Fatalf("the leader's lease ended: %v", leader.Err())
	}
	if got := cli.ZRange(timeout(t, time.Second), "{"+leader.Key()+"}:q", 0, -1).Val(); len(got) != 1 || !strings.HasSuffix(got[0], " head") {
		t.Errorf("queue %q, want the head's entry", got)
	}
}

// TestCycle_TwoRoundTrips: an uncontended acquire and release is two
// round trips, the floor (the package doc's claim, and the aim):
// the pipelined claim, and the release script.
func TestCycle_TwoRoundTrips(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rt := &redistest.CountRoundTrips{}
	l := hookedLocker(t, srv.Addr, rt, baton.WithTTL(10*time.Second))
	cycle := func() {
		t.Helper()
		lease, err := l.Acquire(timeout(t, 5*time.Second), "cycle")
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(timeout(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // loads the release script (EVALSHA, NOSCRIPT, EVAL)
	const cycles = 50
	before := rt.N.Load()
	for range cycles {
		cycle()
	}
	if n := rt.N.Load() - before; n != 2*cycles {
		t.Errorf("%d cycles made %d round trips, want %d", cycles, n, 2*cycles)
	}
}

// TestClose_FrozenServer_OneReleaseTimeout: Close ends its holds all at
// once, so a server that stopped answering holds it up one release
// timeout, not one per hold.
func TestClose_FrozenServer_OneReleaseTimeout(t *testing.T) {
	srv := testsvc.StartRedis(t)
	defer srv.Resume()
	batontest.CloseSilent(t, newLocker(t, srv.Addr, baton.WithReleaseTimeout(time.Second)), srv.Pause)
}

// TestHandoff_StalledPastDeadline_ConfirmedByAttempt: a waiter handed the
// lock in time (before a renewal counted from its last attempt is due) is
// held up, before it makes its hold, past the hold's local deadline, as a
// stall of the machine would. As for any late handoff, one more attempt
// confirms it: the waiter gets the lock (it used to fail, unavailable,
// having released the key), with its deadline counted from that attempt,
// sent after the stall, and once it released it a third client gets it
// at once.
func TestHandoff_StalledPastDeadline_ConfirmedByAttempt(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	a := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("a"))
	w := newLocker(t, srv.Addr, baton.WithTTL(time.Second), baton.WithHolder("w"))
	c := newLocker(t, srv.Addr, baton.WithHolder("c"))
	reached := make(chan struct{}, 1)
	var resumed atomic.Pointer[time.Time] // when the stall ended: the confirming attempt is sent after
	redis.OnHandoffHeld(w, func(deadline time.Time) {
		select {
		case reached <- struct{}{}:
		default:
		}
		<-time.After(time.Until(deadline) + time.Millisecond) // past the deadline held checks, not a guess at it
		now := time.Now()
		resumed.Store(&now)
	})
	held, err := a.Acquire(timeout(t, 5*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	got := batontest.AcquireLater(timeout(t, 30*time.Second), w.Acquire, "job")
	waitQueued(t, cli, held.Key(), 1)
	if err := held.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	select {
	case <-reached:
	default:
		// w's timed retry (RenewEvery, 333ms) came first: it held all
		// the same, and this run did not test the stall.
		t.Skipf("the machine stalled: w took the lock without the handoff (%v)", r.Err)
	}
	if r.Err != nil || r.ReleaseErr != nil {
		t.Fatalf("w, stalled past its deadline after the handoff: %v, release %v; want the lock, confirmed by an attempt", r.Err, r.ReleaseErr)
	}
	// The confirming attempt was sent after the stall ended: the deadline
	// counts from its send time, however long w then took to return.
	cfg := w.Config()
	after := *resumed.Load()
	t.Logf("w's deadline at %v after the stall ended (TTL %v - drift %v)", r.Deadline.Sub(after).Round(time.Millisecond), cfg.TTL, cfg.Drift)
	if want := after.Add(cfg.TTL - cfg.Drift); r.Deadline.Before(want) {
		t.Errorf("w's lease deadline is %v before the stall's end + TTL - drift (%v - %v): not counted from an attempt sent after the stall",
			want.Sub(r.Deadline).Round(time.Millisecond), cfg.TTL, cfg.Drift)
	}
	lc, err := c.TryAcquire(timeout(t, 5*time.Second), "job")
	if err != nil {
		t.Fatalf("c, once w released: %v", err)
	}
	_ = lc.Release(context.Background())
}

// flushLog waits for l's logger to have handed on every record logged so
// far: it gets them from a goroutine of its own (see baton.WithLogger).
func flushLog(t *testing.T, l *baton.Locker) {
	t.Helper()
	if err := asynclog.Flush(timeout(t, 10*time.Second), l.Config().Logger); err != nil {
		t.Fatalf("log records not handed on within 10s: %v", err)
	}
}
