package postgres

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
)

// Reconnection of the listener.
const (
	relistenMin = 50 * time.Millisecond
	relistenMax = 2 * time.Second
)

// listenCheck is how long the listener's connection may be quiet before
// the server is asked whether it is there (see listener).
const listenCheck = 3 * time.Second

// listener is a Locker's dedicated connection that LISTENs on the Locker's
// own channel and routes each NOTIFY to the waiter its payload names,
// "KEY TOKEN": a release hands the lock to the first live waiter in the
// queue and notifies only that waiter, on its Locker's channel, with the
// token it now holds. One release wakes one waiter: no herd.
//
// Its goroutine is owned by the listener: stop ends it and waits for it.
// When the connection breaks it reconnects with backoff and wakes every
// waiter, since a wake-up may have been lost meanwhile; waiters also look
// again on their own timers, so a lost NOTIFY delays a waiter, never
// strands it. A connection quiet for check is sent SELECT 1, which must
// be answered within the request timeout: one gone silent (a NAT or
// firewall that dropped its state, a proxy whose server side died) breaks
// nothing it can read, and would be waited on for as long as TCP
// keepalive takes, or for ever, every handoff to its waiters waiting for
// their timers meanwhile.
type listener struct {
	dial    func(context.Context, func(*pgx.ConnConfig)) (*pgx.Conn, error) // the backend's connect
	channel string
	timeout time.Duration
	check   time.Duration
	log     *slog.Logger
	deaf    *atomic.Bool // drop every NOTIFY (tests)

	ctx    context.Context // cancelled by stop
	cancel context.CancelFunc
	exited chan struct{}

	mu      sync.Mutex
	waiters map[string]chan int64
}

// startListener connects and LISTENs, and returns once the server has
// confirmed the LISTEN: no NOTIFY sent after it returns is missed.
func startListener(ctx context.Context, dial func(context.Context, func(*pgx.ConnConfig)) (*pgx.Conn, error), channel string, timeout, check time.Duration, log *slog.Logger, deaf *atomic.Bool) (*listener, error) {
	l := &listener{
		dial:    dial,
		channel: channel,
		timeout: timeout,
		check:   check,
		log:     log,
		deaf:    deaf,
		exited:  make(chan struct{}),
		waiters: map[string]chan int64{},
	}
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	go l.run(conn)
	return l, nil
}

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	// pgx hands notifications to WaitForNotification only when the pool's
	// configuration (the user's) sets no handler of its own.
	conn, err := l.dial(cctx, func(cfg *pgx.ConnConfig) { cfg.OnNotification = nil })
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		l.close(conn)
		return nil, err
	}
	return conn, nil
}

func (l *listener) close(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// run is the listener's goroutine.
func (l *listener) run(conn *pgx.Conn) {
	defer close(l.exited)
	backoff := relistenMin
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for {
		for conn != nil {
			wctx, cancel := context.WithTimeout(l.ctx, l.check)
			n, err := conn.WaitForNotification(wctx)
			quiet := err != nil && wctx.Err() != nil && l.ctx.Err() == nil
			cancel()
			if quiet {
				// Quiet for a check (pgx keeps the connection after a
				// read that ran out of time): is the server there?
				pctx, cancel := context.WithTimeout(l.ctx, l.timeout)
				_, err = conn.Exec(pctx, "SELECT 1")
				cancel()
				if err == nil {
					continue
				}
			}
			if err != nil {
				l.close(conn)
				conn = nil
				if l.ctx.Err() != nil {
					return
				}
				l.log.Warn("lock wake-up listener lost its connection; reconnecting", "channel", l.channel, "err", err)
				l.wakeAll()
				break
			}
			if n == nil || l.deaf.Load() {
				continue
			}
			key, tok, _ := strings.Cut(n.Payload, " ")
			token, _ := strconv.ParseInt(tok, 10, 64)
			l.wake(key, token)
		}
		timer.Reset(backoff)
		select {
		case <-l.ctx.Done():
			return
		case <-timer.C:
		}
		c, err := l.connect(l.ctx)
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			backoff = min(2*backoff, relistenMax)
			continue
		}
		backoff = relistenMin
		conn = c
		l.wakeAll() // anything sent while we were away is lost: look again
	}
}

// register returns the channel the waiter key is signalled on: with the
// token it was handed, or 0 to look again. It holds at most one signal (a
// token wins over 0) and is never closed.
func (l *listener) register(key string) <-chan int64 {
	ch := make(chan int64, 1)
	l.mu.Lock()
	l.waiters[key] = ch
	l.mu.Unlock()
	return ch
}

func (l *listener) unregister(key string) {
	l.mu.Lock()
	delete(l.waiters, key)
	l.mu.Unlock()
}

func (l *listener) wake(key string, token int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	signal(l.waiters[key], token)
}

func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.waiters {
		signal(ch, 0)
	}
}

// signal leaves v in ch, or keeps the one there if it is larger. The
// waiter only receives, and l.mu orders the senders.
func signal(ch chan int64, v int64) {
	if ch == nil {
		return
	}
	select {
	case old := <-ch:
		v = max(v, old)
	default:
	}
	select {
	case ch <- v:
	default:
	}
}

// stop ends the goroutine, closing the connection, and waits for it.
func (l *listener) stop() {
	l.cancel()
	<-l.exited
}

// listener returns the Locker's listener, starting it on first use. A
// caller that finds a start under way waits for it only until its ctx
// ends; when that start fails, the next caller tries again.
func (b *backend) listener(ctx context.Context) (*listener, error) {
	for {
		b.lisMu.Lock()
		b.mu.Lock()
		closed := b.closed
		b.mu.Unlock()
		switch {
		case closed:
			b.lisMu.Unlock()
			return nil, baton.ErrClosed
		case b.lis != nil:
			l := b.lis
			b.lisMu.Unlock()
			return l, nil
		case b.lisStarting != nil:
			starting := b.lisStarting
			b.lisMu.Unlock()
			select {
			case <-starting: // started, or failed: look again
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		starting := make(chan struct{})
		b.lisStarting = starting
		b.lisMu.Unlock()

		l, err := startListener(ctx, b.connect, b.channel, b.cfg.RequestTimeout, b.listenCheck, b.cfg.Logger, &b.deaf)
		b.lisMu.Lock()
		b.lisStarting = nil
		close(starting)
		if err == nil {
			b.lis = l // Close, which waits for starting, stops it
		}
		b.lisMu.Unlock()
		if err != nil {
			return nil, b.fail(ctx, "listen for wake-ups", err)
		}
		return l, nil
	}
}

// runningListener returns the Locker's listener if it was started, and nil
// if not.
func (b *backend) runningListener() *listener {
	b.lisMu.Lock()
	defer b.lisMu.Unlock()
	return b.lis
}

// stopListening waits for a listener start under way (bounded by its
// caller's ctx and the request timeout; the Locker ends its callers' ctx
// before its backend's Close), and takes the listener away for Close to
// stop. Once Close has set closed, no listener starts again.
func (b *backend) stopListening() *listener {
	b.lisMu.Lock()
	for b.lisStarting != nil {
		starting := b.lisStarting
		b.lisMu.Unlock()
		<-starting
		b.lisMu.Lock()
	}
	lis := b.lis
	b.lis = nil
	b.lisMu.Unlock()
	return lis
}
