// Package forcekit holds what the backends' forced releases share.
package forcekit

import (
	"context"
	"errors"
	"time"
)

// retryPause is how long Delete waits between tries.
const retryPause = 50 * time.Millisecond

// Delete runs del, a forced release's compare-and-delete of the holder it
// read, each try bounded by try, again while del fails (its outcome
// unknown: the answer may have been lost after the delete was applied),
// while ctx lasts and for at most twice try, so that a try that timed out
// is followed by one more. Deleting that holder twice is harmless, while an operator told
// that the release failed would force again, and free the next holder's
// lock. del reports whether it deleted. A try that finds nothing to delete
// after one whose outcome was unknown counts as done: the holder read is
// gone either way. Delete returns whether the holder read is gone, or
// del's last error when the outcome stayed unknown.
//
// An error del marks Final (a refusal: a privilege, an ACL) ends the tries
// at once, and Delete returns it unwrapped with false: the server answered,
// and would answer so again; nothing was deleted by that try, and an
// earlier unsure one does not count as done, since the refusal says
// nothing of it.
func Delete(ctx context.Context, try time.Duration, del func(context.Context) (bool, error)) (bool, error) {
	deadline := time.Now().Add(2 * try)
	unsure := false
	for {
		tctx, cancel := context.WithTimeout(ctx, try)
		deleted, err := del(tctx)
		cancel()
		if err == nil {
			return deleted || unsure, nil
		}
		var f finalError
		if errors.As(err, &f) {
			return false, f.err
		}
		if ctx.Err() != nil || time.Until(deadline) < retryPause {
			// No time left for another try.
			return false, err
		}
		unsure = true
		t := time.NewTimer(retryPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, err
		case <-t.C:
		}
	}
}

// Final marks err, del's, as an answer that trying again cannot change
// (see Delete). Final(nil) is nil.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return finalError{err}
}

// finalError is an error marked with Final.
type finalError struct{ err error }

func (f finalError) Error() string { return f.err.Error() }
func (f finalError) Unwrap() error { return f.err }
