package zk

import (
	"context"
	"errors"
	"fmt"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
)

// result is the outcome of one request made in its own goroutine.
type result[T any] struct {
	v   T
	err error
}

// async runs fn, one go-zookeeper request, in a goroutine tracked by the
// backend and returns a channel that receives its result once. go-zookeeper
// requests take no context: this is what lets a caller stop waiting for
// one. The goroutine ends when go-zookeeper answers, which it does when the
// server replies, the connection drops or the connection is closed.
func async[T any](b *backend, fn func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	b.calls.Add(1)
	go func() {
		defer b.calls.Done()
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

// call runs fn as one request and waits for it; see async and await.
func call[T any](b *backend, ctx context.Context, fn func() (T, error)) (T, error) {
	return await(b, ctx, async(b, fn))
}

// errNoAnswer is returned by await when the request timeout passes.
var errNoAnswer = errors.New("no answer within the request timeout")

// fail classifies err from a request made under ctx: the caller's
// cancellation, the session's end, or the lock service failing.
func (b *backend) fail(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	switch {
	case errors.Is(err, errNoAnswer):
		err = fmt.Errorf("no answer within %v: %w", b.cfg.RequestTimeout, err)
	case errors.Is(err, zkgo.ErrSessionExpired):
		return fmt.Errorf("%w: %s: the ZooKeeper session expired", baton.ErrLeaseLost, what)
	case errors.Is(err, zkgo.ErrNoAuth):
		err = fmt.Errorf("%w (the nodes' ACL refuses this client: give the user:password that created them)", err)
	}
	return &baton.UnavailableError{Where: b.place(), Err: fmt.Errorf("%s: %w", what, err)}
}

// isConnErr reports whether err says the request may not have reached the
// server, or its answer did not come back.
func isConnErr(err error) bool {
	return errors.Is(err, zkgo.ErrConnectionClosed) || errors.Is(err, zkgo.ErrNoServer) ||
		errors.Is(err, errNoAnswer) || errors.Is(err, zkgo.ErrClosing)
}
