package baton

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leader election is a long-lived lock: the holder of the lock named for
// the election leads, for as long as its lease lasts. Campaign is Acquire
// under the name election code expects, resigning is releasing the lease,
// and Run (campaign, run the leader's work in a context cancelled on loss,
// release) is the leader's loop. What elections add is looking at the
// leader from outside: Leader, and Observe, which reports every change of
// leader, including to none.

// Term is one leader's tenure, as observers see it.
type Term struct {
	Election string    // the election's (lock's) name
	Leader   string    // the leader's holder identity; "" when no one leads
	Token    Token     // the leader's fencing token on fenced backends
	Key      string    // the backend's key for the leader's hold
	Since    time.Time // when it took office, by the holder's clock (the database's, on PostgreSQL; see LockInfo.Since); zero if unknown
}

// NoLeader reports whether the term says that no one leads.
func (t Term) NoLeader() bool { return t.Leader == "" && t.Key == "" }

// Observer is implemented by backends that can report changes of a lock's
// holder.
type Observer interface {
	// Observe sends the current term of the election at once, then every
	// change of leader in order, including to no leader. The channel is
	// unbuffered; a slow reader loses no change, within the backend's
	// stated limits: the observation follows on while the reader is away
	// (etcd keeps the changes in its history, and once it was compacted,
	// or the observer's member lost its leader, reads the keys again,
	// skipping the changes in between; Redis keeps
	// at least the last 64 changes, and from Redis 7 counts those trimmed
	// unread; ZooKeeper and PostgreSQL queue up to 1,024 terms, then drop
	// the oldest; each logs a warning when it loses changes so). It is
	// closed when ctx ends, when the Locker closes, or when the backend can
	// no longer observe: ctx.Err() tells the first apart from the others.
	Observe(ctx context.Context, name string) (<-chan Term, error)
}

// Campaign blocks until this process leads the election name, ctx ends, or
// the lock service fails (an error wrapping ErrUnavailable: a loop that
// leads whenever it can campaigns again after a pause, as right after a
// partition). It never reports leadership on a session it knew had died;
// a lease granted past its local deadline (a pause of this process) comes
// lost already, its context cancelled (see Acquire). Resign by releasing
// the lease; leadership lost is reported by the lease like any loss.
func (l *Locker) Campaign(ctx context.Context, name string) (*Lease, error) {
	return l.Acquire(ctx, name)
}

// Campaign blocks until this process leads the election name, ctx ends, or
// the lock service fails (see Locker.Campaign); the lease's token fences
// the leader's writes.
func (f *FencedLocker) Campaign(ctx context.Context, name string) (*FencedLease, error) {
	return f.Acquire(ctx, name)
}

// Leader returns the election's current term; Term.NoLeader is true when no
// one leads. On a backend that cannot look up holders (not an Inspector)
// it returns an error matching errors.ErrUnsupported; after Close, one
// matching ErrClosed. Close ends a look in flight, which then returns an
// error matching ErrClosed too.
func (l *Locker) Leader(ctx context.Context, name string) (Term, error) {
	if err := ValidateName(name); err != nil {
		return Term{}, err
	}
	insp, ok := l.b.(Inspector)
	if !ok {
		return Term{}, fmt.Errorf("leader of %q: this backend cannot look up holders: %w", name, errors.ErrUnsupported)
	}
	ictx, end, done, err := l.enter(ctx) // Close waits for the look before closing the backend
	if err != nil {
		return Term{}, fmt.Errorf("leader of %q: %w", name, err)
	}
	defer done()
	defer end()
	infos, err := insp.Inspect(ictx, name)
	if err != nil {
		if ctx.Err() == nil && l.closing.Err() != nil { // Close began meanwhile
			return Term{}, fmt.Errorf("leader of %q: %w", name, ErrClosed)
		}
		return Term{}, fmt.Errorf("leader of %q: %w", name, err)
	}
	for _, i := range infos {
		if i.Name == name && i.Key != "" {
			return Term{Election: name, Leader: i.Holder, Token: i.Token, Key: i.Key, Since: i.Since}, nil
		}
	}
	return Term{Election: name}, nil
}

// Observe reports the election's terms: the current one at once, then every
// change of leader, in order, including to none; see Observer. The
// observation also ends, and the channel is closed, when the Locker is
// closed. On a backend that cannot report changes of leader (not an
// Observer) it returns an error matching errors.ErrUnsupported; after
// Close, one matching ErrClosed.
func (l *Locker) Observe(ctx context.Context, name string) (<-chan Term, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	obs, ok := l.b.(Observer)
	if !ok {
		return nil, fmt.Errorf("observe %q: this backend cannot report changes of leader: %w", name, errors.ErrUnsupported)
	}
	octx, end, done, err := l.enter(ctx) // Close waits for the set-up, not the observation
	if err != nil {
		return nil, fmt.Errorf("observe %q: %w", name, err)
	}
	defer done()
	in, err := obs.Observe(octx, name)
	if err != nil {
		end()
		if l.closing.Err() != nil { // Close began meanwhile
			return nil, fmt.Errorf("observe %q: %w", name, ErrClosed)
		}
		return nil, err
	}
	// The relay is owned by the observation: it ends when the backend
	// closes in (it cannot go on), or at once when octx ends, without
	// waiting for the backend, whose sends give up on octx too (a Redis
	// read blocked on a server that went away ends only at its own
	// deadline). Close waits for it: added here, before inflight.Done,
	// Close's Wait comes after.
	out := make(chan Term)
	l.relays.Add(1)
	go func() {
		defer l.relays.Done()
		defer close(out)
		defer end()
		for {
			select {
			case t, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- t:
				case <-octx.Done():
					return
				}
			case <-octx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Leader returns the election's current term; see Locker.Leader.
func (f *FencedLocker) Leader(ctx context.Context, name string) (Term, error) {
	return f.l.Leader(ctx, name)
}

// Observe reports the election's terms; see Locker.Observe.
func (f *FencedLocker) Observe(ctx context.Context, name string) (<-chan Term, error) {
	return f.l.Observe(ctx, name)
}
