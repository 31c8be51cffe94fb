// Package ctxhook runs a function when a context ends, as
// context.AfterFunc does, with a stop that leaves nothing running.
package ctxhook

import (
	"context"
	"sync"
)

// AfterFunc arranges to call f in its own goroutine after ctx ends, as
// context.AfterFunc does. Its stop keeps f from being called, and when f
// has been called already, waits for it to return: a goroutine that
// stops its hook before it returns leaves no callback running behind it,
// which an owner waiting for that goroutine (a Close) can count on.
// Calling stop again does nothing; it must not be called from f.
func AfterFunc(ctx context.Context, f func()) (stop func()) {
	done := make(chan struct{})
	unhook := context.AfterFunc(ctx, func() {
		defer close(done)
		f()
	})
	return sync.OnceFunc(func() {
		if !unhook() {
			<-done
		}
	})
}
