package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediskit/redistest"
	"github.com/baton-go/baton/internal/rounds"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
)

// gate is a channel closed once.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wakeHook delays a waiter's requests and messages as a slow network would:
// with Hold, a Pub/Sub message it reads is held until Let (see
// redistest.HeldMessages); with holdNext, its next attempt (the acquire
// script) is held, unsent, until sends opens, after telling caught. Each
// attempt answered is told on answered, with its send time, when someone
// listens.
type wakeHook struct {
	*redistest.HeldMessages
	delay    time.Duration // before every attempt is sent
	holdNext atomic.Bool
	caught   chan struct{}
	sends    *gate
	answered chan time.Time
}

func newWakeHook(t *testing.T, delay time.Duration) *wakeHook {
	h := &wakeHook{HeldMessages: redistest.NewHeldMessages(t), delay: delay, sends: newGate(), caught: make(chan struct{}, 1), answered: make(chan time.Time, 1)}
	t.Cleanup(h.sends.open)
	return h
}

func (h *wakeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if a := cmd.Args(); len(a) < 2 || a[0] != "evalsha" || a[1] != redis.AcquireScriptHash {
			return next(ctx, cmd)
		}
		sent := time.Now()
		if h.holdNext.CompareAndSwap(true, false) {
			h.caught <- struct{}{}
			<-h.sends.ch
		}
		time.Sleep(h.delay)
		err := next(ctx, cmd)
		select {
		case h.answered <- sent:
		default:
		}
		return err
	}
}

// waitAnswered waits for the next attempt of h's waiter to be answered,
// and returns its send time.
func (h *wakeHook) waitAnswered() time.Time {
	select { // one answered before now may be waiting
	case <-h.answered:
	default:
	}
	return <-h.answered
}

// heldByH starts a server on which holder "h" takes the lock name for
// 30s, and returns it, a client of the test's own, a context of 30s and
// h's lease.
func heldByH(t *testing.T, name string) (*testsvc.Redis, *goredis.Client, context.Context, *baton.Lease) {
	t.Helper()
	srv := testsvc.StartRedis(t)
	ctx := timeout(t, 30*time.Second)
	lh, err := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("h")).Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return srv, client(t, srv.Addr), ctx, lh
}

// TestAcquire_StaleWake_NotAHold: a waiter W is handed the lock, but the
// message that tells it is held up on its way; W's timed attempt, sent
// after the handoff, is held up too, and lands after W's handed key ran
// out and C took the lock: it finds C holding, and W queues again. The
// message that then reaches W is for a handoff before that attempt: W
// must not take it for a hold. Before the handoffs were tagged with the
// attempt they came after, W returned a lease, with a fresh deadline,
// while C held the lock.
func TestAcquire_StaleWake_NotAHold(t *testing.T) {
	srv, cli, ctx, lh := heldByH(t, "stale")

	hook := newWakeHook(t, 0)
	w := hookedLocker(t, srv.Addr, hook, baton.WithTTL(2*time.Second), baton.WithHolder("w"))
	type result struct {
		l   *baton.Lease
		err error
	}
	wGot := make(chan result, 1)
	go func() {
		l, err := w.Acquire(ctx, "stale")
		wGot <- result{l, err}
	}()
	waitQueued(t, cli, lh.Key(), 1)

	// Right after one of W's attempts was answered, H releases: the
	// handoff's message is held, and so is W's next attempt.
	hook.waitAnswered()
	hook.Hold.Store(true)
	hook.holdNext.Store(true)
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := cli.Get(ctx, lh.Key()).Val(); rediskit.HolderOf(v) != "w" {
		t.Fatalf("after H's release the key holds %q, want w's (a handoff)", v)
	}
	select {
	case <-hook.caught:
	case r := <-wGot:
		t.Fatalf("W returned before its next attempt was held: %v", r.err)
	}

	// W's handed key runs out (W never confirmed it); C takes the lock.
	for cli.Exists(ctx, lh.Key()).Val() != 0 {
		time.Sleep(5 * time.Millisecond)
	}
	c := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("c"))
	lc, err := c.TryAcquire(ctx, "stale")
	if err != nil {
		t.Fatalf("C: %v", err)
	}
	defer lc.Release(context.Background())

	// The message reaches W while W's attempt is still on its way, then
	// the attempt lands and finds C holding.
	woken := make(chan struct{})
	var once sync.Once
	redis.OnWake(w, func(string) { once.Do(func() { close(woken) }) })
	hook.Let()
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the held message never reached W")
	}
	hook.sends.open()

	select {
	case r := <-wGot:
		if r.err == nil {
			defer r.l.Release(context.Background())
			t.Fatalf("W holds a lease (deadline in %v) while C holds one too (Err %v); the key holds %q's value",
				time.Until(r.l.Deadline()).Round(time.Millisecond), lc.Err(), rediskit.HolderOf(cli.Get(ctx, lh.Key()).Val()))
		}
		t.Fatalf("W's Acquire failed: %v; want it still waiting", r.err)
	case <-time.After(time.Second):
	}
	if err := lc.Err(); err != nil {
		t.Fatalf("C's lease: %v", err)
	}
	// C's release hands the lock to W, which still waits.
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-wGot
	if r.err != nil {
		t.Fatalf("W after C's release: %v", r.err)
	}
	_ = r.l.Release(ctx)
}

// TestAcquire_LateHandoff_Holds: a handoff that reaches a waiter after the
// local deadline its last attempt would give (the attempts are slow, and
// its timed retry had not come yet) is confirmed by an attempt, not
// refused: before, the waiter gave the lock on and Acquire failed with
// "the answer came ... past the lease's local deadline", although no
// answer was late. One that comes before that deadline but after a
// renewal would be due (RenewEvery after the attempt) is confirmed too:
// taken on the attempt's word, the lease came with its deadline a few
// milliseconds away, lost before its first renewal could land. Either
// way the lease's deadline counts from an attempt sent after the message
// came: it is at least TTL - drift after the message was let through,
// however long W then took to return the lease.
func TestAcquire_LateHandoff_Holds(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		ttl, renewEvery, delay time.Duration
		// at is when the message is let through, after the attempt's
		// send time: before W's next retry (delay + renewEvery).
		at func(drift time.Duration) time.Duration
	}{
		{"past-the-deadline", time.Second, 950 * time.Millisecond, 100 * time.Millisecond,
			func(drift time.Duration) time.Duration { return time.Second - drift + 5*time.Millisecond }},
		// Well before the deadline (1.978s), by which the old rule
		// took the handoff on the attempt's word.
		{"past-a-renewal", 2 * time.Second, 1200 * time.Millisecond, 300 * time.Millisecond,
			func(time.Duration) time.Duration { return 1205 * time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ttl, renewEvery, delay := tc.ttl, tc.renewEvery, tc.delay
			srv, cli, ctx, lh := heldByH(t, "late")
			hook := newWakeHook(t, delay)
			w := hookedLocker(t, srv.Addr, hook, baton.WithTTL(ttl), baton.WithRenewEvery(renewEvery), baton.WithHolder("w"))
			wGot := batontest.AcquireLater(ctx, w.Acquire, "late")
			waitQueued(t, cli, lh.Key(), 1)
			// The handoff comes right after an attempt was answered; its
			// message is held until tc.at after that attempt was sent
			// (delay before it reached the server), and W's next retry,
			// RenewEvery after the answer, has not come yet.
			sent := hook.waitAnswered()
			hook.Hold.Store(true)
			if err := lh.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(sent.Add(tc.at(w.Config().Drift))))
			if late := time.Since(sent); late >= delay+renewEvery {
				// W's timed retry may come first: it would hold all the
				// same, and this run would not test the handoff.
				t.Skipf("the machine stalled: the message would be let through %v after the attempt, past W's next retry", late)
			}
			// An attempt answered since the one above, or sent before the
			// message is let through, is W's timed retry, come first
			// after a stall (between the look above and here): it holds
			// all the same, and this run would not test the handoff.
			select {
			case <-hook.answered:
				t.Skip("the machine stalled: W's next retry was answered before the message was let through")
			default:
			}
			let := time.Now()
			hook.Let()
			r := <-wGot
			if r.Err != nil {
				t.Fatalf("W, handed the lock by a release: %v", r.Err)
			}
			select {
			case next := <-hook.answered: // the first attempt answered since the look above
				if next.Before(let) {
					t.Skipf("the machine stalled: W's next retry was sent %v before the message was let through", let.Sub(next).Round(time.Millisecond))
				}
			default: // W held with no attempt after the message: checked below
			}
			// Confirmed by an attempt, sent after the message came: the
			// deadline counts from its send time, after let. Taken on the
			// word of the attempt before, it came RenewEvery or more
			// sooner.
			cfg := w.Config()
			t.Logf("W's deadline at %v after the message was let through (TTL %v - drift %v)", r.Deadline.Sub(let).Round(time.Millisecond), cfg.TTL, cfg.Drift)
			if want := let.Add(cfg.TTL - cfg.Drift); r.Deadline.Before(want) {
				t.Errorf("W's lease deadline is %v before the message was let through + TTL - drift (%v - %v): not counted from an attempt sent after the handoff's message came",
					want.Sub(r.Deadline).Round(time.Millisecond), cfg.TTL, cfg.Drift)
			}
		})
	}
}

// holdRelease holds the release script back, unsent, while armed, until
// go opens; renewed is told each time a renewal is confirmed.
type holdRelease struct {
	redistest.ProcessOnly
	armed   atomic.Bool
	held    chan struct{}
	goOn    *gate
	renewed chan struct{}
}

func (h *holdRelease) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		sha := redistest.ScriptSHA(cmd) // EVALSHA, or the EVAL after NOSCRIPT
		if sha == redis.ReleaseScriptHash && h.armed.Load() {
			h.held <- struct{}{}
			<-h.goOn.ch
		}
		err := next(ctx, cmd)
		if sha == redis.RenewScriptHash {
			if c, ok := cmd.(*goredis.Cmd); ok && err == nil {
				if n, _ := c.Int64(); n == 1 {
					select {
					case h.renewed <- struct{}{}:
					default:
					}
				}
			}
		}
		return err
	}
}

// TestRelease_RenewedDuringSlowRelease_KeyGoneIsALoss: a release is slow
// on its way; meanwhile a renewal is confirmed (the local deadline moves
// on), then the key is deleted by another client, and the release lands
// after the first deadline but before the new one, and finds the key not
// ours. The key was gone while the lease was held: a loss, not "it simply
// ran out while the release was on its way".
func TestRelease_RenewedDuringSlowRelease_KeyGoneIsALoss(t *testing.T) {
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	// A renewal confirmed only after the first deadline (a stall of the
	// machine) leaves no case to test: such a round runs again.
	rounds.Run(t, 3, func(round int) error {
		return renewedDuringSlowReleaseOnce(t, srv, cli, fmt.Sprintf("renewed-%d", round))
	})
}

// renewedDuringSlowReleaseOnce is one round of
// TestRelease_RenewedDuringSlowRelease_KeyGoneIsALoss on the lock name.
// It returns an error, having checked nothing, when the renewal came too
// late to make the case; it fails t on any other miss.
func renewedDuringSlowReleaseOnce(t *testing.T, srv *testsvc.Redis, cli *goredis.Client, name string) error {
	ctx := timeout(t, 30*time.Second)
	hook := &holdRelease{held: make(chan struct{}, 1), goOn: newGate(), renewed: make(chan struct{}, 1)}
	// 3s: a renewal (every 1s) must be confirmed before the first
	// deadline; at 1s a stall of 650ms let that deadline come first.
	l := hookedLocker(t, srv.Addr, hook, baton.WithTTL(3*time.Second))
	// Registered after the Locker's Close, so run before it: a test that
	// fails with the release held lets it go, and Close does not wait on it.
	t.Cleanup(hook.goOn.open)
	defer hook.goOn.open()
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	first := lease.Deadline()
	released := make(chan error, 1)
	go func() { released <- lease.Release(ctx) }()
	select {
	case <-hook.held:
	case <-ctx.Done():
		t.Fatal("the release never reached the server's hook")
	}
	select { // a renewal confirmed after the release began
	case <-hook.renewed:
	default:
	}
	select {
	case <-hook.renewed:
	case <-ctx.Done():
		t.Fatal("no renewal confirmed during the release")
	}
	if time.Now().After(first) {
		return errors.New("the renewal came after the first deadline: the machine was too slow for this case to be tested")
	}
	if err := cli.Del(ctx, lease.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(first.Add(5 * time.Millisecond)))
	hook.goOn.open()
	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := lease.Err(); !errors.Is(err, baton.ErrLeaseLost) {
		t.Fatalf("Err = %v; want the loss: the key was deleted while the lease was held", err)
	}
	return nil
}

// TestWake_HeadLeaves_NextTold: the first waiter gives up while a crashed
// holder's key still runs; the second is told that it is first now, and
// takes the lock right after the key expires (see redistest.HeadLeaves).
func TestWake_HeadLeaves_NextTold(t *testing.T) {
	srv := testsvc.StartRedis(t)
	const ttl = 30 * time.Second // RenewEvery 10s
	x := newLocker(t, srv.Addr, baton.WithTTL(ttl), baton.WithHolder("x"))
	y := newLocker(t, srv.Addr, baton.WithTTL(ttl), baton.WithHolder("y"))
	redistest.HeadLeaves(t, []goredis.UniversalClient{client(t, srv.Addr)}, x, y, redis.DefaultPrefix, "job", ttl)
}

// TestHandoff_MessageBeforeAnswer: the release's message reaches the
// waiter after its attempt ran but before that attempt's answer did (the
// message comes on another connection). The waiter must keep it (a
// wake-up is forgotten before an attempt, not after) and then holds the
// lock with no attempt of its own.
func TestHandoff_MessageBeforeAnswer(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	ctx := timeout(t, 30*time.Second)
	const ttl = 30 * time.Second // RenewEvery 10s: no timed retry within the test
	h := newLocker(t, srv.Addr, baton.WithTTL(ttl), baton.WithHolder("h"))
	lh, err := h.Acquire(ctx, "early")
	if err != nil {
		t.Fatal(err)
	}
	answers := redistest.NewHoldAnswer(redis.AcquireScriptHash)
	t.Cleanup(answers.Let)
	attempts := &redistest.CountScript{SHA: redis.AcquireScriptHash}
	wc := client(t, srv.Addr)
	wc.AddHook(attempts)
	wc.AddHook(answers)
	// The held answer must not outlast the request's timeout.
	w, err := redis.New(wc, baton.WithTTL(ttl), baton.WithHolder("w"), baton.WithRequestTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	delivered, onWake := redistest.Deliveries(4)
	redis.OnWake(w, onWake)
	check := client(t, srv.Addr)
	wGot := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctx, "early")
		if err == nil {
			err = redistest.HeldThrough(ctx, check, lh.Key(), "w", l.Deadline())
			if rerr := l.Release(context.Background()); err == nil {
				err = rerr
			}
		}
		wGot <- err
	}()
	// w's first attempt is a claim, without the script; its second, queued,
	// runs the script.
	var before int64
	redistest.Overtake(t, answers, 1, wGot, func() error {
		before = attempts.N.Load()
		return lh.Release(ctx)
	}, delivered, "w")
	if err := <-wGot; err != nil {
		t.Fatalf("w after the release: %v", err)
	}
	if n := attempts.N.Load() - before; n != 0 {
		t.Fatalf("w ran the acquire script %d times after the release; want none: the handoff's message, come before the answer, is the lock", n)
	}
}

// TestRetryIn: a waiter first in line sleeps just past the key's remaining
// TTL, and at most RenewEvery; also when that TTL is 0 (PTTL's answer for
// a key that expires within the millisecond), where it slept RenewEvery
// while the key, free and reserved for it, waited for it.
func TestRetryIn(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // never asked
	t.Cleanup(func() { _ = c.Close() })
	l, err := redis.New(c, baton.WithTTL(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	every := l.Config().RenewEvery
	for _, tc := range []struct {
		head     bool
		pttl     time.Duration
		min, max time.Duration
	}{
		{true, 0, time.Millisecond, 2 * time.Millisecond},
		{true, 100 * time.Millisecond, 101 * time.Millisecond, 106 * time.Millisecond},
		{true, time.Minute, every, every},
		{true, -2 * time.Millisecond, every, every}, // free: the head takes it at its next look
		{false, 0, every, every},                    // not first: PTTL is not told
	} {
		if got := redis.RetryIn(l, tc.head, tc.pttl); got < tc.min || got > tc.max {
			t.Errorf("retryIn(head %v, pttl %v) = %v, want %v to %v", tc.head, tc.pttl, got, tc.min, tc.max)
		}
	}
	// At any TTL a crashed holder is taken over within 200ms of its key's
	// expiry: the jitter is no share of the PTTL (19s/20 was up to 950ms).
	long, err := redis.New(c, baton.WithTTL(time.Minute)) // RenewEvery 20s
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = long.Close() })
	const pttl = 19 * time.Second
	for range 1000 {
		if got := redis.RetryIn(long, true, pttl); got <= pttl || got > pttl+200*time.Millisecond {
			t.Fatalf("retryIn(head, pttl %v) at a 60s TTL = %v, want just past the PTTL, within 200ms", pttl, got)
		}
	}
}
