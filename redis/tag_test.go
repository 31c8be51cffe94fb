package redis

import "testing"

// TestSeenTags: an attempt that wrote the same server millisecond into our
// entry as an earlier attempt cannot tell a handoff that came after it
// from one that came after the other (which may have been held up on its
// way while the lock moved on): no wake-up is taken for a hold on its tag
// alone.
func TestSeenTags(t *testing.T) {
	var s seenTags
	for _, c := range []struct{ seen, want string }{
		{"1000", "1000"},
		{"1000", ""}, // the same millisecond as the attempt before
		{"1000", ""},
		{"1001", "1001"},
		{"", ""},     // an attempt that wrote nothing
		{"1001", ""}, // the same millisecond as the last that wrote one
		{"1002", "1002"},
	} {
		s.note(c.seen)
		if s.last != c.want {
			t.Errorf("after %q: last %q, want %q", c.seen, s.last, c.want)
		}
	}
}
