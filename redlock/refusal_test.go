package redlock_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/syncbuf"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redlock"
)

// TestRefusal_WrongType: a node whose lock key holds a list (set by
// something other than baton) refuses every request on it for good. One
// such node counts as failed, and the majority of the others still holds
// the lock. Two of three deny the majority alone: an error saying so,
// that no retry will mend, neither ErrUnavailable (which baton elect and
// run --wait retry for ever) nor an invalid option; with a node down too,
// an outage has its part, which may end: ErrUnavailable.
func TestRefusal_WrongType(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	ctx := timeout(t, 30*time.Second)
	key := redlock.DefaultPrefix + "job"
	l := lockerOn(t, cs, baton.WithRequestTimeout(time.Second))

	if err := cs[0].LPush(ctx, key, "x").Err(); err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("one node of three refusing: %v; want the majority's lock", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release with one node refusing: %v", err)
	}

	if err := cs[1].LPush(ctx, key, "x").Err(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		t.Logf("%s: %v", what, err)
		var rerr goredis.Error
		if err == nil || errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrInvalidOption) || !errors.As(err, &rerr) {
			t.Fatalf("%s with two nodes of three refusing: %v; want their refusal, neither ErrUnavailable nor ErrInvalidOption", what, err)
		}
		for _, s := range []string{"WRONGTYPE", key, "2 of 3 nodes", "refused it for good", nodes[0].Addr, nodes[1].Addr} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q; want it to say %q", what, err, s)
			}
		}
	}
	_, err = l.TryAcquire(ctx, "job")
	check("TryAcquire", err)
	start := time.Now()
	_, err = l.Acquire(ctx, "job")
	check("Acquire", err)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Acquire took %v to give up", d)
	}

	if err := cs[1].Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	nodes[2].Kill()
	_, err = l.TryAcquire(ctx, "job")
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("one node refusing, one down: %v; want ErrUnavailable, with the refusal among its causes", err)
	}
}

// TestReplicaNode: a node that is a replica counts as one failed node:
// Open bears one of three, and logs it, and a majority of replicas is
// unavailable (for a while after a failover an address may reach the old
// primary, now a replica), saying to give a primary. On a Locker built
// with New, the replica's READONLY counts as one node failing: the other
// two hold the lock.
func TestReplicaNode(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 4)
	ctx := timeout(t, 30*time.Second)
	host, port, _ := strings.Cut(nodes[3].Addr, ":")
	if err := client(t, nodes[2].Addr).ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	// One replica of three: borne as a failed node, and said; the lock
	// is the other two's. (A replica may be the old primary behind an
	// address, for a while after a failover.)
	var logs syncbuf.Buffer
	u, _ := url.Parse("redlock://" + strings.Join(testsvc.RedisAddrs(nodes[:3]), ","))
	l, err := redlock.Open(ctx, u, baton.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatalf("Open with one replica of three nodes: %v; want it borne as one failed node", err)
	}
	// The logger gets its records from a goroutine of its own.
	batontest.WaitFor(t, 10*time.Second, "a warning naming the replica, logged by Open", func() bool {
		return strings.Contains(logs.String(), "is a replica") && strings.Contains(logs.String(), nodes[2].Addr)
	})
	if lease, err := l.TryAcquire(ctx, "opened"); err != nil {
		t.Errorf("TryAcquire with one replica of three: %v", err)
	} else {
		_ = lease.Release(ctx)
	}
	_ = l.Close()

	// An Open that fails just after it warned of the replica (two of its
	// nodes are one server, named two ways) has handed the warning on when
	// it returns, though the handler is slow: no Locker.Close will.
	_, p0, _ := strings.Cut(nodes[0].Addr, ":")
	slow := &slowHandler{}
	su, _ := url.Parse("redlock://" + nodes[0].Addr + ",localhost:" + p0 + "," + nodes[2].Addr)
	if _, err := redlock.Open(ctx, su, baton.WithLogger(slog.New(slow))); !errors.Is(err, baton.ErrInvalidOption) {
		t.Fatalf("Open with one server named twice: %v; want an option error", err)
	}
	if logged, taken := slow.logged.Load(), slow.taken.Load(); logged == 0 || taken != logged {
		t.Errorf("Open returned its failure with %d of its %d records handed on", taken, logged)
	}

	// Two of three: no majority, unavailable (not a usage error: it may
	// pass), saying to give a primary if it stays so.
	host1, port1, _ := strings.Cut(nodes[3].Addr, ":")
	if err := client(t, nodes[1].Addr).ReplicaOf(ctx, host1, port1).Err(); err != nil {
		t.Fatal(err)
	}
	l, err = redlock.Open(ctx, u)
	if err == nil {
		_ = l.Close()
		t.Fatal("Open with two replicas of three nodes succeeded")
	}
	t.Logf("Open: %v", err)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "primary") {
		t.Fatalf("Open with two replicas of three nodes: %v; want unavailable, saying to give a primary", err)
	}
	if err := client(t, nodes[1].Addr).ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}

	lease, err := newLocker(t, nodes[:3]).TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("a replica among three nodes: %v; want the other two's lock", err)
	}
	_ = lease.Release(ctx)
}

// slowHandler counts the records it is asked about (slog asks Enabled
// when the record is logged, on the logging goroutine) and those it takes,
// each after a pause: a handler slower than the code that logs.
type slowHandler struct{ logged, taken atomic.Int32 }

func (h *slowHandler) Enabled(context.Context, slog.Level) bool {
	h.logged.Add(1)
	return true
}
func (h *slowHandler) Handle(context.Context, slog.Record) error {
	time.Sleep(50 * time.Millisecond)
	h.taken.Add(1)
	return nil
}
func (h *slowHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *slowHandler) WithGroup(string) slog.Handler      { return h }

// TestInspect_WrongTypeBehindFreeLock: lock keys that hold a hash (set by
// something other than baton) on two nodes of three make Inspect fail
// with WRONGTYPE naming the key, also when a lock inspected before it is
// free: each node's pipeline error was only the first failed command's,
// that free lock's GET (Nil), which was ignored, so the hash showed as a
// free lock and no error. On one node of three, the majority of the
// others still answers.
func TestInspect_WrongTypeBehindFreeLock(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	ctx := timeout(t, 30*time.Second)
	key := redlock.DefaultPrefix + "b"
	insp := lockerOn(t, cs, baton.WithRequestTimeout(time.Second)).Backend().(baton.Inspector)
	if err := cs[0].HSet(ctx, key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if infos, err := insp.Inspect(ctx, "a", "b"); err != nil || len(infos) != 2 || infos[1].Key != "" {
		t.Fatalf("Inspect(a, b) with one node of three refusing = %+v, %v; want both free, from the others", infos, err)
	}
	if err := cs[1].HSet(ctx, key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	for _, names := range [][]string{{"b"}, {"a", "b"}, {"b", "a"}} {
		infos, err := insp.Inspect(ctx, names...)
		t.Logf("Inspect(%q): %v", names, err)
		var rerr goredis.Error
		if err == nil || errors.Is(err, baton.ErrUnavailable) || !errors.As(err, &rerr) {
			t.Errorf("Inspect(%q) with two nodes of three refusing = %+v, %v; want their refusal, not ErrUnavailable", names, infos, err)
			continue
		}
		for _, s := range []string{"WRONGTYPE", key, "2 of 3 nodes", "refused it for good"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Inspect(%q): %q; want it to say %q", names, err, s)
			}
		}
	}
}

// TestInspect_ListShowsWhatItCannotRead: listing every lock, one whose
// key holds a hash on two nodes of three (set by another tool) is listed
// with its error, and the others as they are; the stray key failed the
// whole list. When it is the only lock, the list is its error.
func TestInspect_ListShowsWhatItCannotRead(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	cs := clients(t, nodes)
	ctx := timeout(t, 30*time.Second)
	key := redlock.DefaultPrefix + "b"
	for _, c := range cs[:2] {
		if err := c.HSet(ctx, key, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := lockerOn(t, cs, baton.WithHolder("h"), baton.WithTTL(10*time.Second)).Acquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	insp := lockerOn(t, cs, baton.WithRequestTimeout(time.Second)).Backend().(baton.Inspector)
	infos, err := insp.Inspect(ctx)
	var rerr goredis.Error
	if err != nil || len(infos) != 2 || infos[0].Name != "b" || infos[0].Holder != "" || !errors.As(infos[0].Err, &rerr) ||
		!strings.Contains(infos[0].Err.Error(), "WRONGTYPE") || infos[1].Name != "c" || infos[1].Holder != "h" || infos[1].Err != nil {
		t.Fatalf("Inspect() = %+v, %v; want b with its WRONGTYPE, and c held by h", infos, err)
	}

	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	infos, err = insp.Inspect(ctx)
	if err == nil || errors.Is(err, baton.ErrUnavailable) || !errors.As(err, &rerr) || !strings.Contains(err.Error(), key) {
		t.Errorf("Inspect() with its only lock refused = %+v, %v; want the refusal naming %s", infos, err, key)
	}
}
