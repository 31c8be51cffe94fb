package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(holderEnv); args != "" {
		os.Exit(holderMain(args))
	}
	goleak.VerifyTestMain(m)
}

// client returns a go-redis client for addr, closed when tb ends, set up
// as a program using baton should set it up (context deadlines honoured).
func client(tb testing.TB, addr string) *goredis.Client {
	tb.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func newLocker(tb testing.TB, addr string, opts ...baton.Option) *baton.Locker {
	tb.Helper()
	return hookedLocker(tb, addr, nil, opts...)
}

// hookedLocker is newLocker on a client of its own with hook (when not
// nil), for tests that hold back, drop or fail requests on the wire.
func hookedLocker(tb testing.TB, addr string, hook goredis.Hook, opts ...baton.Option) *baton.Locker {
	tb.Helper()
	c := client(tb, addr)
	if hook != nil {
		c.AddHook(hook)
	}
	l, err := redis.New(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

func timeout(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// factory is the conformance factory for a Redis server at addr: each
// client has its own connection pool, as a process would, through a proxy
// of its own, which its Crash blocks: a cut cable, so that its requests
// go unanswered (not refused at once, as by a closed client) and its
// leases end at their local deadline at the latest, as batontest.Client
// says.
func factory(addr string) batontest.Factory {
	return batontest.Factory{
		TTL:     time.Second,
		Observe: true,
		New: func(t testing.TB, opts ...baton.Option) (batontest.Client, error) {
			p := testsvc.NewProxy(t, addr)
			l, err := redis.New(client(t, p.Addr()), opts...)
			if err != nil {
				return batontest.Client{}, err
			}
			return batontest.Client{Locker: l, Crash: func() {
				p.Block()
				t.Cleanup(p.Unblock) // before the Locker's Close: cleanups run last first
			}}, nil
		},
		Slow: func(t testing.TB, latency time.Duration, opts ...baton.Option) (batontest.Client, error) {
			p := testsvc.NewDelayedProxy(t, addr, latency)
			c := client(t, p.Addr())
			l, err := redis.New(c, opts...)
			return batontest.Client{Locker: l}, err
		},
		// The key disappears as if its TTL ran out (or the server's clock
		// jumped); the holder can only tell at its next renewal.
		ExpireSeenByRenewal: true,
		Holds:               redis.Holds,
		Expire: func(t testing.TB, l *baton.Lease) {
			if err := client(t, addr).Del(timeout(t, 5*time.Second), l.Key()).Err(); err != nil {
				t.Fatalf("DEL %s: %v", l.Key(), err)
			}
		},
	}
}

func TestConformance(t *testing.T) {
	srv := testsvc.StartRedis(t)
	if v, err := testsvc.RedisVersion(); err == nil {
		t.Logf("redis-server %s at %s", v, srv.Addr)
	}
	batontest.Run(t, factory(srv.Addr))
}

func TestNew_Invalid(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		opts []baton.Option
		want string
	}{
		{[]baton.Option{baton.WithTTL(100 * time.Millisecond)}, "minimum"},
		{[]baton.Option{baton.WithPrefix("jobs:{a}:")}, "braces"},
	} {
		_, err := redis.New(c, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want an option error saying %q", err, tc.want)
		}
	}
	if _, err := redis.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	// A typed nil is no nil interface: it got past == nil and panicked
	// naming the server.
	for _, nc := range []goredis.UniversalClient{(*goredis.Client)(nil), (*goredis.ClusterClient)(nil), (*goredis.Ring)(nil)} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			_, err = redis.New(nc)
			return err
		}()
		if want := fmt.Sprintf("nil %T", nc); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%s) = %v, want an option error saying %q", want, err, want)
		}
	}
}

func itoa(i int) string { return fmt.Sprint(i) }
