package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediskit/redistest"
	"github.com/baton-go/baton/internal/syncbuf"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
)

// aclUser makes the ACL user app (password pw) with the given rules on
// srv, and returns a Locker factory logged in as it.
func aclUser(t *testing.T, srv *testsvc.Redis, rules ...string) func(holder string, opts ...baton.Option) *baton.Locker {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	redistest.SetUser(t, []goredis.UniversalClient{client(t, srv.Addr)}, rules...)
	u, err := url.Parse("redis://app:pw@" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	return func(holder string, opts ...baton.Option) *baton.Locker {
		l, err := redis.Open(ctx, u, append([]baton.Option{baton.WithTTL(2 * time.Second), baton.WithHolder(holder)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
}

// TestACL_Grants: a user with exactly what the package doc lists
// (rediskit.Grants) takes, waits for, is handed, observes and lists locks.
func TestACL_Grants(t *testing.T) {
	srv := testsvc.StartRedis(t)
	open := aclUser(t, srv, strings.Fields(rediskit.Grants(redis.DefaultPrefix))...)
	a, b := open("a"), open("b")
	ctx := timeout(t, 20*time.Second)
	la, err := a.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	terms, err := b.Observe(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if term := <-terms; term.Leader != "a" {
		t.Fatalf("observed %+v, want a leading", term)
	}
	got := batontest.AcquireLater(ctx, b.Acquire, "job")
	waitQueued(t, client(t, srv.Addr), redis.DefaultPrefix+"job", 1)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.Err != nil || g.ReleaseErr != nil {
		t.Fatalf("the waiter: %v, its release: %v", g.Err, g.ReleaseErr)
	}
	if _, err := b.Backend().(baton.Inspector).Inspect(ctx); err != nil {
		t.Fatalf("Inspect: %v", err)
	}
}

// TestACL_ObserveWithoutXINFO: XINFO serves only the count of changes a
// slow reader missed; a user refused it still observes (without that
// count), where the refusal used to fail the state script, and with it
// every observation.
func TestACL_ObserveWithoutXINFO(t *testing.T) {
	srv := testsvc.StartRedis(t)
	open := aclUser(t, srv, append(strings.Fields(rediskit.Grants(redis.DefaultPrefix)), "-xinfo")...)
	a, obs := open("a"), open("obs")
	ctx := timeout(t, 20*time.Second)
	app := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Username: "app", Password: "pw"})
	defer app.Close()
	if err := app.XInfoStream(ctx, "{"+redis.DefaultPrefix+"job}:o").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("XINFO STREAM as the user: %v; want NOPERM, or this test tests nothing", err)
	}
	terms, err := obs.Observe(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	la, err := a.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-", "a", "-"} {
		if got := batontest.NextLeader(t, terms, 10*time.Second); got != want {
			t.Fatalf("term %q, want %q: no leader, a, no leader", got, want)
		}
	}
}

// TestACL_Refused_SaysWhatToGrant: a user without the wake-up channels,
// or with the prefix's keys but not those in their hash slot, is refused
// by the server with NOPERM at the first request that needs them. That
// is an error in the configuration, not the service failing: a
// *baton.OptionError (exit 2) naming what to grant, not ErrUnavailable,
// which elect would retry for ever.
func TestACL_Refused_SaysWhatToGrant(t *testing.T) {
	srv := testsvc.StartRedis(t)
	for _, tc := range []struct {
		name  string
		rules []string
	}{
		{"no channels", []string{"~*", "resetchannels", "+@all"}},
		{"prefix keys only", []string{"~" + redis.DefaultPrefix + "*", "&*", "+@all"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open := aclUser(t, srv, tc.rules...)
			ctx := timeout(t, 10*time.Second)
			holder := newLocker(t, srv.Addr)
			l, err := holder.Acquire(ctx, "acl")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(context.Background())
			_, err = open("b").Acquire(timeout(t, 5*time.Second), "acl")
			if !errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), rediskit.Grants(redis.DefaultPrefix)) {
				t.Fatalf("Acquire as a user refused %s: %v; want an invalid option naming NOPERM and what to grant", tc.name, err)
			}
		})
	}

	// A claim that finds the key free but a waiter first (the holder's
	// key went early) yields it, with a release whose PUBLISH is refused:
	// the warning says what to grant (it said err=<nil>).
	t.Run("claim yields without channels", func(t *testing.T) {
		var logs syncbuf.Buffer
		open := aclUser(t, srv, "~*", "resetchannels", "+@all")
		ctx := timeout(t, 10*time.Second)
		holder := newLocker(t, srv.Addr, baton.WithTTL(10*time.Second))
		lh, err := holder.Acquire(ctx, "acl-yield")
		if err != nil {
			t.Fatal(err)
		}
		waiter := newLocker(t, srv.Addr, baton.WithTTL(10*time.Second))
		got := batontest.AcquireLater(timeout(t, 10*time.Second), waiter.Acquire, "acl-yield")
		c := client(t, srv.Addr)
		waitQueued(t, c, redis.DefaultPrefix+"acl-yield", 1)
		if err := c.Del(ctx, lh.Key()).Err(); err != nil { // gone early, the waiter not told
			t.Fatal(err)
		}
		_, err = open("newcomer", baton.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))).TryAcquire(ctx, "acl-yield")
		if !errors.Is(err, baton.ErrNotAcquired) {
			t.Fatalf("newcomer's TryAcquire on a key reserved for a waiter: %v, want not acquired", err)
		}
		// The logger gets its records from a goroutine of its own.
		batontest.WaitFor(t, 10*time.Second, "the failed release's warning naming what to grant, in the log", func() bool {
			out := logs.String()
			return strings.Contains(out, "could not release our value") && strings.Contains(out, rediskit.Grants(redis.DefaultPrefix))
		})
		if g := <-got; g.Err != nil || g.ReleaseErr != nil {
			t.Fatalf("the waiter: %v, its release: %v", g.Err, g.ReleaseErr)
		}
		_ = lh.Release(ctx)
	})

	// A holder without the channels that never waited takes the lock;
	// its release, handing the lock to a waiter, is refused inside the
	// script at the PUBLISH (Redis 7.0 says "ERR The user executing the
	// script can't publish", not NOPERM): the same error in the
	// configuration. The lock was handed on all the same, and the waiter
	// finds it at its next look.
	t.Run("release without channels", func(t *testing.T) {
		open := aclUser(t, srv, "~*", "resetchannels", "+@all")
		ctx := timeout(t, 10*time.Second)
		l, err := open("a").Acquire(ctx, "acl-release")
		if err != nil {
			t.Fatal(err)
		}
		waiter := newLocker(t, srv.Addr)
		got := batontest.AcquireLater(timeout(t, 10*time.Second), waiter.Acquire, "acl-release")
		waitQueued(t, client(t, srv.Addr), redis.DefaultPrefix+"acl-release", 1)
		err = l.Release(ctx)
		if !errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), rediskit.Grants(redis.DefaultPrefix)) {
			t.Fatalf("Release as a user without channels, to a waiter: %v; want an invalid option naming what to grant", err)
		}
		if g := <-got; g.Err != nil || g.ReleaseErr != nil {
			t.Fatalf("the waiter: %v, its release: %v", g.Err, g.ReleaseErr)
		}
	})
}

// TestOpen_UserWithoutPassword: go-redis sends AUTH only with a password,
// so a URL naming a user without one (app@, app:@) ran as the default
// user, with the default user's permissions, without a word. It is
// refused at Open, saying what to write; a nopass user given any password
// runs as itself, and a password alone as the default user.
func TestOpen_UserWithoutPassword(t *testing.T) {
	srv := testsvc.StartRedis(t)
	ctx := timeout(t, 20*time.Second)
	admin := client(t, srv.Addr)
	redistest.SetUser(t, []goredis.UniversalClient{admin}, strings.Fields(rediskit.Grants(redis.DefaultPrefix))...)
	if err := admin.Do(ctx, "ACL", "SETUSER", "free", "reset", "on", "nopass", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{"redis://app@" + srv.Addr, "redis://app:@" + srv.Addr, "redis://free@" + srv.Addr} {
		u, _ := url.Parse(raw)
		l, err := redis.Open(ctx, u)
		if err == nil {
			_ = l.Close()
		}
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), ":PASSWORD@") {
			t.Errorf("Open(%s) = %v; want an invalid option saying to add :PASSWORD, not a Locker running as the default user", raw, err)
		}
	}
	// A nopass user given any password runs as itself, as the server's
	// client list tells while its Locker is open.
	u, _ := url.Parse("redis://free:anything@" + srv.Addr)
	l, err := redis.Open(ctx, u)
	if err != nil {
		t.Fatalf("Open(%s): %v", u.Redacted(), err)
	}
	if _, err := l.TryAcquire(ctx, "who"); err != nil {
		t.Fatal(err)
	}
	if list := admin.ClientList(ctx).Val(); !strings.Contains(list, " user=free ") {
		t.Errorf("no connection runs as the nopass user free: %s", list)
	}
	_ = l.Close()
	// A password alone is the default user's (requirepass): Open
	// authenticates, or the server would refuse it (NOAUTH).
	if err := admin.ConfigSet(ctx, "requirepass", "pw").Err(); err != nil {
		t.Fatal(err)
	}
	u, _ = url.Parse("redis://:pw@" + srv.Addr)
	if l, err = redis.Open(ctx, u); err != nil {
		t.Fatalf("Open(%s): %v", u.Redacted(), err)
	}
	if _, err := l.TryAcquire(ctx, "who"); err != nil {
		t.Error(err)
	}
	_ = l.Close()
}
