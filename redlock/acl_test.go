package redlock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediskit/redistest"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redlock"
)

// TestACL_Refused_SaysWhatToGrant: nodes whose user may touch the
// prefix's keys but not those in their hash slot (the wait queue) refuse
// a waiting acquisition with NOPERM: an error in the configuration, a
// *baton.OptionError naming what to grant, not ErrUnavailable. A user
// with the grants rediskit.Grants lists, and INFO, waits and is handed the
// lock.
func TestACL_Refused_SaysWhatToGrant(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	ctx := timeout(t, 20*time.Second)
	u, err := url.Parse("redlock://app:pw@" + strings.Join(testsvc.RedisAddrs(nodes), ","))
	if err != nil {
		t.Fatal(err)
	}
	cs := clients(t, nodes)
	holder := newLocker(t, nodes, baton.WithHolder("a"))
	for _, tc := range []struct {
		rules   []string
		refused bool
	}{
		{[]string{"~" + redlock.DefaultPrefix + "*", "&*", "+@all"}, true},
		{strings.Fields(rediskit.Grants(redlock.DefaultPrefix) + " +info"), false},
	} {
		redistest.SetUser(t, cs, tc.rules...)
		l, err := redlock.Open(ctx, u, baton.WithHolder("b"))
		if err != nil {
			t.Fatal(err)
		}
		held, err := holder.Acquire(ctx, "acl")
		if err != nil {
			t.Fatal(err)
		}
		done := batontest.AcquireLater(timeout(t, 10*time.Second), l.Acquire, "acl")
		if !tc.refused {
			// Released once b waits in the queue of every node where a
			// holds the key.
			redistest.WaitQueued(t, cs, held.Key(), "a", 1)
			_ = held.Release(ctx)
		}
		err = (<-done).Err
		switch {
		case tc.refused && (!errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), rediskit.Grants(redlock.DefaultPrefix))):
			t.Errorf("user %v: %v; want an invalid option naming what to grant", tc.rules, err)
		case !tc.refused && err != nil:
			t.Errorf("user %v: %v", tc.rules, err)
		}
		_ = l.Close()
		_ = held.Release(context.Background())
	}

	// One node refuses the user, and another is down: that the request
	// failed on a majority is partly an outage, which may end; not an
	// error in the configuration alone.
	redistest.SetUser(t, cs[:1], "~"+redlock.DefaultPrefix+"*", "&*", "+@all")
	l, err := redlock.Open(ctx, u, baton.WithHolder("b"), baton.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nodes[1].Kill()
	if _, err := l.TryAcquire(ctx, "acl"); !errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("one node refusing the user, one down: %v; want ErrUnavailable, with the refusal among its causes", err)
	}
}

// TestOpen_UserWithoutPassword: go-redis sends AUTH only with a password,
// so a URL naming a user without one (app@, app:@) ran as the default
// user on every node, without a word. It is refused at Open, saying what
// to write; a nopass user given any password runs as itself.
func TestOpen_UserWithoutPassword(t *testing.T) {
	t.Parallel()
	nodes := testsvc.StartRedisNodes(t, 3)
	ctx := timeout(t, 20*time.Second)
	cs := clients(t, nodes)
	redistest.SetUser(t, cs, strings.Fields(rediskit.Grants(redlock.DefaultPrefix)+" +info")...)
	for _, c := range cs {
		if err := c.Do(ctx, "ACL", "SETUSER", "free", "reset", "on", "nopass", "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	addrs := strings.Join(testsvc.RedisAddrs(nodes), ",")
	for _, raw := range []string{"redlock://app@" + addrs, "redlock://app:@" + addrs, "redlock://free@" + addrs} {
		u, _ := url.Parse(raw)
		l, err := redlock.Open(ctx, u)
		if err == nil {
			_ = l.Close()
		}
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), ":PASSWORD@") {
			t.Errorf("Open(%s) = %v; want an invalid option saying to add :PASSWORD, not a Locker running as the default user", raw, err)
		}
	}
	u, _ := url.Parse("redlock://free:anything@" + addrs)
	l, err := redlock.Open(ctx, u)
	if err != nil {
		t.Fatalf("Open(%s): %v", u.Redacted(), err)
	}
	defer l.Close()
	if _, err := l.TryAcquire(ctx, "who"); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if list := c.ClientList(ctx).Val(); !strings.Contains(list, " user=free ") {
			t.Errorf("node %d: no connection runs as the nopass user free: %s", i, list)
		}
	}
}
