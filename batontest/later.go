package batontest

import (
	"context"
	"time"
)

// Held is what AcquireLater and HeadLeaves need of a lease: a
// *baton.Lease or a *baton.FencedLease.
type Held interface {
	Release(context.Context) error
	Deadline() time.Time
}

// Acquired is how an acquisition started by AcquireLater ended.
type Acquired struct {
	At         time.Time // when Acquire returned
	Err        error     // Acquire's error
	ReleaseErr error     // the release's, when it acquired
	// Deadline is the lease's local deadline, read as soon as Acquire
	// returned, when it acquired.
	Deadline time.Time
}

// AcquireLater acquires name with acquire (a Locker's or a FencedLocker's
// Acquire) in a goroutine of its own, releases the lease as soon as it
// holds it, and sends how it went on the channel it returns, once: for a
// test that waits in line behind a holder and then looks at when it got
// the lock.
func AcquireLater[L Held](ctx context.Context, acquire func(context.Context, string) (L, error), name string) <-chan Acquired {
	ch := make(chan Acquired, 1)
	go func() {
		l, err := acquire(ctx, name)
		a := Acquired{At: time.Now(), Err: err}
		if err == nil {
			a.Deadline = l.Deadline()
			a.ReleaseErr = l.Release(context.Background())
		}
		ch <- a
	}()
	return ch
}
