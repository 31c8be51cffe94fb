package holdset

import (
	"slices"
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
