package parallel

import (
	"errors"
	"sync/atomic"
	"testing"
)

// TestJoin: every item gets its call, all at once (each waits for the
// others to have started), and the failures come back joined.
func TestJoin(t *testing.T) {
	var started atomic.Int64
	all := make(chan struct{})
	errOdd := errors.New("odd")
	err := Join([]int{1, 2, 3, 4}, func(i int) error {
		if started.Add(1) == 4 {
			close(all)
		}
		<-all // would never come if the calls ran one by one
		if i%2 == 1 {
			return errOdd
		}
		return nil
	})
	if !errors.Is(err, errOdd) || len(err.(interface{ Unwrap() []error }).Unwrap()) != 2 {
		t.Fatalf("Join = %v; want the two odd items' errors", err)
	}
	if err := Join([]int(nil), func(int) error { return errOdd }); err != nil {
		t.Fatalf("Join of nothing = %v; want nil", err)
	}
}
