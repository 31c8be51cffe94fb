package zk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/failkit"
)

// result is the outcome of one request made in its own goroutine.
type result[T any] struct {
	v   T
	err error
}

// flights counts the goroutines of requests in flight. Once Close has
// begun, only its own requests start (those made with a context from
// closing), and once it waits for them, none: a request made then (an
// Inspect, a Release or an Observe racing with Close) fails with
// zk.ErrClosing, where adding to a WaitGroup being waited on could panic,
// and it is not queued on a connection about to close (go-zookeeper can
// leave its loop blocked on a request queued as it closes).
type flights struct {
	mu       sync.Mutex
	wg       sync.WaitGroup
	draining bool // Close has begun
	closed   bool // Close waits for the goroutines
}

// closingKey marks the context of Close's own requests.
type closingKey struct{}

// closing returns ctx for Close's own requests, which start while the
// backend drains.
func closing(ctx context.Context) context.Context { return context.WithValue(ctx, closingKey{}, true) }

// add counts one more goroutine, unless Close waits for them, or has begun
// and own is false.
func (f *flights) add(own bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || (f.draining && !own) {
		return false
	}
	f.wg.Add(1)
	return true
}

// drain lets only Close's own requests start.
func (f *flights) drain() {
	f.mu.Lock()
	f.draining = true
	f.mu.Unlock()
}

func (f *flights) done() { f.wg.Done() }

// closing reports whether Close has begun.
func (f *flights) closing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.draining || f.closed
}

// closeWait lets no more goroutines start and waits for those running,
// at most bound when it is not 0. On a connection the caller keeps,
// go-zookeeper may hold a request queued while it shakes hands with a
// silent server for ten times its receive timeout: such a request's
// goroutine ends when go-zookeeper answers it, after Close.
func (f *flights) closeWait(bound time.Duration) {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	if bound == 0 {
		f.wg.Wait()
		return
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// async runs fn, one go-zookeeper request, in a goroutine tracked by the
// backend and returns a channel that receives its result once. go-zookeeper
// requests take no context: this is what lets a caller stop waiting for
// one. The goroutine ends when go-zookeeper answers, which it does when the
// server replies, the connection drops or the connection is closed. After
// Close, it sends nothing and answers zk.ErrClosing.
func async[T any](b *backend, fn func() (T, error)) <-chan result[T] {
	return start(b, false, fn)
}

// start is async, for Close's own requests when own is true.
func start[T any](b *backend, own bool, fn func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	if !b.calls.add(own) {
		ch <- result[T]{err: zkgo.ErrClosing}
		return ch
	}
	go func() {
		defer b.calls.done()
		v, err := fn()
		ch <- result[T]{v, err}
	}()
	return ch
}

// await waits for a request's result, at most the request timeout, and
// returns the context's cause when ctx ends first.
func await[T any](b *backend, ctx context.Context, ch <-chan result[T]) (T, error) {
	t := time.NewTimer(b.cfg.RequestTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	case <-t.C:
		var zero T
		return zero, errNoAnswer
	}
}

// call runs fn as one request and waits for it; see async and await. A
// context from closing makes it one of Close's own.
func call[T any](b *backend, ctx context.Context, fn func() (T, error)) (T, error) {
	return await(b, ctx, start(b, ctx.Value(closingKey{}) != nil, fn))
}

// errNoAnswer is returned by await when the request timeout passes.
var errNoAnswer = errors.New("no answer within the request timeout")

// fail classifies err from a request made under ctx: the caller's
// cancellation, the session's end, an ACL that refuses the request, or
// the lock service failing.
//
// NoAuth and InvalidACL are settings to change, not a server to wait for:
// a *baton.OptionError, which baton elect and run --wait do not retry.
// NoAuth is not an artefact of a reconnection: go-zookeeper sends the
// connection's credentials again (and waits for their answer) before any
// queued request on a new connection, and closes a connection whose
// credentials failed, so a request never runs unauthenticated between
// the two. A node's ACL changes only by a request (setAcl); one that
// refuses the identity now refuses it until an operator changes it, or,
// for a candidate of another identity the doc's rules would let us read,
// until that holder leaves: a mix of identities the doc asks to avoid.
func (b *backend) fail(ctx context.Context, what string, err error) error {
	switch {
	case ctx.Err() != nil:
	case errors.Is(err, zkgo.ErrSessionExpired):
		return fmt.Errorf("%w: %s: %w", baton.ErrLeaseLost, what, ErrSessionExpired)
	case errors.Is(err, zkgo.ErrNoAuth):
		return &baton.OptionError{Option: "ZooKeeper credentials for", Value: b.place() + b.root,
			Reason: fmt.Sprintf("%s: %v: the nodes' ACL refuses %s, or lets it do less than the lock needs (Create, Delete and Read on the election node, Read on the candidates: see the package doc)", what, err, b.identity())}
	case errors.Is(err, zkgo.ErrInvalidACL):
		return &baton.OptionError{Option: "ZooKeeper ACL for", Value: b.place() + b.root,
			Reason: fmt.Sprintf("%s: %v: the server refuses the ACL baton gives new nodes (Settings.ACL; an auth-scheme ACL needs an identity on the connection, Settings.Auth or zk://user:password@)", what, err)}
	}
	return b.unavailable(ctx, what, err)
}

// unavailable is fail for a renewal (a session's confirmation): whatever
// refused it, the lease it kept is lost, never a refused setting.
func (b *backend) unavailable(ctx context.Context, what string, err error) error {
	if ctx.Err() == nil && errors.Is(err, zkgo.ErrSessionExpired) {
		return fmt.Errorf("%w: %s: %w", baton.ErrLeaseLost, what, ErrSessionExpired)
	}
	return failkit.Unavailable(ctx, b.place(), what, err, errors.Is(err, errNoAnswer), b.cfg.RequestTimeout)
}

// identity names the connection's identity, for a refusal by an ACL, and
// what to give instead.
func (b *backend) identity() string {
	if a := b.set.Auth; a != nil {
		return "the identity " + a.String() + "; give the user:password that created them"
	}
	return "a client without credentials; give zk://user:password@host:port" + b.root
}

// isConnErr reports whether err says the request may not have reached the
// server, or its answer did not come back. Besides go-zookeeper's own
// errors, that is the socket's: go-zookeeper hands a request whose write
// failed (a reset or broken connection, a write deadline) the error as it
// is, and closes the connection after.
func isConnErr(err error) bool {
	return errors.Is(err, zkgo.ErrConnectionClosed) || errors.Is(err, zkgo.ErrNoServer) ||
		errors.Is(err, errNoAnswer) || errors.Is(err, zkgo.ErrClosing) || isSocketErr(err)
}

// answerLost reports whether err says a request was sent, or perhaps
// sent, and its answer lost with the connection: a create may have made
// its node.
func answerLost(err error) bool {
	return errors.Is(err, zkgo.ErrConnectionClosed) || isSocketErr(err)
}

// isSocketErr reports whether err is the socket's: a request whose write
// failed, which may have left in part (the server drops a part of a
// request with the connection) or, for all we know, in full.
func isSocketErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}
