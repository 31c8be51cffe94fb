package postgres_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/postgres"
)

// deafConns dials connections that can be made deaf: the wake-up
// listener's (the one that sent LISTEN) reads nothing the server sends
// once deaf is set, as a connection whose state a NAT or firewall dropped:
// no error, no data.
type deafConns struct {
	mu      sync.Mutex
	conns   []*deafConn
	listens atomic.Int64 // connections that sent LISTEN: the listener's, one per connect
}

type deafConn struct {
	net.Conn
	of                     *deafConns
	listener, deaf, closed atomic.Bool
}

func (c *deafConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`LISTEN "baton.`)) && c.listener.CompareAndSwap(false, true) {
		c.of.listens.Add(1)
	}
	return c.Conn.Write(b)
}

func (c *deafConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func (c *deafConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.deaf.Load() {
			return n, err
		}
	}
}

func (d *deafConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	dc := &deafConn{Conn: c, of: d}
	d.mu.Lock()
	d.conns = append(d.conns, dc)
	d.mu.Unlock()
	return dc, nil
}

// deafenListener makes the open listener connections deaf, and reports
// how many it found.
func (d *deafConns) deafenListener() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.conns {
		if c.listener.Load() && !c.closed.Load() {
			c.deaf.Store(true)
			n++
		}
	}
	return n
}

// TestListener_SilentConnection_Replaced: a wake-up listener whose
// connection goes silent (no error, nothing read) asks the server after a
// quiet check, gets no answer within the request timeout, and connects
// again; the handoff after that wakes its waiter at once, where without a
// listener it waited for the waiter's own timer (RenewEvery, here 30s).
func TestListener_SilentConnection_Replaced(t *testing.T) {
	dsn := pg.Database(t)
	var conns deafConns
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DialFunc = conns.dial
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := timeout(t, 60*time.Second)
	opts := []baton.Option{baton.WithTTL(90 * time.Second), baton.WithRequestTimeout(time.Second)}
	w, err := postgres.New(ctx, pool, append(opts, baton.WithHolder("w"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	postgres.SetListenCheck(w.Locker(), 200*time.Millisecond)
	h := dial(t, dsn, append(opts, baton.WithHolder("h"))...)

	handoff := func(name string) {
		t.Helper()
		lh, err := h.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		g := acquireAsync(t, w, ctx, name)
		waitQueued(t, h, name)
		if name == "after" {
			listens := conns.listens.Load()
			if n := conns.deafenListener(); n != 1 {
				t.Fatalf("%d listener connections to deafen; want 1", n)
			}
			// Without the check, nothing ever notices.
			batontest.WaitFor(t, 10*time.Second, "the listener connected again (check 200ms, request timeout 1s)", func() bool {
				return conns.listens.Load() > listens
			})
		}
		if err := lh.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.done:
			if g.err != nil {
				t.Fatal(g.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the waiter was not handed the lock within 10s (RenewEvery 30s, listener check 200ms)", name)
		}
	}
	handoff("before") // the listener is up
	handoff("after")
}
