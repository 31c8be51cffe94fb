package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/failkit"
	"github.com/baton-go/baton/internal/holdset"
	"github.com/baton-go/baton/internal/keeper"
	"github.com/baton-go/baton/internal/nilval"
	"github.com/baton-go/baton/internal/parallel"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediswake"
)

// DefaultPrefix is where locks live unless baton.WithPrefix says otherwise:
// lock NAME is the Redis key DefaultPrefix + NAME.
const DefaultPrefix = "baton:lock:"

// MinTTL is the shortest lease TTL accepted. A lease is renewed every TTL/3
// and counts its local deadline as TTL - drift from the send time of its
// last confirmed renewal, so at 200ms a renewal has about 130ms to be
// answered: a few round trips to a nearby server plus a scheduling hiccup
// or a GC pause on a busy host. Below that a holder loses its lease to its
// own machine's hiccups more often than to crashes, which is what the TTL
// is for; Redis's PX millisecond granularity is not the limit.
const MinTTL = 200 * time.Millisecond

// backend implements baton.Backend on one Redis server (or a Cluster,
// through redis.UniversalClient).
type backend struct {
	client goredis.UniversalClient
	owned  bool // close the client on Close
	cfg    baton.Config
	prefix string
	where  string // for error messages, without password
	wake   *rediswake.Waker
	sched  *keeper.Scheduler // renews the holds

	undos sync.WaitGroup // undos of unanswered claims (see claim), awaited by Close

	holds holdset.Set[*hold] // ended by Close

	// life is cancelled (with baton.ErrClosed) when Close begins; every
	// observation runs in a context that ends with it, and is counted in
	// observers, which Close waits for. It is the backend's own lifetime,
	// not a caller's context.
	life    context.Context
	endLife context.CancelCauseFunc

	obsMu     sync.Mutex     // guards obsClosed, and an observation's observers.Add against Close's Wait
	obsClosed bool           // Close began: no observation starts
	observers sync.WaitGroup // observation goroutines, and their quit-entry goroutines (added while their observation counts), awaited by Close

	obsTTL, obsRefresh time.Duration // observerTTL and observerRefresh, but in tests
	obsRead            atomic.Int64  // stream entries its observations read, for tests

	// beforeHandoffHeld, when set (tests), runs between a waiter's check
	// that a handoff came in time and the hold made of it, with that
	// hold's local deadline (see OnHandoffHeld).
	beforeHandoffHeld func(deadline time.Time)
}

var _ baton.Backend = (*backend)(nil)

// New returns a Locker on client, an efficiency lock: no fencing tokens
// (see the package documentation). The client stays the caller's: closing
// the Locker does not close it. Set ContextTimeoutEnabled in the client's
// options (Open does), so that context deadlines bound each command on the
// socket (go-redis interrupts a read at a deadline, not at a cancellation);
// renewals are bounded by the local deadline either way. Set MaxRetries to
// -1 as well (Open does): baton retries within its own deadlines, and a
// copy go-redis sends again after a read timeout can, arriving late, leave
// a key behind that blocks the lock for one TTL (it breaks no mutual
// exclusion: see the package documentation), and a release sent again
// after its answer was lost finds the key gone and reports the lease lost
// though it was held to the end.
//
// Options: baton.WithTTL (at least MinTTL; default 15s),
// baton.WithPrefix (default DefaultPrefix; no braces, which would change
// the key's Cluster hash slot), baton.WithRequestTimeout bounding each
// command, and the rest of baton's.
func New(client goredis.UniversalClient, opts ...baton.Option) (*baton.Locker, error) {
	b, err := newBackend(client, opts)
	if err != nil {
		return nil, err
	}
	return baton.NewLocker(b, b.cfg), nil
}

func newBackend(client goredis.UniversalClient, opts []baton.Option) (*backend, error) {
	if what, isNil := nilval.Of(client); isNil {
		return nil, &baton.OptionError{Option: "redis client", Value: what, Reason: "pass a redis.UniversalClient, or use Open"}
	}
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(MinTTL); err != nil {
		return nil, err
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := rediskit.CheckPrefix(prefix); err != nil {
		return nil, err
	}
	b := &backend{
		client: client,
		cfg:    cfg,
		prefix: prefix,
		where:  describe(client),
		sched:  keeper.NewScheduler(),

		obsTTL:     observerTTL,
		obsRefresh: observerRefresh,
	}
	b.life, b.endLife = context.WithCancelCause(context.Background())
	b.wake = rediswake.New(client, rediskit.NewWakeChannel(), 10*time.Millisecond, rediswake.CheckEvery, cfg.Logger)
	return b, nil
}

// describe names the server(s) a client talks to, without credentials.
func describe(c goredis.UniversalClient) string {
	switch c := c.(type) {
	case *goredis.Client:
		o := c.Options()
		return fmt.Sprintf("redis://%s/%d", o.Addr, o.DB)
	case *goredis.ClusterClient:
		return "redis://" + strings.Join(c.Options().Addrs, ",")
	}
	return "redis"
}

// keys are the Redis keys of one lock.
type keys struct {
	name    string
	lock    string // K
	q, w, o string // {K}:q, {K}:w, {K}:o
	n       string // {K}:n
}

func (b *backend) keys(name string) keys {
	k := b.prefix + name
	return keys{name: name, lock: k, q: "{" + k + "}:q", w: "{" + k + "}:w", o: "{" + k + "}:o", n: "{" + k + "}:n"}
}

func (k keys) all() []string { return []string{k.lock, k.q, k.w, k.o, k.n} }

func (b *backend) ttlMS() int64 { return rediskit.TTLMillis(b.cfg.TTL) }

// op bounds one request by the request timeout.
func (b *backend) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.RequestTimeout)
}

// fail classifies err from a request made with a context derived from ctx
// on keys (those a reply of WRONGTYPE names): the caller's cancellation, a
// refusal, or the lock service failing.
func (b *backend) fail(ctx context.Context, what string, err error, keys ...string) error {
	return b.failWithin(ctx, what, err, b.cfg.RequestTimeout, keys...)
}

// failWithin is fail for a request bounded by bound.
// A request the server refused for good (see rediskit.Refusal) is not the
// service failing: an error in the configuration (an ACL without what
// baton needs, credentials changed) is a *baton.OptionError naming what to
// grant or check, and a key of another type or a command the server does
// not run an error that matches neither baton.ErrUnavailable nor
// baton.ErrInvalidOption.
func (b *backend) failWithin(ctx context.Context, what string, err error, bound time.Duration, keys ...string) error {
	if ctx.Err() == nil {
		if rerr := rediskit.Refusal(b.where, what, err, rediskit.Grants(b.prefix), keys); rerr != nil {
			return rerr
		}
	}
	return b.unavailable(ctx, what, err, bound)
}

// unavailable classifies err as the service failing, whatever it says: for
// a renewal, whose failure is the lease's loss (a *baton.LostError), never
// an invalid option. A replica's READONLY says what it may mean.
func (b *backend) unavailable(ctx context.Context, what string, err error, bound time.Duration) error {
	timedOut := errors.Is(err, context.DeadlineExceeded) || rediskit.TimedOut(err)
	err = rediskit.WithReadOnlyHint(err)
	return failkit.Unavailable(ctx, b.where, what, err, timedOut, bound)
}

// Close ends every hold, freeing its key on the server (and handing it to
// the next waiter), all at once, each within the release timeout; stops
// waking waiters, ends every observation, and closes the client if Open
// made it. A lost hold is not among them (dropped at its loss): its key,
// if still ours, expires with its TTL, as after a crash, unless the caller
// releases it.
//
// When Close returns, no observation's goroutine or request runs. An
// observation ends as soon as its server answers its quit entry (see
// observe); a read blocked on a server that stopped answering ends only
// at its deadline (go-redis does not end a read at a cancellation): on
// the client Open made, Close ends it at once by closing the client; on
// a caller's client, Close waits for it, at most RenewEvery and the
// request timeout (with ContextTimeoutEnabled; see Observe).
func (b *backend) Close() error {
	holds, first := b.holds.Close()
	if !first {
		return nil
	}
	b.obsMu.Lock()
	b.obsClosed = true // no observation starts after this; only its running ones' quit-entry goroutines Add (see observe)
	b.obsMu.Unlock()
	b.endLife(baton.ErrClosed) // observations end while the holds do

	err := parallel.Join(holds, func(h *hold) error {
		ctx, cancel := b.cleanup(context.Background())
		defer cancel()
		return h.end(ctx, baton.ErrClosed)
	})
	b.undos.Wait()
	b.wake.Close()
	if b.owned {
		// Also ends an observation's read on a server that stopped
		// answering, which its cancellation does not.
		err = errors.Join(err, b.client.Close())
	}
	b.observers.Wait()
	return err
}

// track adds h to the holds Close ends, unless it is closed (see
// holdset.Set.Track).
func (b *backend) track(h *hold) bool {
	return b.holds.Track(h, func() bool { return h.kp.Err() != nil })
}

func (b *backend) untrack(h *hold) { b.holds.Drop(h) }

// cleanup returns a context for a cleanup request that must run even when
// the caller gave up: detached from ctx's cancellation and bounded by the
// release timeout.
func (b *backend) cleanup(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), b.cfg.ReleaseTimeout)
}

// release runs the release script, bounded by ctx as given (callers pass
// one bounded by the release timeout: from cleanup, or Lease.Release's),
// and reports whether the lock was still ours.
func (b *backend) release(ctx context.Context, k keys, value string) (bool, error) {
	n, err := releaseScript.Run(ctx, b.client, k.all(), value).Int()
	if err != nil {
		return false, b.failWithin(context.Background(), "release "+k.lock, err, b.cfg.ReleaseTimeout, k.all()...)
	}
	return n == 1, nil
}
