package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/holdset"
	"github.com/baton-go/baton/internal/keeper"
	"github.com/baton-go/baton/internal/nilval"
	"github.com/baton-go/baton/internal/parallel"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/rediswake"
)

// DefaultPrefix is where locks live unless baton.WithPrefix says otherwise:
// lock NAME is the key DefaultPrefix + NAME on every node, the same key the
// redis package uses.
const DefaultPrefix = "baton:lock:"

// MinTTL is the shortest lease TTL accepted. Redlock spends part of the TTL
// on the acquisition itself (a per-node timeout of TTL/10 at most) and the
// drift margin, and must renew on a majority every TTL/3; at 500ms that
// leaves 50ms per node, ample on a LAN and with room for a busy host.
const MinTTL = 500 * time.Millisecond

// nodeTimeoutShare is the largest share of the TTL one node may take to
// answer: an acquisition waits at most TTL/10 for the slowest node of the
// majority, so a dead node costs a small part of the lease's validity.
const nodeTimeoutShare = 10

// node is one independent Redis server.
type node struct {
	client goredis.UniversalClient
	where  string
	wake   *rediswake.Waker
}

// backend implements baton.Backend on N independent Redis nodes.
type backend struct {
	nodes       []*node
	quorum      int
	owned       bool // close the clients on Close
	cfg         baton.Config
	prefix      string
	where       string
	sched       *keeper.Scheduler // renews the holds
	nodeTimeout time.Duration
	channel     string

	roundAvg     atomic.Int64  // the time an attempt round takes, moving average, in ns (see noteRound)
	graceForTest time.Duration // when set, handoffGrace's answer (see SetHandoffGrace)

	// beforeHandoffHeld, when set (tests), runs between a waiter's check
	// that a majority's handoffs came in time and the hold made of them,
	// with that hold's local deadline (see OnHandoffHeld).
	beforeHandoffHeld func(deadline time.Time)

	// bgMu guards bgClosed, and every bg.Add (bg.Go) against Close's
	// bg.Wait: once Close set bgClosed, no request starts, so no Add
	// comes after the Wait began, and no request is sent on a client
	// Close closes.
	bgMu     sync.Mutex
	bgClosed bool
	bg       sync.WaitGroup // every node request, abandoned at its deadline or not: awaited by Close

	holds holdset.Set[*hold] // ended by Close
}

var _ baton.Backend = (*backend)(nil)

// New returns a Locker on Redlock over clients, one per independent Redis
// node (not replicas of each other): an odd number, at least 3; one
// client given twice, or two *goredis.Client with one address, are
// refused, as one server would vote twice. It is an
// efficiency lock with no fencing token (see the package documentation).
// The clients stay the caller's: closing the Locker does not close them.
// Set ContextTimeoutEnabled and MaxRetries: -1 in their options, as Open
// does: context deadlines then bound each request on the socket, and
// go-redis sends no copy of a request again after a read timeout (each
// attempt is a Redlock round; a copy arriving late can leave a key behind
// that blocks a node for one TTL, and a release sent again after its
// answer was lost finds the key gone and reports the lease lost though it
// was held to the end).
//
// Options: baton.WithTTL (at least MinTTL; default 15s), baton.WithDrift
// (default TTL/100 + 2ms: the clock drift allowed between this host and
// the nodes), baton.WithRequestTimeout (each node's answer is awaited at
// most min(request timeout, TTL/10)), baton.WithPrefix (default
// DefaultPrefix; no braces), and the rest of baton's.
func New(clients []goredis.UniversalClient, opts ...baton.Option) (*baton.Locker, error) {
	b, err := newBackend(clients, opts)
	if err != nil {
		return nil, err
	}
	return baton.NewLocker(b, b.cfg), nil
}

func newBackend(clients []goredis.UniversalClient, opts []baton.Option) (*backend, error) {
	if n := len(clients); n < 3 || n%2 == 0 {
		return nil, &baton.OptionError{Option: "redlock nodes", Value: strconv.Itoa(n), Reason: "need an odd number of independent nodes, at least 3, so that a majority is well defined"}
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
		quorum:      len(clients)/2 + 1,
		cfg:         cfg,
		prefix:      prefix,
		nodeTimeout: min(cfg.RequestTimeout, cfg.TTL/nodeTimeoutShare),
		channel:     rediskit.NewWakeChannel(),
		sched:       keeper.NewScheduler(),
	}
	addrs := make([]string, len(clients))
	for i, c := range clients {
		if what, isNil := nilval.Of(c); isNil {
			return nil, &baton.OptionError{Option: "redlock node", Value: strconv.Itoa(i), Reason: "is a " + what + " client"}
		}
		if j, same := sameClient(clients[:i], c); same {
			return nil, &baton.OptionError{Option: "redlock nodes", Value: fmt.Sprintf("%d and %d", j, i), Reason: fmt.Sprintf("both reach %s: one server would cast two votes, and make a majority with one other; give each node a server of its own", describe(c))}
		}
		w := describe(c)
		addrs[i] = w
		where := "redis://" + w
		b.nodes = append(b.nodes, &node{client: c, where: where, wake: rediswake.New(c, b.channel, 100*time.Millisecond, rediswake.CheckEvery, cfg.Logger.With("node", where))})
	}
	b.where = "redlock://" + strings.Join(addrs, ",")
	return b, nil
}

// sameClient returns the index of a client among earlier that talks to
// the same server as c, when both are *goredis.Client: one and the same,
// or one address (as rediskit.HostPort writes it). Two names of one host
// ("localhost" and "127.0.0.1") still differ: only the servers could
// tell. Sentinel clients, which all have one made-up address, are only
// compared as one and the same. Other clients are not compared (an interface comparison panics on
// a type that is not comparable).
func sameClient(earlier []goredis.UniversalClient, c goredis.UniversalClient) (int, bool) {
	a, ok := c.(*goredis.Client)
	if !ok {
		return 0, false
	}
	network, addr := a.Options().Network, canonical(a.Options().Addr)
	named := a.Options().Addr != failoverAddr
	for j, e := range earlier {
		if b, ok := e.(*goredis.Client); ok && (b == a || named && b.Options().Network == network && canonical(b.Options().Addr) == addr) {
			return j, true
		}
	}
	return 0, false
}

// failoverAddr is the address go-redis gives every client of
// NewFailoverClient (Sentinel): it names no server, so two such clients
// are not taken for one.
const failoverAddr = "FailoverClient"

// canonical writes a node's address as rediskit.HostPort does, or leaves
// it as it is (a socket's path).
func canonical(addr string) string {
	if hp, err := rediskit.HostPort(addr); err == nil {
		return hp
	}
	return addr
}

// describe names the server a client talks to.
func describe(c goredis.UniversalClient) string {
	if c, ok := c.(*goredis.Client); ok {
		return c.Options().Addr
	}
	return "?"
}

// keys are the Redis keys of one lock, the same on every node.
type keys struct {
	lock string
	q, w string
}

func (b *backend) keys(name string) keys {
	k := b.prefix + name
	return keys{lock: k, q: "{" + k + "}:q", w: "{" + k + "}:w"}
}

func (k keys) all() []string { return []string{k.lock, k.q, k.w} }

func (b *backend) ttlMS() int64 { return rediskit.TTLMillis(b.cfg.TTL) }

// errPending marks a node whose answer each did not wait for, because
// stop said the answers so far were enough.
var errPending = errors.New("answer not awaited")

// errBackendClosed marks a node not asked because Close has closed the
// backend (see eachSettled).
var errBackendClosed = fmt.Errorf("not sent: %w", baton.ErrClosed)

// each runs f on every node in parallel, each bounded by timeout, and
// returns the per-node results and errors. It returns early when stop (if
// not nil) says the answers so far settle the question; nodes not heard
// from then have errPending, and their requests run on to their timeout,
// also when ctx ends after each returned (the Locker cancels an
// acquisition's context when it returns): a slow node still gets its
// claim, its renewal or its unlock. When ctx ends first, each returns and
// the requests are cancelled. Requests run on goroutines tracked by the
// backend and hand their result over on a buffered channel; each returns
// at its deadline even on a client that does not honour context
// deadlines, so a dead or frozen node costs the node timeout at most, not
// the client's read timeout.
func each[T any](ctx context.Context, b *backend, timeout time.Duration, f func(ctx context.Context, n *node) (T, error), stop func(vals []T, errs []error) bool) ([]T, []error) {
	vals, errs, _ := eachSettled(ctx, b, timeout, f, stop)
	return vals, errs
}

// eachSettled is each, and also returns a channel closed when every
// request has returned, awaited or not, or else once timeout has passed
// since they were sent: an undo that waits for it comes after whatever
// the requests set, except on a node whose request outlived its deadline
// (a client that ignores context deadlines), which would hold it up to
// the client's read timeout. Once Close is waiting for the requests (or
// has), it sends none: every node has errBackendClosed, and the channel
// is closed.
func eachSettled[T any](ctx context.Context, b *backend, timeout time.Duration, f func(ctx context.Context, n *node) (T, error), stop func(vals []T, errs []error) bool) ([]T, []error, <-chan struct{}) {
	type answer struct {
		i   int
		v   T
		err error
	}
	n := len(b.nodes)
	vals := make([]T, n)
	errs := make([]error, n)
	b.bgMu.Lock() // until every request is counted in bg
	if b.bgClosed {
		b.bgMu.Unlock()
		for i := range errs {
			errs[i] = errBackendClosed
		}
		settled := make(chan struct{})
		close(settled)
		return vals, errs, settled
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	answers := make(chan answer, n) // buffered: abandoned requests never block
	settled := make(chan struct{})
	var settle sync.Once
	bound := time.AfterFunc(timeout, func() { settle.Do(func() { close(settled) }) })
	var running atomic.Int64
	running.Store(int64(n))
	for i, nd := range b.nodes {
		b.bg.Go(func() {
			v, err := f(rctx, nd)
			answers <- answer{i, v, err}
			if running.Add(-1) == 0 {
				bound.Stop()
				settle.Do(func() { close(settled) })
			}
		})
	}
	b.bgMu.Unlock()
	for i := range errs {
		errs[i] = errPending
	}
	// drain takes the answers already waiting: when ctx ends, or the
	// timeout passes, while answers are ready, select picks either, and an
	// answer that came (a renewal refused, which a failed release reports
	// as the loss) would be lost for a "no answer".
	drain := func() {
		for {
			select {
			case a := <-answers:
				vals[a.i], errs[a.i] = a.v, a.err
			default:
				return
			}
		}
	}
	early := false
	defer func() {
		if !early {
			cancel()
		}
	}()
	for range n {
		select {
		case a := <-answers:
			vals[a.i], errs[a.i] = a.v, a.err
			if stop != nil && stop(vals, errs) {
				// Requests not awaited run on to the node timeout, not cut
				// short; rctx's own timer cancels it then.
				early = true
				return vals, errs, settled
			}
		case <-rctx.Done():
			drain()
			for i, err := range errs {
				if err == errPending {
					errs[i] = &baton.UnavailableError{Where: b.nodes[i].where, Err: fmt.Errorf("%w within %v", errNoAnswer, timeout)}
				}
			}
			return vals, errs, settled
		case <-ctx.Done():
			drain()
			for i, err := range errs {
				if err == errPending {
					errs[i] = context.Cause(ctx)
				}
			}
			return vals, errs, settled
		}
	}
	return vals, errs, settled
}

// count returns how many errs are nil and how many are failures (not nil
// and not errPending).
func count(errs []error) (ok, failed int) {
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case err != errPending:
			failed++
		}
	}
	return ok, failed
}

// errNoAnswer marks a node that did not answer within its timeout: a node
// that is slow, or frozen, or cut off by the network, where one that is
// down refuses the connection.
var errNoAnswer = errors.New("no answer")

// err wraps a node's failure with where it happened. A deadline or a
// timeout of the socket is errNoAnswer, and said in words, not wrapped:
// the node being slow is the service failing, not the caller's context
// ending.
func (n *node) err(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || rediskit.TimedOut(err) {
		return &baton.UnavailableError{Where: n.where, Err: fmt.Errorf("%s: %w in time (%v)", what, errNoAnswer, err)}
	}
	err = rediskit.WithReadOnlyHint(err)
	return &baton.UnavailableError{Where: n.where, Err: fmt.Errorf("%s: %w", what, err)}
}

// unavailable reports that no majority could answer a request on keys.
func (b *backend) unavailable(ctx context.Context, what string, errs []error, keys ...string) error {
	return b.unavailableWhy(ctx, what, b.noMajority(errs, ""), errs, keys...)
}

// noMajority says how many nodes failed or did not answer, in errs (and
// during when, such as " in every round for 1.2s"), against the majority
// needed.
func (b *backend) noMajority(errs []error, during string) string {
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	return fmt.Sprintf("%d of %d nodes failed or did not answer%s; a majority (%d) must answer", failed, len(b.nodes), during, b.quorum)
}

// grants is what a Redis ACL user needs on every node: rediskit.Grants,
// and INFO, by which Open tells a server named twice (see Open).
func grants(prefix string) string { return rediskit.Grants(prefix) + " +info" }

// unavailableWhy is unavailable saying why, the nodes' errors after it.
//
// Nodes that refused the request for good (see rediskit.Refusal: an ACL
// without what baton needs, a key of another type, a command the server
// does not run) count as failed, like nodes that are down, and a majority
// of the others still holds the lock. When they alone deny the majority,
// no retry can mend it: the error is theirs, not the service failing, a
// *baton.OptionError when every refusal is one (NOPERM, credentials), and
// otherwise an error that matches neither baton.ErrUnavailable nor
// baton.ErrInvalidOption, saying so. When nodes that are down or slow have
// their part, it is an outage, which may end.
func (b *backend) unavailableWhy(ctx context.Context, what, why string, errs []error, keys ...string) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if slices.Contains(errs, errBackendClosed) { // none was sent (see eachSettled)
		return fmt.Errorf("%s: %s: %w", b.where, what, baton.ErrClosed)
	}
	var noPerm, options, plain []error
	for i, err := range errs {
		if err == nil || err == errPending {
			continue
		}
		r := rediskit.Refusal(b.nodes[i].where, what, err, grants(b.prefix), keys)
		switch {
		case r == nil:
		case rediskit.NoPerm(err):
			noPerm = append(noPerm, rediskit.Told(err))
		case errors.Is(r, baton.ErrInvalidOption):
			options = append(options, r)
		default:
			plain = append(plain, r)
		}
	}
	refused := len(noPerm) + len(options) + len(plain)
	switch {
	case refused == 0 || len(b.nodes)-refused >= b.quorum:
		return &baton.UnavailableError{Where: b.where, Err: fmt.Errorf("%s: %s: %w", what, why, errors.Join(errs...))}
	case len(plain) == 0 && len(options) == 0:
		return rediskit.PermissionError(b.where, what+": "+why, errors.Join(noPerm...), grants(b.prefix))
	case len(plain) == 0:
		return &baton.OptionError{Option: "redlock nodes", Value: b.where, Reason: fmt.Sprintf("%s: %s: %v", what, why, errors.Join(slices.Concat(options, noPerm)...))}
	}
	// Configuration errors among them are said, not wrapped: the error
	// is not an invalid option as a whole.
	var said []error
	for _, err := range slices.Concat(options, noPerm) {
		said = append(said, errors.New(err.Error()))
	}
	return fmt.Errorf("%s: %s: %s; %d of them refused it for good, which trying again will not mend: %w", b.where, what, why, refused, errors.Join(slices.Concat(plain, said)...))
}

// Close ends every hold (freeing its keys on every node), all at once, each
// within the release timeout; stops the subscriptions, waits for every
// node request in flight, and closes the clients if Open made them. A
// lost hold is not among them (dropped at its loss): its keys, where
// still ours, expire with their TTL, unless the caller releases it before
// Close comes to its end; a release after that (or a look, such as
// Inspect) sends nothing and returns an error matching baton.ErrClosed
// (for a lost lease, Release returns its loss as always).
func (b *backend) Close() error {
	holds, first := b.holds.Close()
	if !first {
		return nil
	}

	errs := []error{parallel.Join(holds, func(h *hold) error { return h.end(context.Background(), baton.ErrClosed) })}
	for _, n := range b.nodes {
		n.wake.Close()
	}
	// From here no request starts (see eachSettled): a lost hold released
	// now sends nothing, and its keys expire with their TTL. Those that
	// started before are awaited, before their clients close.
	b.bgMu.Lock()
	b.bgClosed = true
	b.bgMu.Unlock()
	b.bg.Wait()
	if b.owned {
		for _, n := range b.nodes {
			errs = append(errs, n.client.Close())
		}
	}
	return errors.Join(errs...)
}

// track adds h to the holds Close ends, unless it is closed (see
// holdset.Set.Track).
func (b *backend) track(h *hold) bool {
	return b.holds.Track(h, func() bool { return h.kp.Err() != nil })
}

func (b *backend) untrack(h *hold) { b.holds.Drop(h) }

// releaseTimeout bounds a release on every node.
func (b *backend) releaseTimeout() time.Duration {
	return min(b.cfg.ReleaseTimeout, b.cfg.RequestTimeout)
}

// unlock frees the lock on every node where it holds one of values, in
// one script run per node, on a detached context bounded by timeout. With
// leave it also takes the values out of the wait queues; with notify it
// hands each node's key to the first waiter there (or tells it that it is
// first); without, it is the undo of an acquisition first in line (see
// unlockScript). It returns an error only when no
// majority answered, and otherwise how many nodes answered that the lock
// held none of values.
func (b *backend) unlock(ctx context.Context, k keys, leave, notify bool, timeout time.Duration, values ...string) (notOurs int, err error) {
	l, nt := "0", "0"
	if leave {
		l = "1"
	}
	if notify {
		nt = "1"
	}
	ours, errs := each(context.WithoutCancel(ctx), b, timeout, func(ctx context.Context, n *node) (bool, error) {
		args := append([]any{l, nt}, rediskit.Args(values)...)
		r, err := unlockScript.Run(ctx, n.client, k.all(), args...).Int()
		if err != nil {
			return false, n.err("release "+k.lock, err)
		}
		return r == 1, nil
	}, nil)
	_, failed := count(errs)
	if failed > len(b.nodes)-b.quorum {
		return 0, b.unavailable(context.Background(), "release "+k.lock, errs, k.all()...)
	}
	for i, o := range ours {
		if errs[i] == nil && !o {
			notOurs++
		}
	}
	return notOurs, nil
}
