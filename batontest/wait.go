package batontest

import (
	"testing"
	"time"
)

// WaitFor polls cond every 5ms until it holds, and fails tb, saying what
// it waited for, when d passes first. It is for conditions that offer
// nothing to wait on (a row in a database, a count a backend keeps).
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			tb.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
