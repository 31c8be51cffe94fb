package redlock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/keeper"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediskit/redistest"
	"github.com/baton-go/baton/internal/rounds"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redlock"
)

// TestKilledNodes: with 2 of 5 nodes killed Redlock still acquires (and
// renews); with 3 killed it reports that the lock service is unavailable:
// no majority can answer. TryAcquire says so within about twice the
// per-node timeout (its attempt's and an undo's), a waiting Acquire after trying for a request timeout. That is a failure
// of the service, not contention and not the caller's cancellation.
func TestKilledNodes(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 5)
	l := newLocker(t, nodes, baton.WithTTL(2*time.Second))
	// With 2 nodes dead, every answer of the 3 alive counts: at the
	// default node timeout for this TTL (200ms), a stall of the machine
	// made one look gone too. The reports with 3 dead, below, are about
	// that default, and use it.
	redlock.SetNodeTimeout(l, time.Second)
	nodes[0].Kill()
	nodes[3].Kill()

	lease, err := l.Acquire(timeout(t, 5*time.Second), "two-dead")
	if err != nil {
		t.Fatalf("Acquire with 2 of 5 nodes dead: %v", err)
	}
	// A whole TTL and more on the 3 live nodes: renewals keep the lease.
	select {
	case <-lease.Done():
		t.Fatalf("lease on 3 live nodes ended: %v", lease.Err())
	case <-time.After(2 * time.Second):
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release with 2 of 5 nodes dead: %v", err)
	}

	nodes[4].Kill()
	// A waiting Acquire tries again for a request timeout (see
	// TestAcquire_FrozenMajority_TriesAgain): a dead node's redials
	// outlast the node timeout, so it cannot tell it from a slow one.
	const requestTimeout = time.Second
	l = newLocker(t, nodes, baton.WithTTL(2*time.Second), baton.WithRequestTimeout(requestTimeout))
	for _, wait := range []bool{false, true} {
		start := time.Now()
		var err error
		if wait {
			_, err = l.Acquire(timeout(t, 5*time.Second), "three-dead")
		} else {
			_, err = l.TryAcquire(timeout(t, 5*time.Second), "three-dead")
		}
		took := time.Since(start)
		t.Logf("wait=%v with 3 of 5 dead: %v after %v", wait, err, took.Round(time.Millisecond))
		if !errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("wait=%v: err = %v, want ErrUnavailable only", wait, err)
		}
		switch {
		case !wait && took > time.Second:
			t.Errorf("TryAcquire took %v to report it, want about twice the per-node timeout (TTL/10: an attempt and an undo)", took)
		case wait && (took < requestTimeout || took > requestTimeout+2*time.Second):
			t.Errorf("Acquire took %v to report it, want about the request timeout (%v) and a round", took, requestTimeout)
		}
		if err != nil && !strings.Contains(err.Error(), nodes[4].Addr) {
			t.Errorf("error does not name the dead nodes: %v", err)
		}
		if err != nil && !strings.Contains(err.Error(), "3 of 5 nodes failed or did not answer") {
			t.Errorf("error does not count the dead nodes: %v", err)
		}
	}
	// The count is of the nodes that failed, not of the majority.
	nodes[1].Kill()
	if _, err := l.TryAcquire(timeout(t, 5*time.Second), "four-dead"); err == nil || !strings.Contains(err.Error(), "4 of 5 nodes failed or did not answer; a majority (3) must answer") {
		t.Errorf("with 4 of 5 dead: err = %v, want it to count 4 failed", err)
	}
}

// TestNodeKilledMidHold: a node dying while the lease is held does not end
// it while a majority renews; losing the majority does, at the local
// deadline: a frozen node's answer could still make a majority, so the
// renewal waits for it until then.
func TestNodeKilledMidHold(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 5)
	// 3s: the renewals to the three live nodes must all be answered
	// within TTL - TTL/3 of the last good one, also on a CI machine
	// running other packages' servers.
	const ttl = 3 * time.Second
	// Its renewals' warnings show in the test's output.
	l := newLocker(t, nodes, baton.WithTTL(ttl), baton.WithHolder("mid"), baton.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	other := newLocker(t, nodes, baton.WithTTL(ttl))
	// other's TryAcquires below must each hear from the three nodes
	// alive, as ErrNotAcquired; at the default node timeout (300ms) a
	// stall of the machine made one of them ErrUnavailable. The holder
	// gets the same for its claims at the start (its renewals are bounded
	// by the local deadline, not by the node timeout).
	redlock.SetNodeTimeout(other, time.Second)
	redlock.SetNodeTimeout(l, time.Second)
	lease, err := l.Acquire(timeout(t, 5*time.Second), "mid-hold")
	if err != nil {
		t.Fatal(err)
	}
	// Acquire returns on a majority; under load a slow node's SET may not
	// have landed (or may have been cut off at the node timeout). The nodes
	// to fail are those without our key first, so that three that hold it
	// live on, then one that holds it.
	cs := clients(t, nodes)
	victims := slices.Clone(nodes)
	holds := map[*testsvc.Redis]bool{}
	for i, n := range nodes {
		v, _ := cs[i].Get(timeout(t, 5*time.Second), lease.Key()).Result()
		holds[n] = rediskit.HolderOf(v) == "mid"
	}
	slices.SortStableFunc(victims, func(a, b *testsvc.Redis) int { return cmp.Compare(b2i(holds[a]), b2i(holds[b])) })
	held := 0
	for _, h := range holds {
		held += b2i(h)
	}
	t.Logf("our key is on %d of 5 nodes", held)
	victims[0].Kill()
	victims[1].Pause() // frozen: connections open, no answers
	defer victims[1].Resume()
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		if err := lease.Err(); err != nil {
			t.Fatalf("lease ended with 3 of 5 nodes renewing: %v", err)
		}
		if _, err := other.TryAcquire(timeout(t, 5*time.Second), "mid-hold"); !errors.Is(err, baton.ErrNotAcquired) {
			t.Fatalf("another client's TryAcquire = %v, want ErrNotAcquired", err)
		}
		time.Sleep(ttl / 5)
	}
	victims[2].Kill() // 2 of 5 hold our key: no majority can renew
	var lostAt time.Time
	select {
	case <-lease.Done():
		lostAt = time.Now()
	case <-time.After(3 * ttl):
		t.Fatal("lease not lost 3 TTLs after the majority was gone")
	}
	// The deadline read now is the last confirmed renewal's, which may
	// have come while Kill waited for the node to exit.
	lostAfter := lostAt.Sub(lease.Deadline())
	t.Logf("lost %v after the local deadline of the last renewal confirmed: %v", lostAfter.Round(time.Millisecond), lease.Err())
	// The frozen node's answer could still make a majority, so the
	// renewal waits for it (a renewal is bounded by the local deadline,
	// not by the node timeout); the deadline ends the lease, and says so.
	if !errors.Is(lease.Err(), baton.ErrLeaseLost) || !errors.Is(lease.Err(), keeper.ErrDeadline) {
		t.Errorf("Err = %v, want a loss by the local deadline", lease.Err())
	}
	// And it ended at that deadline, not later: a second is scheduling
	// on a loaded machine (this goroutine woke to see it), well short of
	// a wait for some timeout.
	if lostAfter > time.Second {
		t.Errorf("lost %v after the local deadline", lostAfter)
	}
}

// TestRefusedByMajority: when the key is gone from a majority of nodes (it
// expired early, or was deleted), the next renewal is refused and the
// lease ends at once, by the refusal, before its local deadline; the key
// on the minority is not extended.
func TestRefusedByMajority(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	l := newLocker(t, nodes, baton.WithTTL(2*time.Second))
	other := newLocker(t, nodes)
	// The renewal refused goes out RenewEvery after the last one
	// confirmed, and leaves TTL - RenewEvery - drift (1.3s) until the
	// local deadline: a stall of the machine that long after it ends the
	// lease by the deadline, rightly, and such a round runs again. A
	// holder that does not stop at a refusal (that tries again, as after
	// a failure) ends by the deadline in every round.
	rounds.Run(t, 3, func(round int) error {
		name := fmt.Sprintf("refused-%d", round)
		lease, err := l.Acquire(timeout(t, 5*time.Second), name)
		if err != nil {
			t.Fatal(err)
		}
		// Acquire returned once a majority answered: wait for the third
		// node's claim, which would otherwise set the key after the
		// PEXPIRE below and keep a majority.
		poll := timeout(t, 5*time.Second)
		for _, c := range cs {
			for c.Exists(poll, lease.Key()).Val() == 0 {
				if poll.Err() != nil {
					t.Fatal("the lease's key is not on every node after 5s")
				}
				time.Sleep(time.Millisecond)
			}
		}
		for _, c := range cs[:2] {
			if err := c.PExpire(timeout(t, time.Second), lease.Key(), time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// The deadline the lease had once its keys were gone: a renewal
		// confirmed after could only move it on.
		deadline := lease.Deadline()
		var lostAt time.Time
		select {
		case <-lease.Done():
			lostAt = time.Now()
		case <-time.After(3 * time.Second):
			t.Fatalf("lease not lost after its key ended on 2 of 3 nodes: %v", lease.Err())
		}
		// Lost by the refusal, not by the local deadline: before it, and
		// not for it.
		if errors.Is(lease.Err(), keeper.ErrDeadline) || !lostAt.Before(deadline) {
			return fmt.Errorf("the lease ended %v after the local deadline it had when its keys were taken (%v), by the deadline, not by the refusal", lostAt.Sub(deadline).Round(time.Millisecond), lease.Err())
		}
		t.Logf("lost %v before the local deadline it had when its keys were taken: %v", deadline.Sub(lostAt).Round(time.Millisecond), lease.Err())
		if !errors.Is(lease.Err(), baton.ErrLeaseLost) || !strings.Contains(lease.Err().Error(), "refused") {
			t.Errorf("Err = %v, want a refusal", lease.Err())
		}
		// Another client takes it at once on the two free nodes plus...
		// the third still holds the old value until it expires, so a
		// majority is free: 2 of 3.
		lb, err := other.TryAcquire(timeout(t, 5*time.Second), name)
		if err != nil {
			t.Fatalf("TryAcquire after the loss: %v", err)
		}
		_ = lb.Release(context.Background())
		return nil
	})
}

func TestNew_Invalid(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	for _, tc := range []struct {
		desc string
		err  func() error
		want string
	}{
		{"two nodes", func() error { _, err := redlock.New(cs[:2]); return err }, "odd number"},
		{"four nodes", func() error { _, err := redlock.New(append(cs, cs[0])); return err }, "odd number"},
		{"short TTL", func() error { _, err := redlock.New(cs, baton.WithTTL(200*time.Millisecond)); return err }, "minimum"},
		// One server reached twice would cast two votes: with one
		// more, a majority.
		{"one client twice", func() error {
			_, err := redlock.New([]goredis.UniversalClient{cs[0], cs[1], cs[0]})
			return err
		}, "0 and 2"},
		{"one server through two clients", func() error {
			_, err := redlock.New([]goredis.UniversalClient{cs[0], cs[1], client(t, net.JoinHostPort("::ffff:127.0.0.1", port(t, nodes[1].Addr)))})
			return err
		}, "1 and 2"},
		{"nil node", func() error { _, err := redlock.New([]goredis.UniversalClient{cs[0], nil, cs[2]}); return err }, "node 1: is a nil client"},
		// A typed nil is no nil interface: it got past == nil and
		// panicked in the check for one server named twice.
		{"typed nil node first", func() error {
			_, err := redlock.New([]goredis.UniversalClient{(*goredis.Client)(nil), cs[1], cs[2]})
			return err
		}, "node 0: is a nil *redis.Client client"},
		{"typed nil node last", func() error {
			_, err := redlock.New([]goredis.UniversalClient{cs[0], cs[1], (*goredis.ClusterClient)(nil)})
			return err
		}, "node 2: is a nil *redis.ClusterClient client"},
	} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			return tc.err()
		}()
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an option error saying %q", tc.desc, err, tc.want)
		}
	}
}

// TestNew_SentinelClients: go-redis gives every Sentinel client the
// address "FailoverClient"; clients of three master sets are three nodes,
// not one server named thrice.
func TestNew_SentinelClients(t *testing.T) {
	var cs []goredis.UniversalClient
	for _, master := range []string{"a", "b", "c"} {
		c := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: master, SentinelAddrs: []string{"127.0.0.1:1"}, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	l, err := redlock.New(cs)
	if err != nil {
		t.Fatalf("New on three Sentinel clients: %v", err)
	}
	_ = l.Close()
}

// port returns addr's port.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpen_InspectForceRelease(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	u, err := baton.ParseURL("redlock://" + strings.Join(testsvc.RedisAddrs(nodes), ",") + "?ttl=2s")
	if err != nil {
		t.Fatal(err)
	}
	l, err := redlock.Open(context.Background(), u, baton.WithHolder("cron-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, ok := l.Fenced(); ok {
		t.Fatal("a Redlock Locker converts to a FencedLocker: it must not, it gives no tokens")
	}
	lease, err := l.Acquire(timeout(t, 5*time.Second), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := l.Backend().(baton.Inspector).Inspect(timeout(t, 5*time.Second))
	if err != nil || len(infos) != 1 {
		t.Fatalf("Inspect = %+v, %v", infos, err)
	}
	if i := infos[0]; i.Name != "nightly" || i.Holder != "cron-1" || i.TTLLeft <= time.Second || i.TTLLeft > 2*time.Second {
		t.Errorf("Inspect = %+v", i)
	}
	info, err := l.Backend().(baton.ForceReleaser).ForceRelease(timeout(t, 5*time.Second), "nightly")
	if err != nil || info.Holder != "cron-1" {
		t.Fatalf("ForceRelease = %+v, %v", info, err)
	}
	select {
	case <-lease.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("holder not told within a renewal of the forced release")
	}
	if _, err := l.Backend().(baton.ForceReleaser).ForceRelease(timeout(t, 5*time.Second), "nightly"); !errors.Is(err, baton.ErrNotAcquired) {
		t.Errorf("ForceRelease of a free lock = %v", err)
	}
}

// TestForceRelease_AnswerLost: a forced release whose delete ran on every
// node but whose answers were all lost sends each again, finds the key no
// longer the holder's, and reports the release done. Told that it failed,
// an operator would force again, and free the next holder's lock.
func TestForceRelease_AnswerLost(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	holder := newLocker(t, nodes, baton.WithHolder("web-1:42"), baton.WithTTL(3*time.Second))
	lease, err := holder.Acquire(timeout(t, 5*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	cs := clients(t, nodes)
	drops := make([]*redistest.DropAnswer, len(cs))
	for i, c := range cs {
		if err := redlock.LoadForceScript(timeout(t, 5*time.Second), c); err != nil {
			t.Fatal(err)
		}
		drops[i] = &redistest.DropAnswer{SHA: redlock.ForceScriptHash}
		drops[i].Armed.Store(true)
		c.AddHook(drops[i])
	}
	op := lockerOn(t, cs)
	info, err := op.Backend().(baton.ForceReleaser).ForceRelease(timeout(t, 10*time.Second), "invoices")
	for i, d := range drops {
		if d.Armed.Load() {
			t.Fatalf("no answer was dropped on node %d", i)
		}
	}
	if err != nil || info.Holder != "web-1:42" {
		t.Fatalf("forced release across lost answers: %+v, %v; want web-1:42's released", info, err)
	}
	for i, c := range cs {
		if n := c.Exists(timeout(t, 5*time.Second), redlock.DefaultPrefix+"invoices").Val(); n != 0 {
			t.Errorf("node %d still has the lock key", i)
		}
	}
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the forced holder's lease did not end")
	}
}

func TestOpen_Unreachable(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	nodes[0].Kill()
	nodes[1].Kill()
	u, _ := url.Parse("redlock://app:secret@" + strings.Join(testsvc.RedisAddrs(nodes), ","))
	_, err := redlock.Open(context.Background(), u, baton.WithRequestTimeout(time.Second))
	if !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("Open with 2 of 3 nodes dead = %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error shows the password: %v", err)
	}
}

// TestOpen_Refused: nodes that answer but refuse the URL's database
// number are a configuration error, not unavailable nodes.
func TestOpen_Refused(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	u, _ := url.Parse("redlock://" + strings.Join(testsvc.RedisAddrs(nodes), ",") + "/99")
	_, err := redlock.Open(context.Background(), u)
	if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "DB index") {
		t.Fatalf("Open with a database number out of range = %v; want an invalid option naming the DB index", err)
	}
}

// TestOpen_OneServerTwoNames: a URL that names one server twice, by two
// names the URL cannot tell apart, is refused: that server's two votes
// would make a majority alone (two holders at once after it restarts
// empty, or one holder while the real other nodes are down).
func TestOpen_OneServerTwoNames(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 2)
	port := nodes[0].Addr[strings.LastIndex(nodes[0].Addr, ":")+1:]
	u, err := baton.ParseURL("redlock://" + nodes[0].Addr + ",localhost:" + port + "," + nodes[1].Addr)
	if err != nil {
		t.Fatal(err)
	}
	l, err := redlock.Open(timeout(t, 10*time.Second), u)
	if err == nil {
		_ = l.Close()
	}
	if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "are one server") {
		t.Fatalf("Open naming one server twice = %v; want an invalid option saying they are one server", err)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFailedMajority_EndsAtOnce: when a majority of nodes is gone (their
// renewals fail at once: connection refused), the next renewal ends the
// lease, long before the local deadline, as a refusal does; also when a
// node frozen among them has not answered yet, whose answer could no
// longer make a majority (the renewal waited for it up to the local
// deadline).
func TestFailedMajority_EndsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nodes          int
		killed, frozen []int
	}{
		{"3-nodes/2-killed", 3, []int{0, 1}, nil},
		{"5-nodes/3-killed/1-frozen", 5, []int{0, 1, 2}, []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes := testsvc.StartRedisNodes(t, tc.nodes)
			const ttl = 3 * time.Second
			l := newLocker(t, nodes, baton.WithTTL(ttl))
			lease, err := l.Acquire(timeout(t, 5*time.Second), "failed")
			if err != nil {
				t.Fatal(err)
			}
			for _, i := range tc.frozen {
				nodes[i].Pause()
				defer nodes[i].Resume()
			}
			for _, i := range tc.killed {
				nodes[i].Kill()
			}
			early := batontest.LostBeforeDeadline(t, lease, 2*ttl)
			if early < ttl/3 {
				t.Errorf("lost only %v before the local deadline: the failed renewal was retried, or waited for a node that could not make a majority", early)
			}
			if !errors.Is(lease.Err(), baton.ErrLeaseLost) || !errors.Is(lease.Err(), baton.ErrUnavailable) {
				t.Errorf("Err = %v, want a loss naming the unreachable nodes", lease.Err())
			}
		})
	}
}

// TestClaim_YieldsToQueuedWaiter: a waiter queued on every node behind a
// holder whose keys vanished (a crash: they expired) is first in line; a
// newcomer's claims (plain SET NX) find the keys free and set them, then
// see the queues and free them again for that waiter, who acquires.
func TestClaim_YieldsToQueuedWaiter(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 5)
	// Long TTLs: w's timed retry (a third of its TTL at the soonest, as
	// a's keys had 30s left) must not be what gives it the lock.
	a := newLocker(t, nodes, baton.WithTTL(30*time.Second), baton.WithHolder("a"))
	w := newLocker(t, nodes, baton.WithTTL(30*time.Second), baton.WithHolder("w"))
	n := newLocker(t, nodes, baton.WithHolder("newcomer"))
	cs := clients(t, nodes)
	la, err := a.Acquire(timeout(t, 5*time.Second), "queued")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *baton.Lease, 1)
	wctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		lw, err := w.Acquire(wctx, "queued")
		if err != nil && wctx.Err() == nil {
			t.Error(err)
		}
		got <- lw
	}()
	// w queues where a holds the key: a's Acquire returned once a
	// majority answered, so a's claim on a slower node may have come after
	// w's, which then holds the key there.
	redistest.WaitQueued(t, cs, la.Key(), "a", 1)
	for _, c := range cs {
		if err := c.Del(timeout(t, time.Second), la.Key()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = n.TryAcquire(timeout(t, 5*time.Second), "queued")
	if !errors.Is(err, baton.ErrNotAcquired) {
		t.Fatalf("newcomer's try on a lock reserved for a queued waiter: %v, want not acquired", err)
	}
	select {
	case lw := <-got:
		if lw == nil || lw.Err() != nil {
			t.Fatal("the queued waiter did not get the lock")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued waiter was not given the lock within 5s of the newcomer's claim")
	}
	held := 0
	for i, c := range cs {
		switch v := c.Get(timeout(t, time.Second), la.Key()).Val(); rediskit.HolderOf(v) {
		case "w":
			held++
		case "newcomer":
			t.Errorf("node %d: the newcomer's claim is still there", i)
		}
	}
	if held < 3 {
		t.Errorf("w's value on %d nodes, want a majority", held)
	}
}

// TestRace_NoStallAtStart: eight new Lockers that all wait for a lock at
// once split the vote at first (each takes some nodes); they undo their
// minorities, and the first in line must take the lock at once, not after
// sleeping until the racers' keys would have expired (RenewEvery), as it
// did in about one start in three. Six such starts, each passed round by
// all eight within half of RenewEvery.
//
// The TTL is long so that the stall stands far from a slow start: a start
// opens 40 connections and makes 8 handoffs, which under -race on a loaded
// machine takes a second or two, and a stall of RenewEvery (10s at a 30s
// TTL) is twice the bound (5s). Every start is checked: a stall comes in
// one start of a few, so running a slow start again would let one pass.
func TestRace_NoStallAtStart(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 5)
	const ttl = 30 * time.Second
	const bound = ttl / 3 / 2 // half of RenewEvery
	for round := range 6 {
		var ls []*baton.Locker
		var cls []*goredis.Client
		for i := range 8 {
			// Clients not yet connected, as a process starts: each node's
			// first request dials, which spreads the racers' votes.
			cs := make([]goredis.UniversalClient, len(nodes))
			for j, n := range nodes {
				c := goredis.NewClient(&goredis.Options{Addr: n.Addr, ContextTimeoutEnabled: true, MaxRetries: -1}) // as New asks
				cls = append(cls, c)
				cs[j] = c
			}
			l, err := redlock.New(cs, baton.WithTTL(ttl), baton.WithHolder(string(rune('a'+i))))
			if err != nil {
				t.Fatal(err)
			}
			// The node timeout of a 10s TTL (TTL/10), not 3s: a waiter
			// that finds no one holding a majority looks again after a
			// random delay up to it (see retryIn), which is no stall, and
			// 3s would take most of the bound.
			redlock.SetNodeTimeout(l, time.Second)
			ls = append(ls, l)
		}
		closeAll := func() { // this round's Lockers, then their clients
			for _, l := range ls {
				_ = l.Close()
			}
			for _, c := range cls {
				_ = c.Close()
			}
		}
		name := "start-" + string(rune('0'+round))
		start := time.Now()
		errs := make(chan error, len(ls))
		for _, l := range ls {
			go func() {
				lease, err := l.Acquire(timeout(t, 4*ttl/3), name) // room for a few stalls, reported below
				if err == nil {
					err = lease.Release(context.Background())
				}
				errs <- err
			}()
		}
		var failed error
		for range ls {
			if err := <-errs; err != nil {
				failed = err
			}
		}
		took := time.Since(start)
		closeAll()
		if took > bound {
			t.Errorf("start %d: eight new racers took %v to pass the lock round, want within %v; a stall waits RenewEvery (%v)", round, took.Round(time.Millisecond), bound, ttl/3)
		}
		if failed != nil {
			t.Fatal(failed)
		}
	}
}

// TestRelease_SkipsDeadWaiter: a waiter partitioned from the nodes while
// queued (or crashed) cannot leave the queues, and is first in them; once its entries
// have gone a TTL unrefreshed, the live waiter behind it takes the lock
// when the holder releases, and the dead entries are dropped. Were the
// dead waiter taken for live, the free keys would stay reserved for it
// and the live waiter would never get them (it refreshes the queues' TTL
// itself).
//
// The dead waiter's entries are planted, as its last refresh left them (a
// 1s TTL, written at each node's own time), not left by a real waiter cut
// off by proxies: a real one with a 1s TTL has a node timeout of 100ms,
// and one round slower than that on a loaded machine made it give up as
// unavailable, taking its entries out before the test could cut it off.
func TestRelease_SkipsDeadWaiter(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 5)
	cs := clients(t, nodes)
	a := newLocker(t, nodes, baton.WithTTL(30*time.Second), baton.WithHolder("a"))
	la, err := a.Acquire(timeout(t, 5*time.Second), "dead")
	if err != nil {
		t.Fatal(err)
	}
	q, w := "{"+la.Key()+"}:q", "{"+la.Key()+"}:w"

	ctx := timeout(t, 10*time.Second)
	// The live waiter's TTL is long enough that it makes no attempt of its
	// own while the test waits (it looks again every RenewEvery): such an
	// attempt would drop the dead entries once they ran out, before the
	// release this test is about.
	live := newLocker(t, nodes, baton.WithTTL(5*time.Minute), baton.WithHolder("live"))
	got := make(chan error, 1)
	go func() {
		l, err := live.Acquire(timeout(t, 30*time.Second), "dead")
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	redistest.WaitQueued(t, cs, la.Key(), "a", 1)
	// Then the dead waiter's entries, planted once the live waiter has
	// queued (planted before, they could run out before its first attempt
	// came, which would drop them). Score 1 puts the dead waiter first
	// (scores are start times in microseconds). The live waiter, first
	// when it queued, sleeps until a's key would expire, 30s on.
	const deadTTL = time.Second
	dead := rediskit.NewValue("dead")
	for _, c := range cs {
		entry := fmt.Sprintf("00 %d %d 1 %s", redistest.ServerMS(t, c), deadTTL.Milliseconds(), rediskit.NewWakeChannel())
		redistest.Plant(t, ctx, c, q, w, dead, 1, entry)
	}

	// Wait until the dead entries have run out on every node by that
	// node's clock, as the scripts will judge them.
	for i, c := range cs {
		redistest.WaitEntriesRunOut(t, c, w, "dead", 10*time.Second)
		if n := c.ZCard(timeout(t, time.Second), q).Val(); n != 2 {
			t.Fatalf("node %d: %d entries queued before the release, want the dead and the live waiter's", i, n)
		}
	}

	if err := la.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the live waiter did not get the lock within 10s of the release")
	}
	for i, c := range cs {
		if n := c.ZCard(timeout(t, time.Second), q).Val(); n != 0 {
			t.Errorf("node %d: %d entries left in the queue", i, n)
		}
	}
}

// TestLateUndo_TouchesNothingCounted: an undo that a node does not answer
// in time may still reach it later (a packet sent again, on a connection
// the client gave up), after a later attempt took the key there again over
// another connection. It must not delete a key that the hold counts.
//
// a's first attempt takes node 0 only (b holds 1 and 2), and its undo to
// node 0 is held back in the network past the node timeout. Then b's key
// on node 1 goes, and a's next attempt takes nodes 0 and 1. When the held
// undo lands, a majority of the nodes must still hold a's value.
func TestLateUndo_TouchesNothingCounted(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	px := testsvc.NewProxy(t, nodes[0].Addr)
	// TTL 10s: the node timeout is 1s, the time a's next attempt waits
	// for the held undo, and b's key goes long before.
	a := lockerOn(t, []goredis.UniversalClient{client(t, px.Addr()), cs[1], cs[2]}, baton.WithTTL(10*time.Second), baton.WithHolder("a"))
	key := redlock.DefaultPrefix + "late"
	ctx := timeout(t, 30*time.Second)
	// The held undo must be an EVALSHA that node 0 will run.
	if err := redlock.LoadScripts(ctx, cs[0]); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs[1:] {
		if err := c.Set(ctx, key, rediskit.NewValue("b"), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	held := px.HoldFirst([]byte(redlock.UnlockScriptHash))
	type result struct {
		l   *baton.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := a.Acquire(ctx, "late")
		got <- result{l, err}
	}()
	select {
	case <-held.Caught():
	case <-ctx.Done():
		t.Fatal("a's undo on node 0 was not seen within 30s")
	}
	if err := cs[1].Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	la := res.l
	held.Deliver(t, ctx)

	// The late undo has run on node 0. Whatever a holds, a majority of
	// the nodes must hold it.
	count := map[string]int{}
	for _, c := range cs {
		if v, err := c.Get(ctx, key).Result(); err == nil && rediskit.HolderOf(v) == "a" {
			count[v]++
		}
	}
	if n := slices.Max(append(slices.Collect(maps.Values(count)), 0)); n < 2 {
		t.Errorf("after the late undo, a's value is on %d of 3 nodes while its lease is held (err %v)", n, la.Err())
	}
	if err := la.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestClaim_LateScriptDeletesNothing: a first attempt's claim on a node
// with a queue is two requests, the SET and then a script that finds a
// waiter first. When the SETs won a majority before that script answered,
// the script may still run later, after a renewal counted that node: it
// must not delete our key there.
//
// On node 0 a live waiter is queued and the claim's script is held back
// in the network; a holds nodes 1 and 2. Then node 1's key goes (a clock
// jump there, or a restart), and the script lands. a's value must still
// be on nodes 0 and 2, a majority, while its lease is held.
func TestClaim_LateScriptDeletesNothing(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	ctx := timeout(t, 30*time.Second)
	if err := redlock.LoadScripts(ctx, cs[0]); err != nil {
		t.Fatal(err)
	}
	key := redlock.DefaultPrefix + "late-claim"
	q, w := "{"+key+"}:q", "{"+key+"}:w"
	waiter := rediskit.NewValue("w")
	entry := fmt.Sprintf("00 %d 60000 1 %s", redistest.ServerMS(t, cs[0]), rediskit.NewWakeChannel())
	redistest.Plant(t, ctx, cs[0], q, w, waiter, 1, entry)

	px := testsvc.NewProxy(t, nodes[0].Addr)
	held := px.HoldFirst([]byte(redlock.AcquireScriptHash))
	a := lockerOn(t, []goredis.UniversalClient{client(t, px.Addr()), cs[1], cs[2]}, baton.WithTTL(3*time.Second), baton.WithHolder("a"))
	la, err := a.Acquire(ctx, "late-claim")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Caught():
	case <-ctx.Done():
		t.Fatal("the claim's script on node 0 was not seen within 30s")
	}
	// Wait for a's first renewal (node 2's TTL goes up again), which
	// counts node 0 while the script waits, and comes after the node
	// timeout, when a has given up on the script and closed its
	// connection.
	waitRenewal(t, ctx, cs[2], key)
	if err := cs[1].PExpire(ctx, key, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	held.Deliver(t, ctx)

	v0, v2 := cs[0].Get(ctx, key).Val(), cs[2].Get(ctx, key).Val()
	if rediskit.HolderOf(v2) != "a" || v0 != v2 {
		t.Errorf("after the claim's late script, node 0 holds %q and node 2 %q; want a's value on both", rediskit.HolderOf(v0), rediskit.HolderOf(v2))
	}
	// And a renewal after it finds the majority that is there: node 0's
	// TTL goes up too.
	waitRenewal(t, ctx, cs[0], key)
	if err := la.Err(); err != nil {
		t.Errorf("lease ended: %v", err)
	}
}

// waitRenewal waits until the key's TTL on c goes up: a renewal. It polls
// the server's state, not a clock.
func waitRenewal(t *testing.T, ctx context.Context, c goredis.UniversalClient, key string) {
	t.Helper()
	for prev := c.PTTL(ctx, key).Val(); ; {
		cur := c.PTTL(ctx, key).Val()
		if cur > prev {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no renewal of %s within the test's time", key)
		}
		prev = cur
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRelease_FailedWhileRenewalRefused_IsALoss: the key was deleted on
// every node while the lease was held; the release gets no answer from
// any, and while it is on its way the renewal is refused. The loss is
// reported, not a clean release.
func TestRelease_FailedWhileRenewalRefused_IsALoss(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	hook := redistest.NewFailAfterRefusal(redlock.UnlockScriptHash, redlock.RenewScriptHash, 2) // a majority
	hooked := make([]goredis.UniversalClient, len(nodes))
	for i, n := range nodes {
		c := client(t, n.Addr)
		c.AddHook(hook)
		hooked[i] = c
	}
	l := lockerOn(t, hooked, baton.WithTTL(3*time.Second))
	ctx := timeout(t, 30*time.Second)
	lease, err := l.Acquire(ctx, "swallow")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if err := c.Del(ctx, lease.Key()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	hook.Ready = func() bool { return redlock.RenewalRefused(l) }
	hook.Armed.Store(true)
	rerr := lease.Release(ctx)
	hook.Armed.Store(false)
	var lost *baton.LostError
	if err := lease.Err(); !errors.As(err, &lost) || !strings.Contains(err.Error(), "release failed") {
		t.Fatalf("Release = %v, Err = %v; want Err the loss, saying the release failed too", rerr, err)
	}
}

// TestRelease_KeyGoneIsALoss: a Release that finds the lock no longer the
// lease's on enough nodes to deny it a majority (deleted here; expired
// early or taken, alike), before any renewal said so, reports the loss.
// Gone from one node of three only, the lease still held a majority: a
// clean release.
func TestRelease_KeyGoneIsALoss(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	l := newLocker(t, nodes, baton.WithTTL(30*time.Second)) // no renewal within the test
	ctx := timeout(t, 20*time.Second)
	for _, c := range []struct {
		deleted int
		lost    bool
	}{{1, false}, {2, true}} {
		lease, err := l.Acquire(ctx, "gone")
		if err != nil {
			t.Fatal(err)
		}
		// Acquire returns on a majority: the last node's SET may still be
		// on its way, and would land after the DEL below.
		redistest.WaitHeld(t, cs, lease.Key(), "")
		for _, cl := range cs[:c.deleted] {
			if err := cl.Del(ctx, lease.Key()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release with the key deleted on %d nodes: %v; want nil (a loss is Err's)", c.deleted, err)
		}
		var lost *baton.LostError
		if got := errors.As(lease.Err(), &lost); got != c.lost {
			t.Fatalf("key deleted on %d of 3 nodes: Err after the release %v; want lost %v", c.deleted, lease.Err(), c.lost)
		}
	}
}

// TestFailedFirstRound_Undone: a first attempt whose claims ran on every
// node, but whose answers never came back (dropped, or still on their way
// when the caller gave up), is undone on every node, as Redlock
// prescribes: otherwise our value would hold the lock on a majority, for
// one TTL, after the caller was told it did not get it.
func TestFailedFirstRound_Undone(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	for _, tc := range []struct {
		desc      string
		untilDone bool
		acquire   func(l *baton.Locker) error
	}{
		{"TryAcquire, answers dropped", false, func(l *baton.Locker) error {
			_, err := l.TryAcquire(timeout(t, 5*time.Second), "g")
			return err
		}},
		{"Acquire cancelled before any answer", true, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cs := clients(t, nodes)
			drops := make([]*redistest.DropClaimAnswer, len(cs))
			for i, c := range cs {
				drops[i] = &redistest.DropClaimAnswer{UntilDone: tc.untilDone}
				drops[i].Armed.Store(true)
				c.AddHook(drops[i])
			}
			ghost := lockerOn(t, cs, baton.WithTTL(10*time.Second), baton.WithHolder("ghost"))
			if tc.acquire == nil { // cancelled once every claim has run
				tc.acquire = func(l *baton.Locker) error {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					go func() {
						for _, d := range drops {
							<-d.Caught()
						}
						cancel()
					}()
					_, err := l.Acquire(ctx, "g")
					return err
				}
			}
			gerr := tc.acquire(ghost)
			if gerr == nil {
				t.Fatal("acquired without an answer")
			}
			for i, d := range drops {
				select {
				case <-d.Caught():
				default:
					t.Fatalf("node %d's claim was not caught: %v", i, gerr)
				}
			}
			other := newLocker(t, nodes, baton.WithTTL(10*time.Second), baton.WithHolder("other"))
			lease, err := other.TryAcquire(timeout(t, 5*time.Second), "g")
			if err != nil {
				t.Fatalf("after the failed acquisition (%v), the lock should be free: %v", gerr, err)
			}
			_ = lease.Release(timeout(t, 5*time.Second))
		})
	}
}

// TestRenewal_RefusedOnAnothersKey: renewals that arrive after the keys
// ran out early on every node and another client took them must neither
// extend nor shorten the new holder's keys, and must end the old lease.
// The old holder's renewals are held back on the wire until the new holder
// has the keys, so that they meet its value (a renewal that met no key is
// refused by any script, with or without the value's compare).
func TestRenewal_RefusedOnAnothersKey(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	// A's TTL is long and its first renewal early: that renewal is held
	// while B takes the lock, and with a 1s TTL A's local deadline came
	// 650ms later, which a loaded machine could pass before B held.
	const ttlA = 10 * time.Second
	cs := clients(t, nodes)
	holds := make([]*redistest.HoldScript, len(cs))
	for i, c := range cs {
		holds[i] = redistest.NewHoldScript(redlock.RenewScriptHash)
		defer holds[i].Let()
		c.AddHook(holds[i])
	}
	a := lockerOn(t, cs, baton.WithTTL(ttlA), baton.WithRenewEvery(200*time.Millisecond), baton.WithHolder("old"))
	b := newLocker(t, nodes, baton.WithTTL(30*time.Second), baton.WithHolder("new"))
	admin := clients(t, nodes)

	la, err := a.Acquire(timeout(t, 5*time.Second), "stock")
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range holds {
		select {
		case <-h.Waiting(): // A's first renewal is due, and held
		case <-time.After(5 * time.Second):
			t.Fatalf("A sent node %d no renewal", i)
		}
	}
	for _, c := range admin {
		if err := c.PExpire(timeout(t, 5*time.Second), la.Key(), time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var lb *baton.Lease
	for lb == nil { // the keys end within a millisecond; Redis may take a moment to notice
		lb, err = b.TryAcquire(timeout(t, 5*time.Second), "stock")
		if err != nil && !errors.Is(err, baton.ErrNotAcquired) {
			t.Fatal(err)
		}
		if la.Err() != nil {
			t.Fatalf("A's lease ended before its renewals were let go: %v", la.Err())
		}
	}
	defer lb.Release(context.Background())
	for _, h := range holds {
		h.Let()
	}
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A's renewals met B's keys and A's lease goes on: the renewals extended another's keys")
	}
	if !errors.Is(la.Err(), baton.ErrLeaseLost) {
		t.Errorf("A's Err = %v, want a refused renewal", la.Err())
	}
	held := 0
	for i, c := range admin {
		ctx := timeout(t, 5*time.Second)
		v, err := c.Get(ctx, lb.Key()).Result()
		if errors.Is(err, goredis.Nil) {
			// B's claim did not land here (A's key, set to run out in a
			// millisecond, was still there): B holds a majority without
			// this node, and A's renewal finds nothing of its own here.
			continue
		}
		if err != nil || !strings.HasSuffix(v, " new") {
			t.Errorf("node %d: B's key = %q, %v; want B's value", i, v, err)
			continue
		}
		held++
		if pttl := c.PTTL(ctx, lb.Key()).Val(); pttl <= ttlA {
			t.Errorf("node %d: B's key PTTL %v, at most A's TTL %v: A's renewal reset it", i, pttl, ttlA)
		}
	}
	if held < 2 {
		t.Errorf("B's value on %d of 3 nodes, want a majority", held)
	}
	if lb.Err() != nil {
		t.Errorf("B's lease ended: %v", lb.Err())
	}
}

// TestCycle_TwoRoundTrips: an uncontended acquire and release is two
// rounds, sent to every node in parallel: two round trips per node (the
// package doc's claim): the claim, and the release script.
func TestCycle_TwoRoundTrips(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	rts := make([]*redistest.CountRoundTrips, len(cs))
	for i, c := range cs {
		rts[i] = &redistest.CountRoundTrips{}
		c.AddHook(rts[i])
	}
	l := lockerOn(t, cs, baton.WithTTL(10*time.Second))
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
	cycle() // loads the scripts (EVALSHA, NOSCRIPT, EVAL)
	const cycles = 50
	before := make([]int64, len(rts))
	for i, rt := range rts {
		before[i] = rt.N.Load()
	}
	for range cycles {
		cycle()
	}
	for i, rt := range rts {
		if n := rt.N.Load() - before[i]; n != 2*cycles {
			t.Errorf("node %d: %d cycles made %d round trips, want %d", i, cycles, n, 2*cycles)
		}
	}
}

// TestOpen_InfoRefused: a user whose ACL refuses INFO (which tells one
// server from another) can still open the nodes: Open falls back to PING.
func TestOpen_InfoRefused(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	for _, c := range clients(t, nodes) {
		if err := c.Do(timeout(t, 5*time.Second), "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
			t.Fatal(err)
		}
	}
	u, err := baton.ParseURL("redlock://noinfo:pw@" + strings.Join(testsvc.RedisAddrs(nodes), ","))
	if err != nil {
		t.Fatal(err)
	}
	l, err := redlock.Open(timeout(t, 10*time.Second), u)
	if err != nil {
		t.Fatalf("Open as a user without INFO: %v", err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(timeout(t, 5*time.Second), "noinfo")
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(timeout(t, 5*time.Second))
}

// TestForceRelease_LateClaimOnAMinority: an acquisition goes on once a
// majority took its claim, so a claim to the third node may land after a
// forced release read that node. That stray key, on one node of three,
// is no lock: Inspect calls the lock free, and a second forced release
// says no one holds it (ErrNotAcquired), where it reported the old holder
// as released (TestOpen_InspectForceRelease failed so under load).
func TestForceRelease_LateClaimOnAMinority(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	hold := redistest.NewHoldClaims()
	cs[2].AddHook(hold)
	// A long TTL, so that the stray key outlives the checks below on a
	// slow machine (and the node timeout, TTL/10, is 1s), with renewals
	// often enough that the holder hears of the forced release quickly.
	l := lockerOn(t, cs, baton.WithHolder("cron-1"), baton.WithTTL(10*time.Second), baton.WithRenewEvery(500*time.Millisecond))
	lease, err := l.Acquire(timeout(t, 5*time.Second), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	fr := l.Backend().(baton.ForceReleaser)
	if info, err := fr.ForceRelease(timeout(t, 5*time.Second), "nightly"); err != nil || info.Holder != "cron-1" {
		t.Fatalf("ForceRelease of the held lock = %+v, %v", info, err)
	}
	hold.Let() // the third node's claim lands now
	select {
	case <-hold.Landed():
	case <-time.After(5 * time.Second):
		t.Fatal("the held-back claim never landed on the third node")
	}
	key := redlock.DefaultPrefix + "nightly"
	check := client(t, nodes[2].Addr)
	select {
	case <-lease.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("holder not told within a renewal of the forced release")
	}
	infos, err := l.Backend().(baton.Inspector).Inspect(timeout(t, 5*time.Second), "nightly")
	if err != nil || len(infos) != 1 || infos[0].Holder != "" {
		t.Fatalf("Inspect with a key on one node of three = %+v, %v; want the lock free", infos, err)
	}
	if check.Exists(timeout(t, time.Second), key).Val() != 1 {
		t.Fatal("the stray key ran out before the second forced release: the case is not tested")
	}
	if info, err := fr.ForceRelease(timeout(t, 5*time.Second), "nightly"); !errors.Is(err, baton.ErrNotAcquired) {
		t.Errorf("ForceRelease of a lock no majority holds = %+v, %v; want ErrNotAcquired", info, err)
	}
}

// TestClose_FrozenNodes_OneReleaseTimeout: Close ends its holds all at
// once, so nodes that stopped answering hold it up one release timeout,
// not one per hold.
func TestClose_FrozenNodes_OneReleaseTimeout(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	defer resume(nodes)
	batontest.CloseSilent(t, newLocker(t, nodes, baton.WithReleaseTimeout(time.Second)), func() {
		for _, n := range nodes {
			n.Pause()
		}
	})
}

// TestForceRelease_MinorityFound_OthersFailed: a holder on nodes 0 and 1
// (its claim to node 2 held back), node 1 then failing. A forced release
// finds and deletes the holder's key on node 0 only: with node 1 silent,
// it cannot tell a minority's stray key from a majority's lock, and says
// so (ErrUnavailable), instead of "no one holds it".
func TestForceRelease_MinorityFound_OthersFailed(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	hold := redistest.NewHoldClaims()
	cs[2].AddHook(hold)
	defer hold.Let()
	down := new(redistest.FailAll)
	cs[1].AddHook(down)
	l := lockerOn(t, cs, baton.WithHolder("cron-1"), baton.WithTTL(5*time.Second))
	if _, err := l.Acquire(timeout(t, 5*time.Second), "nightly"); err != nil {
		t.Fatal(err)
	}
	down.On.Store(true)
	_, err := l.Backend().(baton.ForceReleaser).ForceRelease(timeout(t, 10*time.Second), "nightly")
	if n := client(t, nodes[0].Addr).Exists(timeout(t, time.Second), redlock.DefaultPrefix+"nightly").Val(); n != 0 {
		t.Fatalf("the holder's key on node 0 is still there (err %v)", err)
	}
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "is not known") {
		t.Fatalf("ForceRelease that deleted cron-1's key on one node while another failed: %v; want ErrUnavailable saying the outcome is not known", err)
	}
}

// TestWait_HeadLeaves_NextTold: the first waiter gives up while a crashed
// holder's keys still run; the second is told on each node that it is
// first now, and takes the lock right after the keys expire (see
// redistest.HeadLeaves).
func TestWait_HeadLeaves_NextTold(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	const ttl = 30 * time.Second // RenewEvery 10s
	x := newLocker(t, nodes, baton.WithTTL(ttl), baton.WithHolder("x"))
	y := newLocker(t, nodes, baton.WithTTL(ttl), baton.WithHolder("y"))
	redistest.HeadLeaves(t, clients(t, nodes), x, y, redlock.DefaultPrefix, "job", ttl)
}

// TestAcquire_FrozenMajority_TriesAgain: a waiting Acquire whose rounds no
// majority answers in time (3 of 5 nodes frozen: connections open, no
// answers) tries again after random delays, as Redlock prescribes, and
// acquires once the nodes answer again, within its request timeout. A
// TryAcquire reports them unavailable at once.
func TestAcquire_FrozenMajority_TriesAgain(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 5)
	frozen := nodes[:3]
	defer resume(frozen)
	rounds := &redistest.CountScript{SHA: redlock.AcquireScriptHash}
	cs := clients(t, nodes)
	for _, c := range cs {
		c.AddHook(rounds)
	}
	l := lockerOn(t, cs, baton.WithTTL(2*time.Second), baton.WithRequestTimeout(time.Minute))
	for _, n := range frozen {
		n.Pause()
	}
	start := time.Now()
	if _, err := l.TryAcquire(timeout(t, time.Minute), "slow"); !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("TryAcquire with 3 of 5 nodes frozen: %v; want ErrUnavailable", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("TryAcquire took %v to report it; want about the node timeout (200ms) and an undo", took)
	}
	before := rounds.N.Load()
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(timeout(t, time.Minute), "slow")
		if err == nil {
			err = lease.Release(context.Background())
		}
		got <- err
	}()
	// Two rounds of the acquire script on every node (after the claim,
	// which runs none): the first found no majority, and the Acquire
	// tried again.
	ctx := timeout(t, 30*time.Second)
	for rounds.N.Load() < before+10 {
		select {
		case err := <-got:
			t.Fatalf("Acquire returned while a majority was frozen: %v", err)
		case <-ctx.Done():
			t.Fatalf("the Acquire ran %d acquire scripts in 30s, want two rounds", rounds.N.Load()-before)
		case <-time.After(5 * time.Millisecond):
		}
	}
	resume(frozen)
	if err := <-got; err != nil {
		t.Fatalf("Acquire after the frozen nodes came back: %v", err)
	}
}

// TestAcquire_FrozenMajority_UnavailableAfterRequestTimeout: when no
// majority answers in any round for a whole request timeout, a waiting
// Acquire reports the service unavailable, and for how long it tried.
func TestAcquire_FrozenMajority_UnavailableAfterRequestTimeout(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 5)
	frozen := nodes[2:]
	defer resume(frozen)
	const requestTimeout = time.Second
	l := newLocker(t, nodes, baton.WithTTL(2*time.Second), baton.WithRequestTimeout(requestTimeout))
	for _, n := range frozen {
		n.Pause()
	}
	start := time.Now()
	_, err := l.Acquire(timeout(t, time.Minute), "frozen")
	took := time.Since(start)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "in every round for") || !strings.Contains(err.Error(), frozen[0].Addr) {
		t.Fatalf("Acquire with 3 of 5 nodes frozen for good: %v; want ErrUnavailable naming a frozen node and how long it tried", err)
	}
	if took < requestTimeout || took > requestTimeout+2*time.Second {
		t.Fatalf("gave up after %v; want about the request timeout (%v) and a round", took, requestTimeout)
	}
}

// resume lets frozen nodes run again.
func resume(nodes []*testsvc.Redis) {
	for _, n := range nodes {
		n.Resume()
	}
}

// handoff is what handoffSetup made.
type handoff struct {
	held   *baton.Lease              // the holder's lease
	got    <-chan error              // w's outcome
	rounds *redistest.CountScript    // w's acquire-script runs
	w      *baton.Locker             // the waiter
	cs     []goredis.UniversalClient // clients of the test's own on the nodes
}

// handoffSetup has a hold "job" on five nodes, and w (holder "worker 12":
// a message names the value, its spaces and digits, then the tag) waiting
// for it, queued on every node, w's acquire-script runs counted, hooks
// on w's clients. w's handoff grace is grace, its node timeout 10s (a
// hook may hold an answer back). w's outcome is an error unless it
// acquired, every node's key then holds its value, and none expires
// before its lease's deadline.
func handoffSetup(t *testing.T, grace time.Duration, hooks ...goredis.Hook) handoff {
	t.Helper()
	nodes := testsvc.StartRedisNodes(t, 5)
	const ttl = 30 * time.Second // RenewEvery 10s: no timed retry within the test
	a := newLocker(t, nodes, baton.WithTTL(ttl), baton.WithHolder("a"))
	rounds := &redistest.CountScript{SHA: redlock.AcquireScriptHash}
	wcs := clients(t, nodes)
	for _, c := range wcs {
		c.AddHook(rounds)
		for _, h := range hooks {
			c.AddHook(h)
		}
	}
	w := lockerOn(t, wcs, baton.WithTTL(ttl), baton.WithHolder("worker 12"))
	redlock.SetHandoffGrace(w, grace)
	redlock.SetNodeTimeout(w, 10*time.Second)
	held, err := a.Acquire(timeout(t, 5*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	// a returned once a majority took its claim; the others' may still be
	// on their way, and w must queue behind it on every node.
	cs := clients(t, nodes)
	redistest.WaitHeld(t, cs, redlock.DefaultPrefix+"job", "a")
	errs := make(chan error, 1)
	go func() {
		lease, err := w.Acquire(timeout(t, time.Minute), "job")
		if err == nil {
			for i, c := range cs {
				// a's release may still be on its way to the nodes the
				// majority of handoffs did not need.
				if herr := redistest.HandedThrough(timeout(t, 5*time.Second), c, redlock.DefaultPrefix+"job", "worker 12", lease.Deadline()); herr != nil {
					err = fmt.Errorf("node %d: %w", i, herr)
				}
			}
			if rerr := lease.Release(context.Background()); err == nil {
				err = rerr
			}
		}
		errs <- err
	}()
	redistest.WaitQueued(t, cs, redlock.DefaultPrefix+"job", "a", 1)
	return handoff{held: held, got: errs, rounds: rounds, w: w, cs: cs}
}

// TestHandoff_NoRoundOfItsOwn: a release hands each node's key to the
// first waiter there and tells it which of its attempts the handoff came
// after; the waiter, told so by a majority of the nodes, holds the lock
// without an acquire round of its own. (When a release left the keys free
// for the waiter, its round took them: five more runs of the script.)
func TestHandoff_NoRoundOfItsOwn(t *testing.T) {
	t.Parallel()
	h := handoffSetup(t, 10*time.Second)
	before := h.rounds.N.Load()
	if err := h.held.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-h.got; err != nil {
		t.Fatalf("w after the release: %v", err)
	}
	if n := h.rounds.N.Load() - before; n != 0 {
		t.Fatalf("w ran the acquire script %d times after the release; want none: a majority's handoffs are the lock", n)
	}
}

// TestHandoff_Minority_RoundTakesTheRest: when only a minority of the
// nodes hand the key to the waiter (it is not queued on the others, whose
// release frees the key), the waiter looks with a round once the grace
// for the other handoffs has passed, and takes the lock with it.
func TestHandoff_Minority_RoundTakesTheRest(t *testing.T) {
	t.Parallel()
	h := handoffSetup(t, 100*time.Millisecond)
	cs := h.cs
	ctx := timeout(t, 5*time.Second)
	q, w := "{"+redlock.DefaultPrefix+"job}:q", "{"+redlock.DefaultPrefix+"job}:w"
	waiter := cs[0].ZRange(ctx, q, 0, 0).Val()
	if len(waiter) != 1 {
		select {
		case err := <-h.got:
			t.Fatalf("queue on node 0: %v, want w's value; w's Acquire returned: %v", waiter, err)
		default:
		}
		t.Fatalf("queue on node 0: %v, want w's value; key %q", waiter, cs[0].Get(ctx, redlock.DefaultPrefix+"job").Val())
	}
	for _, c := range cs[2:] {
		if err := c.ZRem(ctx, q, waiter[0]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.HDel(ctx, w, waiter[0]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := h.rounds.N.Load()
	released := time.Now()
	if err := h.held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-h.got; err != nil {
		t.Fatalf("w after a release that handed it the key on 2 of 5 nodes: %v", err)
	}
	// Its grace (100ms), not its timed retry (RenewEvery, 10s).
	if took := time.Since(released); took > 2*time.Second {
		t.Errorf("w took the lock %v after the release; want its round right after the grace", took)
	}
	if n := h.rounds.N.Load() - before; n == 0 {
		t.Fatal("w took the lock without a round, handed the key by 2 nodes of 5")
	}
}

// TestHandoff_MessageBeforeAnswer: the release's messages reach the waiter
// after its round ran on every node but before the round's answers did
// (the messages come on another connection). The waiter must keep them
// (a round forgets the messages before it, not after) and then holds the
// lock with no round of its own.
func TestHandoff_MessageBeforeAnswer(t *testing.T) {
	t.Parallel()
	answers := redistest.NewHoldAnswer(redlock.AcquireScriptHash)
	t.Cleanup(answers.Let)
	delivered, onWake := redistest.Deliveries(16)
	h := handoffSetup(t, 10*time.Second, answers)
	redlock.OnWake(h.w, onWake)
	// w's first attempt is a claim, without the script; its second, queued,
	// ran the script on every node (handoffSetup saw it queued).
	var before int64
	redistest.Overtake(t, answers, 5, h.got, func() error {
		before = h.rounds.N.Load()
		return h.held.Release(timeout(t, 5*time.Second))
	}, delivered, "worker 12")
	if err := <-h.got; err != nil {
		t.Fatalf("w after the release: %v", err)
	}
	if n := h.rounds.N.Load() - before; n != 0 {
		t.Fatalf("w ran the acquire script %d times after the release; want none: the messages that came before the answers are a majority's handoffs", n)
	}
}

// slowRounds delays every run of the acquire script by delay, as a slow
// network would, and records the send time of the last; renewals it
// delays too. With Hold, a Pub/Sub message read is held until Let (see
// redistest.HeldMessages).
type slowRounds struct {
	*redistest.HeldMessages
	delay    time.Duration
	lastSent atomic.Int64 // unix nanoseconds
}

func (h *slowRounds) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if a := cmd.Args(); len(a) >= 2 && a[0] == "evalsha" {
			switch a[1] {
			case redlock.AcquireScriptHash:
				h.lastSent.Store(time.Now().UnixNano())
				time.Sleep(h.delay)
			case redlock.RenewScriptHash:
				time.Sleep(h.delay)
			}
		}
		return next(ctx, cmd)
	}
}

// TestHandoff_PastARenewal_Confirmed: handoffs from a majority that reach
// the waiter after a renewal counted from its round's start would be due
// (its rounds are slow, and its timed retry has not come yet), though
// before that round's deadline, are confirmed by a round of its own, and
// the lease's deadline counts from that round: taken on the queued round's
// word, the lease came with less time until its deadline than any renewed
// lease has, its first renewal already due.
func TestHandoff_PastARenewal_Confirmed(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 5)
	// The handoffs come at start + renewEvery + 5ms: well before the
	// deadline (start + 2.968s), by which the old rule took them on the
	// round's word, and w's timed retry (its answers + renewEvery).
	const ttl, renewEvery, delay = 3 * time.Second, 1500 * time.Millisecond, 500 * time.Millisecond
	a := newLocker(t, nodes, baton.WithTTL(30*time.Second), baton.WithHolder("a"))
	hook := &slowRounds{HeldMessages: redistest.NewHeldMessages(t), delay: delay}
	wcs := clients(t, nodes)
	for _, c := range wcs {
		c.AddHook(hook)
	}
	w := lockerOn(t, wcs, baton.WithTTL(ttl), baton.WithRenewEvery(renewEvery), baton.WithHolder("w"))
	redlock.SetNodeTimeout(w, 2*time.Second) // above delay
	held, err := a.Acquire(timeout(t, 5*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	cs := clients(t, nodes)
	redistest.WaitHeld(t, cs, redlock.DefaultPrefix+"job", "a")
	wGot := batontest.AcquireLater(timeout(t, time.Minute), w.Acquire, "job")
	redistest.WaitQueued(t, cs, redlock.DefaultPrefix+"job", "a", 1)
	// The queued round was sent (by its start) at most delay before the
	// last run recorded; its answers came delay later. Hold the release's
	// messages until just past a renewal from that start, well before its
	// deadline (start + TTL - drift) and w's timed retry (RenewEvery after
	// the answers).
	sent := time.Unix(0, hook.lastSent.Load())
	hook.Hold.Store(true)
	if err := held.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(sent.Add(renewEvery + 5*time.Millisecond)))
	if late := time.Since(sent); late >= delay+renewEvery {
		// w's timed retry may come first: it would hold all the same,
		// and this run would not test the handoffs.
		t.Skipf("the machine stalled: the messages would be let through %v after the round, past w's next retry", late)
	}
	let := time.Now() // the messages reach w after this
	hook.Let()
	r := <-wGot
	if r.Err != nil || r.ReleaseErr != nil {
		t.Fatalf("w, handed the lock by a release: %v, release %v", r.Err, r.ReleaseErr)
	}
	// A lease's deadline is TTL - drift from the start of the round that
	// took it (or of a renewal since, later still). Confirmed by a round,
	// that round started once the messages came: after let, however long
	// the round then took, or w took to return. Taken on the queued
	// round's word, it counts from that round's start, before its runs
	// were recorded. (Such a lease's first renewal is due at once; the
	// hook holds it back by delay, so that it cannot move the deadline on
	// before w reads it.)
	from := r.Deadline.Add(-(ttl - w.Config().Drift))
	switch {
	case !from.After(sent):
		t.Errorf("w's lease counts its deadline from %v before the messages were let through, from the queued round (its last run recorded %v before them): taken on that round's word, not confirmed by a round", let.Sub(from).Round(time.Millisecond), let.Sub(sent).Round(time.Millisecond))
	case from.Before(let):
		// A round after the queued one, started before the messages
		// came: w's timed retry. It holds all the same, and this run did
		// not test the handoffs.
		t.Skipf("the machine stalled: w's timed retry started %v before the messages were let through", let.Sub(from).Round(time.Millisecond))
	default:
		t.Logf("w's lease counts its deadline from %v after the messages were let through", from.Sub(let).Round(time.Microsecond))
	}
}

// acquireRecovered is l.Acquire(ctx, name), with a panic in it returned
// as an error, so that a test reports it rather than dies of it.
func acquireRecovered(ctx context.Context, l *baton.Locker, name string) (lease *baton.Lease, err error) {
	defer func() {
		if p := recover(); p != nil {
			lease, err = nil, fmt.Errorf("Acquire panicked: %v", p)
		}
	}()
	return l.Acquire(ctx, name)
}

// TestHandoff_StalledPastDeadline_TriesAgain: a waiter handed the lock by
// a majority in time (before a renewal counted from its round's start is
// due) is held up, before it makes its hold, past the hold's local
// deadline, as a stall of the machine would. It must not return a nil
// hold (the Locker made a lease of it and panicked), and must leave no
// key behind: it takes the keys with an attempt, and a third client gets
// the lock once it released.
func TestHandoff_StalledPastDeadline_TriesAgain(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	a := newLocker(t, nodes, baton.WithTTL(30*time.Second), baton.WithHolder("a"))
	w := newLocker(t, nodes, baton.WithTTL(time.Second), baton.WithHolder("w"))
	c := newLocker(t, nodes, baton.WithHolder("c"))
	reached := make(chan struct{}, 1)
	redlock.OnHandoffHeld(w, func(deadline time.Time) {
		select {
		case reached <- struct{}{}:
		default:
		}
		<-time.After(time.Until(deadline) + time.Millisecond) // past the deadline held checks, not a guess at it
	})
	held, err := a.Acquire(timeout(t, 5*time.Second), "job")
	if err != nil {
		t.Fatal(err)
	}
	cs := clients(t, nodes)
	redistest.WaitHeld(t, cs, redlock.DefaultPrefix+"job", "a")
	type result struct {
		lease *baton.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		lease, err := acquireRecovered(timeout(t, 30*time.Second), w, "job")
		if err == nil {
			err = lease.Release(context.Background())
		}
		got <- result{lease, err}
	}()
	redistest.WaitQueued(t, cs, redlock.DefaultPrefix+"job", "a", 1)
	if err := held.Release(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	select {
	case <-reached:
	default:
		// w's timed retry (RenewEvery, 333ms) came first: it held all
		// the same, and this run did not test the stall.
		t.Skipf("the machine stalled: w took the lock without the handoffs (%v)", r.err)
	}
	if r.err != nil {
		// It panicked (a nil hold), or gave up keys handed to it.
		t.Fatalf("w, stalled past its deadline after the handoffs: %v; want the lock, taken again by an attempt", r.err)
	}
	lc, err := c.TryAcquire(timeout(t, 5*time.Second), "job")
	if err != nil {
		t.Fatalf("c, once w released: %v; want the lock free", err)
	}
	_ = lc.Release(context.Background())
}

// afterClose is a go-redis hook that counts the requests running on its
// client once closed is set (right after the Locker's Close returned):
// Close waits for every request it does not refuse to start.
type afterClose struct {
	redistest.ProcessOnly
	closed, late atomic.Bool
}

func (h *afterClose) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.closed.Load() {
			h.late.Store(true)
		}
		err := next(ctx, cmd)
		if h.closed.Load() {
			h.late.Store(true)
		}
		return err
	}
}

// TestRelease_LostLeaseAtClose: a lease lost before Close (dropped from
// the holds Close ends) and released while Close runs, or after it
// returned, returns at once with its loss, and sends no request once
// Close waits for them: its release used to start requests (a WaitGroup
// Add) while Close's Wait was returning, which may panic, on clients
// Close then closed; after Close it still sent them, long after Close
// returned. Its keys expire with their TTL.
func TestRelease_LostLeaseAtClose(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	admin := clients(t, nodes)
	for i, whileClosing := range []bool{false, true, true, true, true, true, true, true, true, true} {
		hook := &afterClose{}
		cs := clients(t, nodes)
		for _, c := range cs {
			c.(*goredis.Client).AddHook(hook)
		}
		l, err := redlock.New(cs, baton.WithTTL(redlock.MinTTL))
		if err != nil {
			t.Fatal(err)
		}
		ctx := timeout(t, 20*time.Second)
		name := fmt.Sprintf("lost-%d", i)
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		redistest.WaitHeld(t, admin, lease.Key(), "")
		for _, c := range admin {
			if err := c.Del(ctx, lease.Key()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// The next renewal is refused: lost, and dropped from the holds
		// Close ends.
		for !errors.Is(lease.Err(), baton.ErrLeaseLost) || redlock.Holds(l) != 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("the lease is not lost and dropped 20s after its key was deleted on every node: %v, %d holds", lease.Err(), redlock.Holds(l))
			case <-time.After(5 * time.Millisecond):
			}
		}
		released := make(chan error, 1)
		start := time.Now()
		if whileClosing {
			go func() { released <- lease.Release(context.Background()) }()
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		hook.closed.Store(true)
		if !whileClosing {
			go func() { released <- lease.Release(context.Background()) }()
		}
		select {
		case err := <-released:
			if err != nil {
				t.Errorf("Release of a lost lease (while closing %v) = %v, want nil, the loss Err's", whileClosing, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Release of a lost lease (while closing %v) still runs 5s after it began", whileClosing)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close and Release of a lost lease (while closing %v) took %v", whileClosing, d)
		}
		if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
			t.Errorf("Err = %v, want the loss", lease.Err())
		}
		if hook.late.Load() {
			t.Errorf("a request ran after Close returned (release while closing %v)", whileClosing)
		}
	}
}

// cancelAtSubscribe is a go-redis hook that, once its client's first
// pipeline (an acquisition's claim) has run, cancels an acquisition's
// context when the client dials (the Locker's wake-up subscription), and
// from then on counts the acquire script's runs.
type cancelAtSubscribe struct {
	redistest.ProcessOnly
	cancel    context.CancelFunc
	armed     *atomic.Bool // shared by the nodes' hooks
	cancelled *atomic.Bool
	after     *atomic.Int64
}

func (h *cancelAtSubscribe) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		h.armed.Store(true)
		return err
	}
}

func (h *cancelAtSubscribe) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.armed.Load() && h.cancelled.CompareAndSwap(false, true) {
			h.cancel()
		}
		return next(ctx, network, addr)
	}
}

func (h *cancelAtSubscribe) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.cancelled.Load() && redistest.ScriptSHA(cmd) == redlock.AcquireScriptHash {
			h.after.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestAcquire_CancelledWhileSubscribing: an acquisition whose context
// ends while it subscribes (its claim found the lock held) returns the
// context's cause and sends no round after it, which would join the
// queues after the end, for a give-up that may overtake it.
func TestAcquire_CancelledWhileSubscribing(t *testing.T) {
	nodes := testsvc.StartRedisNodes(t, 3)
	if _, err := newLocker(t, nodes).Acquire(timeout(t, 5*time.Second), "job"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var armed, cancelled atomic.Bool
	var after atomic.Int64
	why := errors.New("the caller gave up")
	cs := clients(t, nodes)
	for _, c := range cs {
		c.(*goredis.Client).AddHook(&cancelAtSubscribe{cancel: func() { cancel(why) }, armed: &armed, cancelled: &cancelled, after: &after})
	}
	w := lockerOn(t, cs, baton.WithTTL(2*time.Second))
	_, err := w.Acquire(ctx, "job")
	if !errors.Is(err, why) {
		t.Fatalf("Acquire cancelled while it subscribed: %v; want the cause, %v", err, why)
	}
	if !cancelled.Load() {
		t.Fatal("the acquisition never subscribed: the test did not cancel it")
	}
	if n := after.Load(); n != 0 {
		t.Errorf("%d runs of the acquire script after the acquisition's context ended; want none", n)
	}
}
