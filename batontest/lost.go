package batontest

import (
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// LostBeforeDeadline waits up to within for lease to end and returns how
// long before its local deadline, as it stood when called, it ended
// (negative: after it). A test that has just cut the holder off reads from
// it whether the loss came at a renewal or only at the deadline. It fails
// the test when the lease lives on past within.
func LostBeforeDeadline(t testing.TB, lease *baton.Lease, within time.Duration) time.Duration {
	t.Helper()
	deadline := lease.Deadline()
	select {
	case <-lease.Done():
	case <-time.After(within):
		t.Fatalf("lease not lost within %v", within)
	}
	early := time.Until(deadline)
	if early >= 0 {
		t.Logf("lost %v before the local deadline: %v", early.Round(time.Millisecond), lease.Err())
	} else {
		t.Logf("lost %v after the local deadline: %v", (-early).Round(time.Millisecond), lease.Err())
	}
	return early
}
