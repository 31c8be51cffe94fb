package redis

import (
	"context"
	"errors"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// waker tells a Locker's waiters that a lock was handed to them. The
// Locker subscribes to its own channel once, on its first wait, on one
// connection; the script that hands a lock on publishes the new holder's
// value there, and the waker routes it to the one waiter with that value.
// So a release wakes exactly one waiter, the one it made the holder: no
// herd.
//
// A message lost while the connection is re-established is covered by the
// waiter's timed retry, which finds the lock already set to its value.
type waker struct {
	client  goredis.UniversalClient
	channel string

	startMu sync.Mutex // serialises start
	mu      sync.Mutex
	ps      *goredis.PubSub
	closed  bool
	waiters map[string]chan struct{}
	exited  chan struct{} // closed when the dispatcher returns
}

func newWaker(c goredis.UniversalClient, channel string) *waker {
	return &waker{client: c, channel: channel, waiters: map[string]chan struct{}{}}
}

// ready reports whether the subscription is up.
func (w *waker) ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ps != nil
}

// start subscribes, once, and waits for the server to confirm, so that no
// message published after start returns is missed. The request is made
// without holding mu, so waiters registering meanwhile are not held up by
// a slow server.
func (w *waker) start(ctx context.Context) error {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if w.ready() || w.isClosed() {
		return nil
	}
	ps := w.client.Subscribe(ctx, w.channel)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		_ = ps.Close()
		return nil
	}
	w.ps = ps
	w.exited = make(chan struct{})
	go w.dispatch(ps)
	return nil
}

// dispatch is owned by the waker and ends when close closes the
// subscription. It reads messages itself (not through PubSub.Channel,
// which adds a goroutine and a channel hop to every handoff). After a
// broken connection the next read reconnects and subscribes again.
func (w *waker) dispatch(ps *goredis.PubSub) {
	defer close(w.exited)
	ctx := context.Background()
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			if errors.Is(err, goredis.ErrClosed) || w.isClosed() {
				return
			}
			time.Sleep(10 * time.Millisecond) // the server is away; do not spin
			continue
		}
		w.mu.Lock()
		ch := w.waiters[m.Payload]
		w.mu.Unlock()
		if ch != nil {
			select {
			case ch <- struct{}{}:
			default: // already signalled
			}
		}
	}
}

func (w *waker) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// register returns the channel the waiter with value is signalled on. It
// holds at most one signal and is never closed.
func (w *waker) register(value string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.waiters[value] = ch
	w.mu.Unlock()
	return ch
}

func (w *waker) unregister(value string) {
	w.mu.Lock()
	delete(w.waiters, value)
	w.mu.Unlock()
}

// close ends the subscription and waits for the dispatcher.
func (w *waker) close() {
	w.mu.Lock()
	w.closed = true
	ps, exited := w.ps, w.exited
	w.ps = nil
	w.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-exited
	}
}
