package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/failkit"
)

// DefaultPrefix is where locks live unless baton.WithPrefix says otherwise.
// Lock NAME is the key range DefaultPrefix + NAME + "/", the layout etcdctl
// lock uses, so `etcdctl lock /baton/lock/NAME` and a baton lock on NAME
// exclude each other.
const DefaultPrefix = "/baton/lock/"

// backend implements baton.FencedBackend on an etcd client.
type backend struct {
	client *clientv3.Client
	owned  bool // close the client on Close
	cfg    baton.Config
	prefix string
	where  string // endpoints, for error messages
	ttlSec int64

	seq atomic.Uint64 // makes every key of one session unique

	mu       sync.Mutex
	sess     *session              // the session new acquisitions use
	granting *grant                // the grant in flight, if any (see session)
	sessions map[*session]struct{} // every session not yet revoked, sess among them
	holds    map[*hold]struct{}
	closed   bool
	bg       sync.WaitGroup // revokes of retired sessions, sweeps of late keys, retried deletes and observations, awaited by Close
	bgCtx    context.Context
	bgStop   context.CancelFunc // ends the sweeps, the retried deletes, the revokes of sessions lost by their deadline, and the observations

	hooks atomic.Pointer[hooks] // test instrumentation; nil in production
}

// hooks let tests hold the backend up from inside.
type hooks struct {
	// watchEvent is called by a hold's watcher with its context before it
	// looks at the events of a watch response.
	watchEvent func(ctx context.Context)
	// watchExit is called by a hold's watcher as it exits.
	watchExit func()
	// grantSent is called as a lease grant is sent.
	grantSent func()
	// observed is called with each term an observation decides, before
	// it hands it to its reader.
	observed func(baton.Term)
	// tracked is called with a new hold's key and its session's Done
	// once the hold is tracked, before it follows the session's end.
	tracked func(key string, sessionDone <-chan struct{})
	// made is called with each new hold once it is tracked.
	made func(*hold)
}

var _ baton.FencedBackend = (*backend)(nil)

// maxLeaseTTL is the longest lease etcd grants (its lease.MaxLeaseTTL);
// a longer one is refused as "too large lease TTL".
const maxLeaseTTL = 9_000_000_000 * time.Second

// New returns a FencedLocker on client. The client stays the caller's:
// closing the Locker does not close it. Options: baton.WithTTL (whole
// seconds, at least the server's minimum lease TTL, 2s with etcd's default
// election timeout), baton.WithPrefix (default DefaultPrefix), and the rest
// of baton's. Give the client gRPC keep-alive (clientv3.Config's
// DialKeepAliveTime and DialKeepAliveTimeout; Dial sets 10s and the
// request timeout): without it, a holder's watch on a connection gone
// silent misses a forced release for as long as TCP takes to give up
// (see the package doc, "What is not").
func New(client *clientv3.Client, opts ...baton.Option) (*baton.FencedLocker, error) {
	b, err := newBackend(client, opts)
	if err != nil {
		return nil, err
	}
	return baton.NewFencedLocker(b, b.cfg), nil
}

func newBackend(client *clientv3.Client, opts []baton.Option) (*backend, error) {
	if client == nil {
		return nil, &baton.OptionError{Option: "etcd client", Value: "nil", Reason: "pass a *clientv3.Client, or use Dial"}
	}
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(time.Second); err != nil {
		return nil, err
	}
	if cfg.TTL%time.Second != 0 {
		return nil, &baton.OptionError{Option: "ttl", Value: cfg.TTL.String(), Reason: "etcd leases count whole seconds; use a whole number of seconds such as 2s"}
	}
	if cfg.TTL > maxLeaseTTL {
		return nil, &baton.OptionError{Option: "ttl", Value: cfg.TTL.String(), Reason: fmt.Sprintf("is longer than etcd grants a lease (%v, about 285 years); use a shorter TTL", maxLeaseTTL)}
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	bgCtx, bgStop := context.WithCancel(context.Background())
	return &backend{
		bgCtx:  bgCtx,
		bgStop: bgStop,
		client: client,
		cfg:    cfg,
		prefix: prefix,
		where:  "etcd://" + strings.Join(stripSchemes(client.Endpoints()), ","),
		ttlSec: int64(cfg.TTL / time.Second),
		holds:  map[*hold]struct{}{},

		sessions: map[*session]struct{}{},
	}, nil
}

func stripSchemes(eps []string) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		if j := strings.Index(e, "://"); j >= 0 {
			e = e[j+3:]
		}
		out[i] = e
	}
	return out
}

// TokenSource implements baton.FencedBackend.
func (b *backend) TokenSource() string { return "etcd create revision of the lock key" }

// lockPrefix is the key range of one lock.
func (b *backend) lockPrefix(name string) string { return b.prefix + name + "/" }

// op bounds one request by the request timeout.
func (b *backend) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.RequestTimeout)
}

// fail classifies err from a request made with a context derived from ctx
// and bounded by the request timeout: the caller's cancellation, or the
// lock service failing.
func (b *backend) fail(ctx context.Context, what string, err error) error {
	return b.failWithin(ctx, what, err, b.cfg.RequestTimeout)
}

// failWithin is fail for a request bounded by bound (a release's, by the
// release timeout), which a message about a missing answer names. A
// request the server refused, which trying again cannot mend, is not the
// service failing: see refusal.
func (b *backend) failWithin(ctx context.Context, what string, err error, bound time.Duration) error {
	if ctx.Err() == nil {
		if rerr := b.refusal(what, err); rerr != nil {
			return rerr
		}
	}
	return b.unavailableWithin(ctx, what, err, bound)
}

// unavailable classifies err as the service failing, whatever it says:
// for a renewal, whose failures are retried until the local deadline and
// whose last one the loss wraps, never a refusal of another kind.
func (b *backend) unavailable(ctx context.Context, what string, err error) error {
	return b.unavailableWithin(ctx, what, err, b.cfg.RequestTimeout)
}

func (b *backend) unavailableWithin(ctx context.Context, what string, err error, bound time.Duration) error {
	timedOut := errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
	return failkit.Unavailable(ctx, b.where, what, err, timedOut, bound)
}

// refusal returns the error for err when the server refused the request
// (what) for good, and nil when err may be the lock service failing. A
// user the server does not know, or may not write the prefix, is a
// *baton.OptionError naming what to grant or give (see refused); a request
// larger than the server takes (a long prefix, or a server with a small
// --max-request-bytes: a holder name is at most 200 bytes) an error saying
// so, which matches neither baton.ErrUnavailable nor
// baton.ErrInvalidOption.
//
// Everything else may mend itself, and stays the service failing: no
// leader, a timeout, too many requests, a database out of space (an
// operator compacts and disarms the alarm), and an invalid auth token or
// an old auth revision, which the client answers by fetching a new token
// (a password it can no longer log in with is then ErrAuthFailed).
func (b *backend) refusal(what string, err error) error {
	if rerr := refused(err, b.where, b.prefix, "was refused "+what+" under it ("+err.Error()+")"); rerr != nil {
		return rerr
	}
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		return fmt.Errorf("%s: %s: %w (refused by the server, whose --max-request-bytes it exceeds: raise it, or use a shorter prefix)", b.where, what, err)
	}
	return nil
}

// Close ends every hold and every observation, revokes the session leases
// (freeing all their keys at once), all in parallel, and closes the client
// if Dial made it. It waits one release timeout at most for a server that
// does not answer; an observation's channel is closed by the time it
// returns.
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.sess = nil
	granting := b.granting
	sessions := make([]*session, 0, len(b.sessions))
	for s := range b.sessions {
		sessions = append(sessions, s)
	}
	holds := make([]*hold, 0, len(b.holds))
	for h := range b.holds {
		holds = append(holds, h)
	}
	b.mu.Unlock()
	if granting != nil {
		// A grant in flight (only when Close was called on the
		// backend itself: the Locker ends its acquisitions first): its
		// lease, if any, is revoked before the client closes.
		granting.cancel()
		<-granting.done
	}

	for _, h := range holds {
		h.lose(baton.ErrClosed)
		h.cancel() // its watcher, awaited below
	}
	// The sweeps stop (revoking every session deletes the keys they
	// sweep), and so do the revokes of sessions lost by their deadline
	// (see revokeIfDone) and the observations (their sends and requests
	// give up on bgCtx too); the revokes of retired sessions already
	// under way finish, while the other sessions are revoked, all at
	// once, so that Close waits one release timeout at most, however
	// many sessions there are.
	b.bgStop()
	errs := make([]error, len(sessions))
	for i, s := range sessions {
		b.bg.Go(func() { errs[i] = s.close(b) })
	}
	b.bg.Wait()
	for _, h := range holds {
		<-h.exited // no watcher outlives Close, nor runs on a client it closes
	}
	err := errors.Join(errs...)
	if b.owned {
		err = errors.Join(err, b.client.Close())
	}
	return err
}

func (b *backend) track(h *hold) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.holds[h] = struct{}{}
	return true
}

func (b *backend) untrack(h *hold) {
	b.mu.Lock()
	delete(b.holds, h)
	b.mu.Unlock()
}

// isLeaseGone reports whether err says the lease no longer exists.
func isLeaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}
