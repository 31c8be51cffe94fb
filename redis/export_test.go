package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
)

// SetObserverTiming shortens how long l's observers' registration lasts
// (ttl) and how often they renew it (refresh), before l observes.
func SetObserverTiming(l *baton.Locker, ttl, refresh time.Duration) {
	b := l.Backend().(*backend)
	b.obsTTL, b.obsRefresh = ttl, refresh
}

// OnWake has fn called each time one of l's waiters was handed a wake-up
// message (value is the waiter's).
func OnWake(l *baton.Locker, fn func(value string)) { l.Backend().(*backend).wake.OnSignal(fn) }

// AcquireScriptHash is the SHA1 an attempt names in EVALSHA, for tests
// that pick that request out on the wire.
var AcquireScriptHash = acquireScript.Hash()

// LoadAcquireScript loads the acquire script on c, so that a held EVALSHA
// runs when it lands instead of finding no script.
func LoadAcquireScript(ctx context.Context, c goredis.Scripter) error {
	return acquireScript.Load(ctx, c).Err()
}

// ForceScriptHash is the SHA1 a forced release names in EVALSHA.
var ForceScriptHash = forceScript.Hash()

// LoadForceScript loads the forced release's script on c, so that its
// first EVALSHA runs instead of finding no script.
func LoadForceScript(ctx context.Context, c goredis.Scripter) error {
	return forceScript.Load(ctx, c).Err()
}

// ReleaseScriptHash and RenewScriptHash are the SHA1s a release and a
// renewal name in EVALSHA.
var (
	ReleaseScriptHash = releaseScript.Hash()
	RenewScriptHash   = renewScript.Hash()
)

// StateScriptHash is the SHA1 an observer's read of the lock names.
var StateScriptHash = stateScript.Hash()

// Holds returns how many holds l's backend keeps (renews, or ends at Close).
func Holds(l *baton.Locker) int {
	return len(l.Backend().(*backend).holds.Holds())
}

// ObservedEntries returns how many change stream entries l's observations
// have read.
func ObservedEntries(l *baton.Locker) int64 { return l.Backend().(*backend).obsRead.Load() }

// RetryIn is how long one of l's queued waiters would sleep after an
// attempt that found it first in line (head) or not, with the key's
// remaining TTL pttl.
func RetryIn(l *baton.Locker, head bool, pttl time.Duration) time.Duration {
	return l.Backend().(*backend).retryIn(attempt{head: head, pttl: pttl})
}

// OnHandoffHeld has fn run when one of l's waiters, handed the lock in
// time, is about to make its hold, with the hold's local deadline: fn may
// hold it up past that deadline, as a stall of the machine would.
func OnHandoffHeld(l *baton.Locker, fn func(deadline time.Time)) {
	l.Backend().(*backend).beforeHandoffHeld = fn
}
