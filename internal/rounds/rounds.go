// Package rounds runs a fault test's round again when the test machine,
// not the code under test, spoiled it: a stall of a loaded CI machine that
// ended a short lease by its local deadline before the round could make
// its case. A bug that always strikes spoils every round, and a stall
// rarely two in a row. One that strikes only sometimes may pass a round
// run again: a round spoils only on the outcome a stall gives (a loss by
// the local deadline, a timing bound missed by less than the bug would
// miss it), and fails at once on any other.
package rounds

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/keeper"
)

// Run calls round until it returns nil, at most n times, with its number
// (1 for the first: a round names its own lock with it). A round returns
// an error when it checked nothing (its precondition failed, saying why),
// and fails tb itself on any other miss. Run logs each spoiled round and
// fails tb, with the last round's error, when all n were.
func Run(tb testing.TB, n int, round func(round int) error) {
	tb.Helper()
	for i := 1; ; i++ {
		err := round(i)
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

// Lease is what TakenAfterEnd looks at: a *baton.Lease or a
// *baton.FencedLease.
type Lease interface {
	Deadline() time.Time
	Done() <-chan struct{}
	Err() error
}

// TakenAfterEnd reports, for another client that got the lock l held
// with an attempt sent at tried, whether that came after l ended by its
// local deadline: tried is not before l's deadline (which moves on only
// while l holds, and stands once it is lost), and l reports a loss by
// that deadline, within wait (its report comes a moment after the
// deadline). If not, the two may have overlapped: a failure, never a
// spoiled round.
func TakenAfterEnd(l Lease, tried time.Time, wait time.Duration) bool {
	if tried.Before(l.Deadline()) {
		return false
	}
	select {
	case <-l.Done():
	case <-time.After(wait):
		return false
	}
	return errors.Is(l.Err(), keeper.ErrDeadline)
}

// PastDeadline reports whether l's local deadline had passed by at (l
// ended before at, or was about to report it), and if so waits, up to
// wait, for l's report of the loss, and returns it (nil if none came).
// A round that needs l alive at at spoils when the loss is by the
// deadline, and fails otherwise.
func PastDeadline(l Lease, at time.Time, wait time.Duration) (bool, error) {
	if at.Before(l.Deadline()) {
		return false, nil
	}
	select {
	case <-l.Done():
	case <-time.After(wait):
	}
	return true, l.Err()
}

// Ended returns l's loss, nil while l holds: its Err, or, once its local
// deadline has passed, the loss it reports within wait (which comes a
// moment after the deadline), or an error saying that none came.
func Ended(l Lease, wait time.Duration) error {
	if err := l.Err(); err != nil {
		return err
	}
	past, err := PastDeadline(l, time.Now(), wait)
	if past && err == nil {
		return fmt.Errorf("its local deadline passed, and it reported no loss within %v", wait)
	}
	return err
}

// ByDeadline returns err, a lease's loss (when says when it came), as the
// error of a spoiled round when it is a loss by the local deadline, the
// one a stall gives; on any other it fails tb.
func ByDeadline(tb testing.TB, err error, when string) error {
	tb.Helper()
	if errors.Is(err, keeper.ErrDeadline) {
		return fmt.Errorf("the lease ended by its local deadline %s: %w", when, err)
	}
	tb.Fatalf("the lease ended %s: %v", when, err)
	return nil
}
