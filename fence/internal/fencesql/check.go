package fencesql

import (
	"fmt"
	"reflect"

	"github.com/baton-go/baton"
)

// NilValue reports whether q, a store's querier, is nil: the nil
// interface, or a nil pointer (map, slice, func or channel) of some type,
// on which every statement would panic. what shows it in an error: "nil",
// or "nil *sql.Tx".
func NilValue(q any) (what string, isNil bool) {
	if q == nil {
		return "nil", true
	}
	switch v := reflect.ValueOf(q); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if v.IsNil() {
			return fmt.Sprintf("nil %T", q), true
		}
	}
	return "", false
}

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
