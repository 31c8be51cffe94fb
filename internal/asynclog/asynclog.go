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
//
// Writer does the same for an io.Writer of lines: baton's CLI writes its
// own lines to stderr through one.
package asynclog

import (
	"context"
	"log/slog"
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
	q     *queue[item]
}

// New returns a Handler that hands records to h from a goroutine of its
// own. A Handler given to New is returned as it is.
func New(h slog.Handler) slog.Handler {
	if a, ok := h.(*Handler); ok {
		return a
	}
	return &Handler{inner: h, q: newQueue(
		func(it item) { _ = it.h.Handle(it.ctx, it.r) }, // as slog.Logger does: nobody to tell
		func(dropped int) item {
			r := slog.NewRecord(time.Now(), slog.LevelWarn, "log records dropped: the log handler did not keep up", 0)
			r.AddAttrs(slog.Int("dropped", dropped))
			return item{h: h, ctx: context.Background(), r: r}
		})}
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
