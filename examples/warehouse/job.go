package warehouse

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton"
)

// Event is one step of the job, reported as it happens.
type Event struct {
	At     time.Time `json:"at"`
	Runner string    `json:"runner"`
	// Kind is acquired, fenced, checked, billed, skipped, rejected, lost
	// (seen before a client), released (finished, but the release found
	// the lease lost), done or error.
	Kind   string      `json:"kind"`
	Client int         `json:"client,omitempty"`
	Token  baton.Token `json:"token,omitempty"`
	Newest baton.Token `json:"newest,omitempty"`
	Err    string      `json:"err,omitempty"`
}

// JobConfig says how to run the invoice job.
type JobConfig struct {
	Runner   string        // a name for the events, such as "runner 1"
	Clients  int           // clients to bill, numbered from 1
	Month    string        // such as "2026-10"
	Interval time.Duration // time spent on each client before its write
	// Fenced raises the fence first and writes through it. Without it the
	// job writes as the guide's team first did, and, like their billing
	// loop, does not look at the lease either.
	Fenced bool
}

// RunInvoiceJob takes the invoice lock and bills every client once, then
// releases the lock; a lease found lost at the release is returned (the
// job did not finish under its lease).
//
// Before each client it emits "checked": fenced, once it has found its
// lease live (unfenced it does not look, as the guide's team's loop did
// not). Then it spends Interval on the client and writes. A pause that
// strikes there, before the write (a SIGSTOP, a long GC, a suspended VM),
// is exactly the gap the guide describes: no look at the lease can close
// it, and only the fence can catch the write that follows it. The writes
// use ctx, not the lease's context, for that reason: a cancelled lease
// context would stop a write begun after the loss is noticed, but nothing
// can stop one already under way when the process froze.
func RunInvoiceJob(ctx context.Context, locker *baton.FencedLocker, ledger Ledger, cfg JobConfig, emit func(Event)) error {
	ev := func(e Event) {
		e.At, e.Runner = time.Now(), cfg.Runner
		emit(e)
	}
	lease, err := locker.Acquire(ctx, Job)
	if err != nil {
		return err
	}
	released := false
	defer func() {
		if !released { // the job failed: that is its error
			_ = lease.Release(context.WithoutCancel(ctx))
		}
	}()
	token := lease.Token()
	ev(Event{Kind: "acquired", Token: token})

	if cfg.Fenced {
		// The first step: from now on no older holder can write.
		if err := ledger.Raise(ctx, token); err != nil {
			ev(Event{Kind: "rejected", Token: token, Newest: newest(err), Err: err.Error()})
			return err
		}
		ev(Event{Kind: "fenced", Token: token})
	}
	for c := 1; c <= cfg.Clients; c++ {
		if cfg.Fenced && lease.Err() != nil {
			ev(Event{Kind: "lost", Client: c, Token: token, Err: lease.Err().Error()})
			return lease.Err()
		}
		ev(Event{Kind: "checked", Client: c, Token: token})
		time.Sleep(cfg.Interval) // the work on this client; a pause may strike here
		inv := Invoice{ClientID: c, Month: cfg.Month, Amount: fmt.Sprintf("%d.00", 100+c)}
		var inserted bool
		if cfg.Fenced {
			inserted, err = ledger.Save(ctx, token, inv)
		} else {
			inserted, err = ledger.SaveUnfenced(ctx, token, inv)
		}
		switch {
		case errors.Is(err, baton.ErrStaleToken):
			ev(Event{Kind: "rejected", Client: c, Token: token, Newest: newest(err), Err: err.Error()})
			return err
		case err != nil:
			ev(Event{Kind: "error", Client: c, Token: token, Err: err.Error()})
			return err
		case inserted:
			ev(Event{Kind: "billed", Client: c, Token: token})
		default:
			ev(Event{Kind: "skipped", Client: c, Token: token}) // billed before: ON CONFLICT DO NOTHING
		}
	}
	// Release returns nil for a lease already lost; Err tells.
	released = true
	if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
		ev(Event{Kind: "error", Token: token, Err: err.Error()})
		return err
	}
	if err := lease.Err(); errors.Is(err, baton.ErrLeaseLost) {
		ev(Event{Kind: "released", Token: token, Err: err.Error()})
		return err
	}
	ev(Event{Kind: "done", Token: token})
	return nil
}

func newest(err error) baton.Token {
	var st *baton.StaleTokenError
	if errors.As(err, &st) {
		return st.Newest
	}
	return 0
}
