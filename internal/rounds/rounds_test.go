package rounds

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/keeper"
)

// recorder is a testing.TB that records what Run says.
type recorder struct {
	testing.TB
	logs  []string
	fatal string
}

func (r *recorder) Helper() {}
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func TestRun(t *testing.T) {
	spoiled := errors.New("spoiled")
	for _, tc := range []struct {
		name      string
		spoils    int // rounds spoiled before one that checks
		calls     int
		logs      int
		wantFatal bool
	}{
		{"first round checks", 0, 1, 0, false},
		{"one spoiled", 1, 2, 1, false},
		{"two spoiled", 2, 3, 2, false},
		{"every round spoiled", 5, 3, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			calls := 0
			Run(r, 3, func(round int) error {
				calls++
				if round != calls {
					t.Errorf("round %d called as %d", calls, round)
				}
				if calls <= tc.spoils {
					return spoiled
				}
				return nil
			})
			if calls != tc.calls || len(r.logs) != tc.logs || (r.fatal != "") != tc.wantFatal {
				t.Fatalf("%d calls, logs %q, fatal %q; want %d calls, %d logs, fatal %v", calls, r.logs, r.fatal, tc.calls, tc.logs, tc.wantFatal)
			}
			if tc.wantFatal && r.fatal != "spoiled, in every one of 3 rounds" {
				t.Errorf("fatal %q", r.fatal)
			}
			for i, l := range r.logs {
				if !strings.HasPrefix(l, fmt.Sprintf("round %d: spoiled;", i+1)) {
					t.Errorf("log %d: %q", i, l)
				}
			}
		})
	}
}

type fakeLease struct {
	deadline time.Time
	done     chan struct{}
	err      error
}

func (f *fakeLease) Deadline() time.Time   { return f.deadline }
func (f *fakeLease) Done() <-chan struct{} { return f.done }
func (f *fakeLease) Err() error            { return f.err }

func TestTakenAfterEnd(t *testing.T) {
	deadline := time.Now()
	byDeadline := fmt.Errorf("lease lost: %w", keeper.ErrDeadline)
	ended := make(chan struct{})
	close(ended)
	for _, tc := range []struct {
		name  string
		tried time.Time
		l     *fakeLease
		want  bool
	}{
		{"tried at the deadline, lost by it", deadline, &fakeLease{deadline, ended, byDeadline}, true},
		{"tried after the deadline, lost by it", deadline.Add(time.Second), &fakeLease{deadline, ended, byDeadline}, true},
		{"tried before the deadline", deadline.Add(-time.Millisecond), &fakeLease{deadline, ended, byDeadline}, false},
		{"lost otherwise", deadline, &fakeLease{deadline, ended, errors.New("lease lost: renewal refused")}, false},
		{"not lost", deadline, &fakeLease{deadline, make(chan struct{}), nil}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TakenAfterEnd(tc.l, tc.tried, 10*time.Millisecond); got != tc.want {
				t.Errorf("TakenAfterEnd = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPastDeadline(t *testing.T) {
	deadline := time.Now()
	byDeadline := fmt.Errorf("lease lost: %w", keeper.ErrDeadline)
	ended := make(chan struct{})
	close(ended)
	if past, err := PastDeadline(&fakeLease{deadline, make(chan struct{}), nil}, deadline.Add(-time.Millisecond), time.Millisecond); past || err != nil {
		t.Errorf("before the deadline: %v, %v; want false, nil", past, err)
	}
	if past, err := PastDeadline(&fakeLease{deadline, ended, byDeadline}, deadline, time.Minute); !past || !errors.Is(err, keeper.ErrDeadline) {
		t.Errorf("at the deadline, lost by it: %v, %v; want true and the loss", past, err)
	}
	if past, err := PastDeadline(&fakeLease{deadline, make(chan struct{}), nil}, deadline, 10*time.Millisecond); !past || err != nil {
		t.Errorf("past the deadline, no loss reported: %v, %v; want true, nil", past, err)
	}
}

func TestEnded(t *testing.T) {
	future := time.Now().Add(time.Hour)
	byDeadline := fmt.Errorf("lease lost: %w", keeper.ErrDeadline)
	ended := make(chan struct{})
	close(ended)
	if err := Ended(&fakeLease{future, make(chan struct{}), nil}, time.Millisecond); err != nil {
		t.Errorf("a lease that holds: %v, want nil", err)
	}
	refused := errors.New("lease lost: renewal refused")
	if err := Ended(&fakeLease{future, ended, refused}, time.Millisecond); err != refused {
		t.Errorf("a lease lost: %v, want its loss", err)
	}
	if err := Ended(&fakeLease{time.Now(), ended, byDeadline}, time.Minute); !errors.Is(err, keeper.ErrDeadline) {
		t.Errorf("a lease past its deadline, lost by it: %v, want the loss", err)
	}
	if err := Ended(&fakeLease{time.Now(), make(chan struct{}), nil}, 10*time.Millisecond); err == nil || errors.Is(err, keeper.ErrDeadline) {
		t.Errorf("a lease past its deadline, no loss reported: %v, want an error that is not a loss by the deadline", err)
	}
}

func TestByDeadline(t *testing.T) {
	r := &recorder{}
	if err := ByDeadline(r, fmt.Errorf("lease lost: %w", keeper.ErrDeadline), "before the freeze"); !errors.Is(err, keeper.ErrDeadline) || r.fatal != "" {
		t.Errorf("a loss by the deadline: %v, fatal %q; want a spoiled round", err, r.fatal)
	}
	if err := ByDeadline(r, errors.New("renewal refused"), "before the freeze"); err != nil || r.fatal != "the lease ended before the freeze: renewal refused" {
		t.Errorf("another loss: %v, fatal %q; want tb failed", err, r.fatal)
	}
}
