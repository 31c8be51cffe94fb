package rounds

import (
	"context"
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
			Run(r, 3, func() error {
				calls++
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
	ctx context.Context
	err error
}

func (f *fakeLease) Context() context.Context { return f.ctx }
func (f *fakeLease) Err() error               { return f.err }

func TestEnd_ByDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"by the deadline", fmt.Errorf("lease lost: %w", keeper.ErrDeadline), true},
		{"refused", errors.New("lease lost: renewal refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			l := &fakeLease{ctx: ctx}
			e := Watch(l)
			before := time.Now()
			if e.ByDeadline(time.Now()) {
				t.Fatal("a live lease: ByDeadline true")
			}
			l.err = tc.err
			cancel()
			deadline := time.Now().Add(10 * time.Second)
			for e.at.Load() == nil { // AfterFunc runs on its own goroutine
				if time.Now().After(deadline) {
					t.Fatal("the end was not recorded")
				}
				time.Sleep(time.Millisecond)
			}
			if got := e.ByDeadline(time.Now().Add(time.Second)); got != tc.want {
				t.Errorf("ByDeadline after the end = %v, want %v", got, tc.want)
			}
			if e.ByDeadline(before) {
				t.Error("ByDeadline(a time before the end) = true")
			}
		})
	}
}
