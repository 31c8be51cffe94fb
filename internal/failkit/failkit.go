// Package failkit classifies the failed requests of the backends alike.
package failkit

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton"
)

// Unavailable classifies err, the failure of a request (what) made to the
// lock service at where for a caller whose context is ctx: the caller's
// cancellation, returned as context.Cause(ctx), or else the service
// failing, a *baton.UnavailableError. A request that timed out (timedOut,
// the backend's reading of err) says it had no answer within bound, the
// time it was given.
func Unavailable(ctx context.Context, where, what string, err error, timedOut bool, bound time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if timedOut {
		err = fmt.Errorf("no answer within %v: %w", bound, err)
	}
	return &baton.UnavailableError{Where: where, Err: fmt.Errorf("%s: %w", what, err)}
}

// Reworded returns an error that says msg and wraps err: a cause told in
// words a user can act on (the dial error gRPC gives only as text, a
// Redis reply without its script's place), which errors.Is and errors.As
// still find.
func Reworded(msg string, err error) error { return &reworded{msg: msg, err: err} }

type reworded struct {
	msg string
	err error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.err }
