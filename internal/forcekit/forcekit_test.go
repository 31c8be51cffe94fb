package forcekit

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelete(t *testing.T) {
	lost := errors.New("answer lost")
	for _, c := range []struct {
		name  string
		tries []error // del's errors, in turn; nil: answered
		found []bool  // del's deleted, in turn
		gone  bool
		err   bool
		calls int
	}{
		{"deleted", []error{nil}, []bool{true}, true, false, 1},
		{"changed hands", []error{nil}, []bool{false}, false, false, 1},
		{"answer lost, then found gone", []error{lost, nil}, []bool{false, false}, true, false, 2},
		{"answer lost, then deleted", []error{lost, nil}, []bool{false, true}, true, false, 2},
		{"never answered", []error{lost, lost, lost, lost, lost, lost, lost, lost}, make([]bool, 8), false, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := 0
			gone, err := Delete(context.Background(), 2*retryPause, func(context.Context) (bool, error) {
				i := min(n, len(c.tries)-1)
				n++
				return c.found[i], c.tries[i]
			})
			if gone != c.gone || (err != nil) != c.err {
				t.Errorf("Delete = %v, %v; want %v, error %v", gone, err, c.gone, c.err)
			}
			if c.calls > 0 && n != c.calls {
				t.Errorf("del called %d times, want %d", n, c.calls)
			}
			if c.err && n < 2 {
				t.Errorf("del called %d times before giving up; want it tried again", n)
			}
		})
	}
}

func TestDelete_StopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := Delete(ctx, time.Minute, func(context.Context) (bool, error) {
		n++
		cancel()
		return false, errors.New("answer lost")
	})
	if err == nil || n != 1 {
		t.Errorf("Delete with ctx ended after the first try = %v after %d tries; want its error after 1", err, n)
	}
}

// A refusal marked Final ends the tries at once, and is not taken for
// done after an unsure try: before Final, a refusal was tried again for
// twice the try's bound, and a try after it that found the holder gone
// (released meanwhile by itself) reported the lock freed by force.
func TestDelete_FinalEndsTries(t *testing.T) {
	refused := errors.New("not allowed")
	lost := errors.New("answer lost")
	for _, c := range []struct {
		name  string
		tries []error
		calls int
	}{
		{"refused", []error{Final(refused)}, 1},
		{"answer lost, then refused", []error{lost, Final(refused)}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := 0
			gone, err := Delete(context.Background(), time.Minute, func(context.Context) (bool, error) {
				i := min(n, len(c.tries)-1)
				n++
				return false, c.tries[i]
			})
			if gone || err != refused || n != c.calls {
				t.Errorf("Delete = %v, %v after %d tries; want false and the refusal itself after %d", gone, err, n, c.calls)
			}
		})
	}
	if Final(nil) != nil {
		t.Error("Final(nil) is not nil")
	}
}
