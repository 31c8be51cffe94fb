// Package rounds runs a fault test's round again when the test machine,
// not the code under test, spoiled it: a stall of a loaded CI machine that
// ended a short lease by its local deadline before the round could make
// its case. A bug spoils every round; a stall rarely two in a row.
package rounds

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/keeper"
)

// Run calls round until it returns nil, at most n times. A round returns
// an error when it checked nothing (its precondition failed, saying why),
// and fails tb itself on any other miss. Run logs each spoiled round and
// fails tb, with the last round's error, when all n were.
func Run(tb testing.TB, n int, round func() error) {
	tb.Helper()
	for i := 1; ; i++ {
		err := round()
		if err == nil {
			return
		}
		if i >= n {
			tb.Fatalf("%v, in every one of %d rounds", err, i)
			return
		}
		tb.Logf("round %d: %v; trying again", i, err)
	}
}

// Lease is what End watches: a *baton.Lease or a *baton.FencedLease.
type Lease interface {
	Context() context.Context
	Err() error
}

// End records when a lease ended.
type End struct {
	l  Lease
	at atomic.Pointer[time.Time]
}

// Watch starts recording when l ends.
func Watch(l Lease) *End {
	e := &End{l: l}
	context.AfterFunc(l.Context(), func() {
		now := time.Now()
		e.at.Store(&now)
	})
	return e
}

// ByDeadline reports whether the lease ended by its local deadline (no
// renewal confirmed in time), and did so before since.
func (e *End) ByDeadline(since time.Time) bool {
	at := e.at.Load()
	return at != nil && at.Before(since) && errors.Is(e.l.Err(), keeper.ErrDeadline)
}
