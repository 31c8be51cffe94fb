package holdset

import (
	"slices"
	"sync"
	"testing"
)

// TestSet: tracked holds come back from Close, dropped and lost ones do
// not; after Close nothing is tracked, and a second Close returns nothing.
func TestSet(t *testing.T) {
	var s Set[int]
	live := func() bool { return false }
	if !s.Track(1, live) || !s.Track(2, live) || !s.Track(3, live) {
		t.Fatal("Track refused before Close")
	}
	if !s.Track(4, func() bool { return true }) {
		t.Fatal("Track of a lost hold refused before Close; want true, not added")
	}
	s.Drop(2)
	s.Drop(9) // never tracked
	now := s.Holds()
	slices.Sort(now)
	if !slices.Equal(now, []int{1, 3}) {
		t.Fatalf("Holds = %v; want [1 3]", now)
	}
	holds, first := s.Close()
	slices.Sort(holds)
	if !first || !slices.Equal(holds, []int{1, 3}) {
		t.Fatalf("Close = %v, %v; want [1 3], true", holds, first)
	}
	if s.Track(5, live) {
		t.Fatal("Track after Close = true")
	}
	if holds, first := s.Close(); first || len(holds) != 0 {
		t.Fatalf("second Close = %v, %v; want none, false", holds, first)
	}
}

// TestSet_Concurrent: holds tracked and dropped from many goroutines while
// Close runs: every hold Track accepted and nobody dropped is among
// Close's, none after Close is, and every later Track is refused.
func TestSet_Concurrent(t *testing.T) {
	var s Set[int]
	const n = 64
	accepted := make([]bool, n)
	var wg, early sync.WaitGroup
	for i := range n {
		if i < n/2 {
			early.Add(1) // these track before Close begins
		}
		wg.Go(func() {
			accepted[i] = s.Track(i, func() bool { return false })
			if i < n/2 {
				early.Done()
			}
			if accepted[i] && i%2 == 1 {
				s.Drop(i)
			}
		})
	}
	early.Wait()
	holds, first := s.Close()
	wg.Wait()
	if !slices.Equal(accepted[:n/2], slices.Repeat([]bool{true}, n/2)) {
		t.Fatalf("Track refused a hold before Close: %v", accepted[:n/2])
	}
	if !first {
		t.Fatal("first Close reported not first")
	}
	closed := map[int]bool{}
	for _, h := range holds {
		closed[h] = true
	}
	for i := range n {
		switch {
		case closed[i] && !accepted[i]:
			t.Errorf("hold %d is among Close's, but Track refused it", i)
		case i%2 == 0 && accepted[i] && !closed[i]:
			t.Errorf("hold %d was tracked and not dropped, but Close missed it", i)
		}
	}
	if s.Track(n, func() bool { return false }) {
		t.Error("Track after Close = true")
	}
}
