// Package asynclog hands log records to a slog.Handler from a goroutine of
// its own, so that a handler that blocks (one writing to a pipe nobody
// reads, a terminal paused with Ctrl-S, a log collector that stalls)
// never holds up the code that logs: in baton, the paths that declare a
// lease lost, cancel the work's context, give a lock back or wake a
// waiter.
//
// Records wait in a queue of up to Queue; past that they are dropped and
// counted, and the count is handed on, as a record of its own, before the
// next record that fits. The goroutine runs only while records wait: it
// starts with the first, and ends when the queue is empty, so a Handler
// leaves nothing running once it has caught up. Flush waits for that.
package asynclog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Queue is how many records wait for a handler that does not keep up
// before further ones are dropped.
const Queue = 1024

// Handler is a slog.Handler that queues each record for the handler it
// wraps. Handlers made from one by WithAttrs and WithGroup share its
// queue, so records keep the order they were logged in.
type Handler struct {
	inner slog.Handler
	q     *queue
}

// New returns a Handler that hands records to h from a goroutine of its
// own. A Handler given to New is returned as it is.
func New(h slog.Handler) slog.Handler {
	if a, ok := h.(*Handler); ok {
		return a
	}
	return &Handler{inner: h, q: &queue{root: h}}
}

// Enabled reports whether the wrapped handler takes records at level l.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

// Handle queues a copy of r and returns at once. The wrapped handler gets
// ctx without its cancellation: its values (a trace's ids) stay.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	h.q.push(item{h: h.inner, ctx: context.WithoutCancel(ctx), r: r.Clone()})
	return nil
}

// WithAttrs returns a Handler on the wrapped handler's WithAttrs, sharing
// h's queue.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(attrs), q: h.q}
}

// WithGroup returns a Handler on the wrapped handler's WithGroup, sharing
// h's queue.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), q: h.q}
}

// Flush waits until the queue is empty, every record queued before it (and
// any since) handed on, or until ctx ends, and returns context.Cause(ctx)
// then.
func (h *Handler) Flush(ctx context.Context) error {
	return h.q.flush(ctx)
}

// Flush flushes l's handler when it is a Handler (see Handler.Flush), and
// returns nil at once otherwise.
func Flush(ctx context.Context, l *slog.Logger) error {
	if l == nil {
		return nil
	}
	if h, ok := l.Handler().(*Handler); ok {
		return h.Flush(ctx)
	}
	return nil
}

// FailedFlushWait bounds FlushFailed's wait.
const FailedFlushWait = time.Second

// FlushFailed flushes l (see Flush), waiting FailedFlushWait at most, when
// *err is not nil: deferred by a constructor that fails, whose records
// (a server's refusals, a connection's failures) no Locker.Close will
// flush, so that they come before whatever its caller says about the
// failure, even when it exits next.
func FlushFailed(err *error, l *slog.Logger) {
	if *err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), FailedFlushWait)
	defer cancel()
	_ = Flush(ctx, l)
}

// item is a record queued for the handler h.
type item struct {
	h   slog.Handler
	ctx context.Context
	r   slog.Record
}

// queue holds the records waiting, and runs drain while there are any.
type queue struct {
	root    slog.Handler // the handler given to New, which the count goes to
	mu      sync.Mutex
	items   []item
	drained chan struct{} // not nil while drain runs; closed when it ends
	dropped int           // records dropped since the last that fitted
}

func (q *queue) push(it item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped > 0 && len(q.items) < Queue-1 {
		q.items = append(q.items, q.notice())
	}
	if q.dropped > 0 || len(q.items) >= Queue {
		q.dropped++
		return
	}
	q.items = append(q.items, it)
	q.start()
}

// start starts drain unless it runs. The caller holds mu.
func (q *queue) start() {
	if q.drained == nil {
		q.drained = make(chan struct{})
		go q.drain(q.drained)
	}
}

// notice is the record that says how many records were dropped; it counts
// them again from 0. The caller holds mu.
func (q *queue) notice() item {
	r := slog.NewRecord(time.Now(), slog.LevelWarn, "log records dropped: the log handler did not keep up", 0)
	r.AddAttrs(slog.Int("dropped", q.dropped))
	q.dropped = 0
	return item{h: q.root, ctx: context.Background(), r: r}
}

// drain hands the queued records on, in order, until none is left, then
// closes drained.
func (q *queue) drain(drained chan struct{}) {
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			q.drained = nil
			q.items = nil // let a burst's array go
			close(drained)
			q.mu.Unlock()
			return
		}
		it := q.items[0]
		q.items[0] = item{}
		q.items = q.items[1:]
		q.mu.Unlock()
		_ = it.h.Handle(it.ctx, it.r) // as slog.Logger does: nobody to tell
	}
}

// flush waits for drain to end, or for ctx to.
func (q *queue) flush(ctx context.Context) error {
	q.mu.Lock()
	if q.dropped > 0 { // the count comes last
		q.items = append(q.items, q.notice())
		q.start()
	}
	drained := q.drained
	q.mu.Unlock()
	if drained == nil {
		return nil
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
