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
