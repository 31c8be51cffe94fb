package batontest

import (
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// NextLeader reads the next term an observer reports and returns its
// leader, "-" for no leader. It fails the test when no term comes within d,
// or when the channel closes.
func NextLeader(t testing.TB, terms <-chan baton.Term, d time.Duration) string {
	t.Helper()
	select {
	case tm, ok := <-terms:
		if !ok {
			t.Fatal("the observer's channel closed")
		}
		if tm.NoLeader() {
			return "-"
		}
		return tm.Leader
	case <-time.After(d):
		t.Fatalf("no term within %v", d)
		return ""
	}
}
