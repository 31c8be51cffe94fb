// Package batontest is the conformance suite every baton backend runs
// against its real lock service: mutual exclusion (the guide's three clients
// racing 500 times), token order, renewal, loss, a deadline counted from a
// request's send behind a slow network, release semantics, and bad
// options. A backend's own tests call Run with a Factory.
package batontest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// Client is one connection to the lock service, as one process would have.
type Client struct {
	Locker *baton.Locker
	// Crash, when set, makes the client stop talking to the service at
	// once without releasing anything, like kill -9 or a cut cable: its
	// leases end on the server only when their TTL runs out.
	Crash func()
}

// Factory describes a backend to the suite.
type Factory struct {
	// New returns a fresh client built with opts on top of the suite's
	// (TTL), or the construction error. The suite closes its Locker.
	New func(t testing.TB, opts ...baton.Option) (Client, error)
	// TTL is the lease TTL of the cases about a lease's end (expiry, loss,
	// renewal, crash, takeover): the shortest the backend takes, to keep
	// the suite fast. The other cases use 10s, which every backend must
	// take.
	TTL time.Duration
	// Fenced says the backend hands out fencing tokens; the Locker must
	// then be convertible with Locker.Fenced.
	Fenced bool
	// Expire, when set, ends the lease on the server as if its TTL had run
	// out (revoke the etcd lease, delete the Redis key, expire the
	// ZooKeeper session, move the PostgreSQL row's expiry to the past).
	Expire func(t testing.TB, l *baton.Lease)
	// ExpireSeenByRenewal says the holder learns of Expire's end from the
	// service, at its next renewal at the latest (a refusal, or a watch),
	// not only when its local deadline passes: the loss case then checks
	// that it comes within RenewEvery and a second, and not by the
	// deadline. (A ZooKeeper holder cut off until its session expires may
	// well reach its deadline first.)
	ExpireSeenByRenewal bool
	// Holds, when set, returns how many holds l's backend keeps: renews,
	// or would end at Close. The lost-lease case checks with it that a
	// lease lost and dropped without Release, which the Lease's
	// documentation allows, costs its Locker nothing after its loss. The
	// case skips without it (or without Expire).
	Holds func(l *baton.Locker) int
	// Rounds is the number of rounds of the race; default 500.
	Rounds int
	// Observe says the backend implements baton.Observer, so elections can
	// be watched; the election case fails instead of skipping when it
	// cannot.
	Observe bool
	// HearsExpiryAtOnce says a holder hears of its lease's end on the
	// server at once (etcd's watch, ZooKeeper's session), before anyone
	// else can take the lock: Release_StaleUnnoticed_FreesNothing, which
	// needs a holder that has not heard yet, skips for it, and fails for
	// the others when it never reaches the release's compare.
	HearsExpiryAtOnce bool
	// Slow, when set, returns a fresh client built with opts whose every
	// connection to the service is delayed by latency or more each way
	// (testsvc.Proxy with SetLatency does it for baton's own backends),
	// for the case that checks a deadline counts from a request's send,
	// not its answer. The case skips without it.
	Slow func(t testing.TB, latency time.Duration, opts ...baton.Option) (Client, error)
}

// Run runs the whole suite. The backend must implement baton.Inspector,
// with LockInfo.Waiters counting the acquisitions in line: the cases that
// need a waiter queued before they go on (Acquire_WaitsForRelease, the
// election) wait for it to show there.
func Run(t *testing.T, f Factory) {
	if f.Rounds == 0 {
		f.Rounds = 500
	}
	s := &suite{f: f}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"TryAcquire_Contended", s.tryAcquireContended},
		{"Acquire_WaitsForRelease", s.acquireWaits},
		{"Acquire_CancelledByCaller", s.acquireCancelled},
		{"Acquire_SameLocker_Excludes", s.sameLocker},
		{"Acquire_MutualExclusion", s.mutualExclusion},
		{"TryAcquire_Race", s.race},
		{"Release_Idempotent", s.releaseIdempotent},
		{"Release_AfterCallerCancelled", s.releaseAfterCancel},
		{"Release_NeverFreesAnother", s.releaseOnlyOwn},
		{"Release_StaleUnnoticed_FreesNothing", s.releaseStaleUnnoticed},
		{"Release_AfterForcedRelease_IsALoss", s.releaseAfterForce},
		{"Lease_RenewedFor5TTL", s.renewal},
		{"Lease_Lost", s.loss},
		{"Lease_LostDropped_LetGo", s.lostDropped},
		{"Lease_CrashedHolder_TakenOver", s.crash},
		{"Lease_DeadlineFromSend_UnderLatency", s.deadlineFromSend},
		{"Token_Increases", s.tokenOrder},
		{"FencedLease_Raise_FenceAhead", s.fenceAhead},
		{"Locker_Close", s.close},
		{"Options_Invalid", s.badOptions},
		{"Election_CrashedLeaders_Observed", s.election},
		{"Observe_EndsWithLocker", s.observeEnds},
	} {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct{ f Factory }

func (s *suite) locker(t testing.TB, opts ...baton.Option) *baton.Locker {
	t.Helper()
	return s.client(t, opts...).Locker
}

// steadyTTL is the TTL of steady's Lockers: the longest the test
// ZooKeeper's sessions take.
const steadyTTL = 10 * time.Second

// steady returns a Locker built with opts whose leases, at a TTL of
// steadyTTL, outlive any stall of a loaded test machine, for the cases
// that are not about a lease's end (at the suite's TTL, 1s or 2s, a stall
// past two thirds of it ended a lease by accident, and the race's 500
// rounds met one now and then).
func (s *suite) steady(t testing.TB, opts ...baton.Option) *baton.Locker {
	t.Helper()
	return s.locker(t, append([]baton.Option{baton.WithTTL(steadyTTL)}, opts...)...)
}

func (s *suite) client(t testing.TB, opts ...baton.Option) Client {
	t.Helper()
	c, err := s.f.New(t, append([]baton.Option{baton.WithTTL(s.f.TTL)}, opts...)...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { _ = c.Locker.Close() })
	return c
}

// lockName makes a lock name unique to the test, valid whatever the
// test's name holds: a byte a lock name may not have becomes "_", so that
// a case expecting ErrInvalidOption is not satisfied by its own name.
func lockName(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r == '/':
			return '.'
		case r == '#':
			return '-'
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', strings.ContainsRune("._-:@+=", r):
			return r
		}
		return '_'
	}, t.Name())
	return name + fmt.Sprintf("-%d", time.Now().UnixNano()%1e6)
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, l *baton.Locker, name string) *baton.Lease {
	t.Helper()
	lease, err := l.Acquire(ctxFor(t, 30*time.Second), name)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	return lease
}
