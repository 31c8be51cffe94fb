package asynclog

import (
	"bytes"
	"context"
	"io"
	"sync"
)

// Writer is an io.Writer that queues what it is given and writes it to
// the writer under it from a goroutine of its own, as Handler does for
// records: a writer under it that blocks (a stderr nobody reads) never
// holds up the caller. Each Write is taken as whole lines. Past Queue
// waiting writes, further ones are dropped and counted, and the line
// notice makes says how many. Once Close has begun, writes go straight
// through, after what was queued.
type Writer struct {
	w io.Writer
	q *queue[[]byte]

	mu     sync.Mutex // held by Close while the queue drains
	closed bool
}

// NewWriter returns a Writer onto w; notice(n) is the line that says n
// writes were dropped.
func NewWriter(w io.Writer, notice func(dropped int) string) *Writer {
	return &Writer{w: w, q: newQueue(
		func(p []byte) { _, _ = w.Write(p) }, // as a direct write's error: nobody left to tell
		func(n int) []byte { return []byte(notice(n)) })}
}

// Write queues a copy of p and returns at once; after Close, it writes p
// itself.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.w.Write(p)
	}
	w.q.push(bytes.Clone(p))
	return len(p), nil
}

// Flush waits until the queue is empty, or ctx ends (see Handler.Flush).
func (w *Writer) Flush(ctx context.Context) error { return w.q.flush(ctx) }

// Close writes what is queued, and the count of any writes dropped, then
// returns: it waits as long as the writer under it blocks, as a direct
// write would.
func (w *Writer) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		_ = w.q.flush(context.Background())
	}
}

// Unwrap returns the writer under w.
func (w *Writer) Unwrap() io.Writer { return w.w }
