// Package holdset keeps the holds of a backend that its Close ends: the
// live ones, each added as it is granted and dropped at its loss or
// release.
package holdset

import (
	"maps"
	"slices"
	"sync"
)

// Set is a backend's live holds. The zero value is an empty, open Set.
type Set[H comparable] struct {
	mu     sync.Mutex
	closed bool
	holds  map[H]struct{}
}

// Track adds h, and reports false, adding nothing, once Close has begun.
// A hold for which lost reports true is not added: it was lost already,
// and its keeper's loss callback, which Drops it, may have run before.
// lost is called under the Set's lock, so a loss is either seen here or
// Dropped after.
func (s *Set[H]) Track(h H, lost func() bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if !lost() {
		if s.holds == nil {
			s.holds = make(map[H]struct{})
		}
		s.holds[h] = struct{}{}
	}
	return true
}

// Drop removes h, if it is there.
func (s *Set[H]) Drop(h H) {
	s.mu.Lock()
	delete(s.holds, h)
	s.mu.Unlock()
}

// Close stops Track from adding holds and returns those the Set has, for
// the caller to end; first is false when Close was called before (it
// then returns none).
func (s *Set[H]) Close() (holds []H, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	s.closed = true
	return slices.Collect(maps.Keys(s.holds)), true
}

// Holds returns the holds the Set has now.
func (s *Set[H]) Holds() []H {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.holds))
}
