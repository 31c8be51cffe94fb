package redlock

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
)

// The SHA1s that requests name in EVALSHA, for tests that pick a request
// out on the wire: an undo or a release, and an attempt.
var (
	UnlockScriptHash  = unlockScript.Hash()
	AcquireScriptHash = acquireScript.Hash()
)

// LoadScripts loads the acquire and unlock scripts on c, so that a held
// EVALSHA runs when it lands instead of finding no script.
func LoadScripts(ctx context.Context, c goredis.Scripter) error {
	if err := acquireScript.Load(ctx, c).Err(); err != nil {
		return err
	}
	return unlockScript.Load(ctx, c).Err()
}

// ForceScriptHash is the SHA1 a forced release names in EVALSHA.
var ForceScriptHash = forceScript.Hash()

// LoadForceScript loads the forced release's script on c, so that its
// first EVALSHA runs instead of finding no script.
func LoadForceScript(ctx context.Context, c goredis.Scripter) error {
	return forceScript.Load(ctx, c).Err()
}

// RenewScriptHash is the SHA1 a renewal names in EVALSHA.
var RenewScriptHash = renewScript.Hash()

// RenewalRefused reports whether a renewal of one of l's holds was refused
// by enough nodes to deny it a majority, as the hold has recorded it.
func RenewalRefused(l *baton.Locker) bool {
	for _, h := range l.Backend().(*backend).holds.Holds() {
		if h.refused.Load() != nil {
			return true
		}
	}
	return false
}

// SetNodeTimeout sets how long l waits for one node's answer, before l is
// used. The default, TTL/10, is 200ms at the 2s TTL the tests use to be
// quick, and a loaded test machine stalls longer than that now and then:
// tests whose subject is not the node timeout set a longer one, so that a
// stall does not turn into a node that "did not answer".
func SetNodeTimeout(l *baton.Locker, d time.Duration) {
	l.Backend().(*backend).nodeTimeout = d
}

// SetHandoffGrace sets how long l's waiters, handed the key by some nodes,
// wait for the others' handoffs before they look with a round, before l
// is used. The default, about two rounds' time, is a few milliseconds
// here, and a loaded test machine can deliver a node's message later
// than that: tests that count the rounds set a longer one.
func SetHandoffGrace(l *baton.Locker, d time.Duration) {
	l.Backend().(*backend).graceForTest = d
}

// OnWake has fn called with the value of each message that one of l's
// nodes delivers to a waiter of l, once delivered.
func OnWake(l *baton.Locker, fn func(value string)) {
	for _, n := range l.Backend().(*backend).nodes {
		n.wake.OnSignal(fn)
	}
}

// Holds returns how many holds l's backend keeps (renews, or ends at Close).
func Holds(l *baton.Locker) int {
	return len(l.Backend().(*backend).holds.Holds())
}

// OnHandoffHeld has fn run when one of l's waiters, handed the lock by a
// majority in time, is about to make its hold, with the hold's local
// deadline: fn may hold it up past that deadline, as a stall of the
// machine would.
func OnHandoffHeld(l *baton.Locker, fn func(deadline time.Time)) {
	l.Backend().(*backend).beforeHandoffHeld = fn
}
