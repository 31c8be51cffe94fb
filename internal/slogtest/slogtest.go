// Package slogtest has a slog.Handler for tests of what a log handler that
// blocks (one writing to a pipe nobody reads) must not hold up.
package slogtest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Blocking is a slog.Handler that takes records from Level up. Once armed,
// its Handle counts each record, says its message on Entered (while there
// is room), and blocks until Free.
type Blocking struct {
	Level   slog.Level
	Entered chan string

	armed   atomic.Bool
	calls   atomic.Int32
	release chan struct{}
	once    sync.Once
}

// NewBlocking returns a Blocking handler taking records from level up,
// armed when armed is true.
func NewBlocking(level slog.Level, armed bool) *Blocking {
	h := &Blocking{Level: level, Entered: make(chan string, 100), release: make(chan struct{})}
	h.armed.Store(armed)
	return h
}

// Arm makes Handle block from now on.
func (h *Blocking) Arm() { h.armed.Store(true) }

// Calls returns how many records Handle took while armed.
func (h *Blocking) Calls() int { return int(h.calls.Load()) }

// Free lets every Handle that blocks, and every later one, return.
func (h *Blocking) Free() { h.once.Do(func() { close(h.release) }) }

// Enabled reports whether l is at least Level.
func (h *Blocking) Enabled(_ context.Context, l slog.Level) bool { return l >= h.Level }

// Handle blocks until Free once armed, and returns at once before.
func (h *Blocking) Handle(_ context.Context, r slog.Record) error {
	if !h.armed.Load() {
		return nil
	}
	h.calls.Add(1)
	select {
	case h.Entered <- r.Message:
	default:
	}
	<-h.release
	return nil
}

// WithAttrs returns h.
func (h *Blocking) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h.
func (h *Blocking) WithGroup(string) slog.Handler { return h }
