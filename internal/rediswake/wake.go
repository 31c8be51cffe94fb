// Package rediswake routes Redis Pub/Sub wake-ups to the one waiter they
// are for. The redis and redlock backends share it: a Locker subscribes to
// its own channel once (per node), on its first wait, on one connection;
// the script that releases or hands a lock on publishes the value of the
// waiter it chose there, optionally followed by a space and a tag, and the
// Waker passes the tag ("" without one) to that waiter alone. So a release
// wakes one waiter, not a herd.
//
// A subscription that has had nothing for a while is sent a PING; one
// that does not answer it in as long again (a connection silently dropped
// by a NAT or firewall, or a server that froze) is made again on a new
// connection. A subscription the server refuses (a reconnect's SUBSCRIBE,
// under an ACL that no longer grants the channel) is asked for again after
// a check's time, until the server takes it. A message lost meanwhile, or
// while a connection is re-established, is covered by the waiters' timed
// retries.
package rediswake

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Waker is one subscription and the waiters it serves. Its methods are
// safe for concurrent use.
type Waker struct {
	client  goredis.UniversalClient
	channel string
	pause   time.Duration // between reads while the server is away
	check   time.Duration // quiet this long, the subscription is sent a PING, which must be answered as soon
	log     *slog.Logger

	startMu sync.Mutex // serialises Start
	mu      sync.Mutex
	ps      *goredis.PubSub
	closed  bool
	waiters map[string]func(tag string)
	exited  chan struct{}   // closed when the dispatcher returns
	life    context.Context // ended by Close: the dispatcher's pauses and requests end
	end     context.CancelFunc

	signaled atomic.Pointer[func(value string)] // test hook: see OnSignal
}

// OnSignal has fn called, from the dispatcher, each time a message has
// been handed to the waiter registered for value (tests: an order of
// events that a message's arrival would otherwise leave to chance).
func (w *Waker) OnSignal(fn func(value string)) { w.signaled.Store(&fn) }

// New returns a Waker for channel on c, not yet subscribed. pause is how
// long its dispatcher waits after a failed read before reading again (the
// next read reconnects), so that a server that is away is not spun on;
// check is how long a quiet subscription waits before it is sent a PING,
// how long the PING has to be answered, and how long after a refusal the
// subscription is asked for again (see the package doc). A refusal, and
// the subscription taken again after one, are logged to log.
func New(c goredis.UniversalClient, channel string, pause, check time.Duration, log *slog.Logger) *Waker {
	life, end := context.WithCancel(context.Background())
	return &Waker{client: c, channel: channel, pause: pause, check: check, log: log, waiters: map[string]func(tag string){}, life: life, end: end}
}

// CheckEvery is the check interval the backends give New: a subscription
// silently cut off is made again within twice that.
const CheckEvery = 3 * time.Second

// Channel is the channel the Waker subscribes to.
func (w *Waker) Channel() string { return w.channel }

// Ready reports whether the subscription is up.
func (w *Waker) Ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ps != nil
}

// Start subscribes, once, and waits for the server to confirm, so that no
// message published after Start returns is missed. The request is made
// without holding mu, so waiters registering meanwhile are not held up by
// a slow server. After Close it does nothing.
func (w *Waker) Start(ctx context.Context) error {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if w.Ready() || w.isClosed() {
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

// dispatch is owned by the Waker and ends when Close closes the
// subscription. It reads messages itself (not through PubSub.Channel,
// which adds a goroutine and a channel hop to every handoff, and whose
// health check ends a connection only when a PING cannot be written,
// which on a silently dropped one it can). After a broken connection the
// next read reconnects and subscribes again.
func (w *Waker) dispatch(ps *goredis.PubSub) {
	defer close(w.exited)
	ctx := context.Background()
	pinged := false  // a PING went out after a quiet w.check, unanswered yet
	refused := false // the server refused the subscription, asked for again since
	for {
		var msg any
		var err error
		if pinged {
			// Bounded by a context's deadline, not a timeout: go-redis
			// takes a read that runs out of it for a broken connection,
			// which it closes; the next read subscribes on a new one.
			rctx, cancel := context.WithTimeout(ctx, w.check)
			msg, err = ps.ReceiveTimeout(rctx, 0)
			cancel()
		} else {
			msg, err = ps.ReceiveTimeout(ctx, w.check)
		}
		if err != nil {
			if errors.Is(err, goredis.ErrClosed) || w.isClosed() {
				return
			}
			var ne net.Error
			if !pinged && errors.As(err, &ne) && ne.Timeout() && ps.Ping(ctx) == nil {
				pinged = true
				continue
			}
			if refusal(err, pinged) {
				// The server refused the SUBSCRIBE that go-redis sends on
				// a new connection, once (the reply read as the next
				// message), or the connection's log-in. Ask again, a
				// check later: the connection stays up, and unasked it
				// would stay unsubscribed.
				if !refused {
					w.log.Warn("the server refused the wake-up subscription or its connection's log-in; waiters are woken by their timed retries, and it is asked for again every "+w.check.String(), "channel", w.channel, "err", err)
				}
				refused, pinged = true, false
				if !w.sleep(w.check) {
					return
				}
				sctx, cancel := context.WithTimeout(w.life, w.check)
				_ = ps.Subscribe(sctx, w.channel) // its answer is read as the next message
				cancel()
				continue
			}
			pinged = false // a Ping that failed, or was refused, too, is paused after
			if !w.sleep(w.pause) {
				return
			}
			continue
		}
		pinged = false
		m, ok := msg.(*goredis.Message)
		if !ok {
			if _, ok := msg.(*goredis.Subscription); ok && refused {
				refused = false
				w.log.Info("the server took the wake-up subscription again", "channel", w.channel)
			}
			continue // *goredis.Subscription, *goredis.Pong
		}
		value, tag := m.Payload, ""
		w.mu.Lock()
		tell := w.waiters[value]
		if tell == nil {
			if i := strings.LastIndexByte(value, ' '); i >= 0 {
				value, tag = value[:i], value[i+1:]
				tell = w.waiters[value]
			}
		}
		w.mu.Unlock()
		if tell != nil {
			tell(tag)
			if fn := w.signaled.Load(); fn != nil {
				(*fn)(value)
			}
		}
	}
}

// refusal reports whether err, a read's, is the server refusing the
// subscription: an error reply that is not the answer to our PING
// (pinged: an ACL without PING; a server loading its data refuses PING,
// not SUBSCRIBE) and not a passing state of the server's (loading, a
// script running long, a replica without its primary), which a read a
// pause later gets past.
func refusal(err error, pinged bool) bool {
	if _, isReply := errors.AsType[goredis.Error](err); !isReply || pinged {
		return false
	}
	for _, passing := range []string{"LOADING", "BUSY", "MASTERDOWN"} {
		if goredis.HasErrorPrefix(err, passing) {
			return false
		}
	}
	return true
}

// sleep waits d, and reports false when Close came first.
func (w *Waker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.life.Done():
		return false
	}
}

// signal puts tag in ch without blocking: a tag not yet received gives
// way to the newer one.
func signal(ch chan string, tag string) {
	for {
		select {
		case ch <- tag:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

func (w *Waker) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// Register has the tag of each message for the waiter with value put in
// ch (give it a buffer of one), without blocking: a tag the waiter has not
// received yet gives way to the newer one. One channel may serve a waiter
// on several Wakers.
func (w *Waker) Register(value string, ch chan string) {
	w.RegisterFunc(value, func(tag string) { signal(ch, tag) })
}

// RegisterFunc has tell called with the tag of each message for the
// waiter with value, on the dispatcher's goroutine: it must not block.
func (w *Waker) RegisterFunc(value string, tell func(tag string)) {
	w.mu.Lock()
	w.waiters[value] = tell
	w.mu.Unlock()
}

// Unregister forgets the waiter with value.
func (w *Waker) Unregister(value string) {
	w.mu.Lock()
	delete(w.waiters, value)
	w.mu.Unlock()
}

// Close ends the subscription and waits for the dispatcher.
func (w *Waker) Close() {
	w.end()
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
