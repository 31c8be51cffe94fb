package fencesql

import (
	"fmt"

	"github.com/baton-go/baton"
)

// StaleUnread returns the error for token got, which the fence for
// resource refused as stale, when reading the fence's newest token then
// failed with err. It matches baton.ErrStaleToken, holds a
// *baton.StaleTokenError whose Newest is zero (unknown) and err, and its
// message says the newest token is unknown, not that it is 0.
func StaleUnread(resource string, got baton.Token, err error) error {
	return &staleUnread{stale: &baton.StaleTokenError{Resource: resource, Got: got}, err: err}
}

type staleUnread struct {
	stale *baton.StaleTokenError
	err   error
}

func (e *staleUnread) Error() string {
	return fmt.Sprintf("fence %q refused token %d: it has seen a newer token; another holder took the lock since (the newest token is unknown: %v)", e.stale.Resource, e.stale.Got, e.err)
}

func (e *staleUnread) Unwrap() []error { return []error{e.stale, e.err} }
