package postgres

import (
	"context"
	"time"

	"github.com/baton-go/baton"
)

// SetClock replaces the client clock of l's backend: the only clock the
// client reads for a value it sends (holder_clock). Call it before l is
// used.
func SetClock(l *baton.Locker, now func() time.Time) { l.Backend().(*backend).now = now }

// Attempts returns how many acquisition statements l's backend has sent.
func Attempts(l *baton.Locker) int64 { return l.Backend().(*backend).attempts.Load() }

// FailedAttempts returns how many of l's acquisition statements failed
// (no answer within the request timeout, an error).
func FailedAttempts(l *baton.Locker) int64 { return l.Backend().(*backend).failures.Load() }

// Channel returns l's NOTIFY channel.
func Channel(l *baton.Locker) string { return l.Backend().(*backend).channel }

// Deaf makes l's listener drop every NOTIFY (true) or deliver them again.
func Deaf(l *baton.Locker, deaf bool) { l.Backend().(*backend).deaf.Store(deaf) }

// ForceReleaseToken is ForceRelease with the token it read given: a force
// whose read came before the lock changed hands.
func ForceReleaseToken(ctx context.Context, l *baton.Locker, name string, token baton.Token) (baton.LockInfo, error) {
	return l.Backend().(*backend).forceRelease(ctx, name, baton.LockInfo{Token: token})
}

// Claim sends the attempt statement of an acquisition of name by l's
// holder that will not wait, with ticket as its place in the queue: a late
// copy of a waiter's claim. It returns the token when that took the lock.
func Claim(ctx context.Context, l *baton.Locker, name string, ticket int64) (*int64, error) {
	b := l.Backend().(*backend)
	r, err := b.attempt(ctx, baton.Request{Name: name, Holder: b.cfg.Holder}, 0, ticket, "")
	return r.token, err
}

// StatementTimeout is statementTimeout: Dial's statement_timeout.
var StatementTimeout = statementTimeout

// SetObserverQueue lowers how many terms l's observers keep for a reader
// that has not taken them, before l observes.
func SetObserverQueue(l *baton.Locker, n int) { l.Backend().(*backend).obsQueue = n }

// Decided returns how many terms l's observers have decided so far.
func Decided(l *baton.Locker) int64 { return l.Backend().(*backend).obsDecided.Load() }

// Holds returns how many holds l's backend keeps (renews, or ends at Close).
func Holds(l *baton.Locker) int {
	return len(l.Backend().(*backend).holds.Holds())
}

// Prepare readies l's lock tables as its first Acquire or Observe does:
// creates what is missing, replaces an older baton's waiters table, sweeps.
func Prepare(ctx context.Context, l *baton.Locker) error {
	return l.Backend().(*backend).prepare(ctx)
}

// SetListenCheck sets how long l's wake-up listener's connection may be
// quiet before the server is asked whether it is there; call it before
// l's first wait.
func SetListenCheck(l *baton.Locker, d time.Duration) { l.Backend().(*backend).listenCheck = d }
