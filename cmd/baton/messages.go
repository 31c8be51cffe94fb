package main

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// messageQueue is how many of baton's own lines wait for a stderr that is
// not read before further ones are dropped.
const messageQueue = 1024

// messageWriter writes baton's own messages, its log lines and reports, to
// stderr from a goroutine of its own, so that a stderr nobody reads (a
// stuck log pipe, a terminal paused with Ctrl-S) never holds up what must
// not wait: the renewal timer that declares a lease lost, and supervise's
// loop, which stops the command on the loss. A line that finds the queue
// full is dropped and counted; the next one that fits, or Close, says how
// many were. Each Write is taken as whole lines, as slog's handlers and
// baton's reports write them. run owns it: Close drains the queue, then
// ends the goroutine. A supervised command writes to the stderr under it
// (commandOutput).
type messageWriter struct {
	w     io.Writer
	queue chan []byte
	done  chan struct{} // closed when drain has written the last line

	mu      sync.Mutex
	closed  bool
	dropped int
}

func newMessageWriter(w io.Writer) *messageWriter {
	m := &messageWriter{w: w, queue: make(chan []byte, messageQueue), done: make(chan struct{})}
	go m.drain()
	return m
}

// Write queues a copy of p and returns at once. Once Close has begun, it
// writes p itself, after the queue.
func (m *messageWriter) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		<-m.done
		return m.w.Write(p)
	}
	if m.dropped > 0 {
		if len(m.queue) >= cap(m.queue)-1 { // no room for the notice and p
			m.dropped++
			return len(p), nil
		}
		m.queue <- m.notice()
	}
	select {
	case m.queue <- bytes.Clone(p):
	default:
		m.dropped++
	}
	return len(p), nil
}

// notice says how many lines were dropped, and counts them again from 0.
// The caller holds mu.
func (m *messageWriter) notice() []byte {
	n := m.dropped
	m.dropped = 0
	return fmt.Appendf(nil, "baton: %d of baton's own lines dropped here: stderr was not read\n", n)
}

// drain writes the queued lines in order until the queue is closed.
func (m *messageWriter) drain() {
	defer close(m.done)
	for p := range m.queue {
		_, _ = m.w.Write(p) // as for a direct write: nobody left to tell
	}
}

// Close writes what is queued, and the count of any lines dropped, then
// returns: it waits as long as stderr is not read, as a direct write would.
func (m *messageWriter) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	if m.dropped > 0 {
		m.queue <- m.notice() // drain makes room
	}
	close(m.queue)
	m.mu.Unlock()
	<-m.done
}
