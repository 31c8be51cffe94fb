package baton

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Match them with errors.Is; the typed errors below match
// the sentinel of their kind, so errors.Is(err, ErrStaleToken) is true for a
// *StaleTokenError.
//
// A caller can always tell three failures apart:
//   - cancelled by the caller: the error wraps context.Cause(ctx);
//   - held by someone else: the error wraps ErrNotAcquired;
//   - the lock service failed: the error wraps ErrUnavailable.
//
// An acquisition can also fail with an error matching ErrLeaseLost, when
// the session it waited on ended; nothing was held (see Locker.Acquire).
var (
	// ErrNotAcquired means another holder has the lock: TryAcquire found it
	// held, or a wait ended without getting it. A ForceRelease that found
	// no holder returns it too, as a *NotAcquiredError with Free set.
	ErrNotAcquired = errors.New("lock is held by another holder")

	// ErrLeaseLost means a lease ended without being released: a renewal was
	// refused, no renewal was confirmed before the local deadline, the
	// session died, or the lock key was removed by someone else. From
	// Acquire or TryAcquire it means that the session the acquisition was
	// made on (or its place in the queue) ended first: nothing was held,
	// and acquiring again is the remedy.
	ErrLeaseLost = errors.New("lease lost")

	// ErrReleased is the cause of a lease's work context after Release.
	ErrReleased = errors.New("lease released")

	// ErrStaleToken means a fence refused a token older than the newest it
	// has seen.
	ErrStaleToken = errors.New("stale fencing token")

	// ErrUnavailable means the lock service or the fence store could not be
	// reached, did not answer in time, or failed the request.
	ErrUnavailable = errors.New("lock service unavailable")

	// ErrInvalidOption means an option, a name or a URL is not acceptable.
	ErrInvalidOption = errors.New("invalid option")

	// ErrClosed means the Locker was closed.
	ErrClosed = errors.New("locker closed")

	// ErrChangedHands means a ForceRelease found, when it came to free the
	// lock, that it was no longer held by the holder it had read (released
	// and taken again, or freed): it freed nothing, and a second look
	// tells who holds it now.
	ErrChangedHands = errors.New("lock changed hands while being released; nothing was released; look again with baton status")
)

// NotAcquiredError says who holds the lock that could not be taken. Holder
// and Token are empty when the backend could not tell. With Free set, it is
// a ForceRelease's answer that no one holds the lock.
type NotAcquiredError struct {
	Name   string
	Holder string
	Token  Token
	// Free says that no one holds the lock: the answer of a ForceRelease
	// that found nothing to free.
	Free bool
}

func (e *NotAcquiredError) Error() string {
	if e.Free {
		return fmt.Sprintf("lock %q is not held: there is nothing to release", e.Name)
	}
	if e.Holder == "" {
		return fmt.Sprintf("lock %q is held by another holder", e.Name)
	}
	if e.Token != 0 {
		return fmt.Sprintf("lock %q is held by %s (token %d)", e.Name, Printable(e.Holder), e.Token)
	}
	return fmt.Sprintf("lock %q is held by %s", e.Name, Printable(e.Holder))
}

// Is reports whether target is ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// LostError says which lease was lost and why. Cause is the backend's or the
// keeper's reason: a refused renewal, a passed deadline, an expired session.
type LostError struct {
	Name  string
	Token Token // zero on backends without fencing tokens
	Cause error
}

func (e *LostError) Error() string {
	cause := "unknown cause"
	if e.Cause != nil {
		// Causes usually wrap ErrLeaseLost themselves; say it once.
		cause = strings.TrimPrefix(e.Cause.Error(), ErrLeaseLost.Error()+": ")
	}
	if e.Token != 0 {
		return fmt.Sprintf("lease on %q (token %d) lost: %s", e.Name, e.Token, cause)
	}
	return fmt.Sprintf("lease on %q lost: %s", e.Name, cause)
}

// Is reports whether target is ErrLeaseLost.
func (e *LostError) Is(target error) bool { return target == ErrLeaseLost }

// Unwrap returns the cause.
func (e *LostError) Unwrap() error { return e.Cause }

// StaleTokenError is returned by a fence that refused a token because it has
// already seen a newer one: another holder took the lock since, or, when
// Ahead is set, the fence's token came from somewhere else.
type StaleTokenError struct {
	Resource string
	Got      Token // the token that was refused
	Newest   Token // the newest token the fence has seen
	// Ahead is set by FencedLease.Raise when the lock service, asked after
	// the refusal, still named the refused lease the holder. No later
	// holder can then have raised the fence (each gets a newer token than
	// ours, and none holds while we do): its token came from another lock
	// service, or from this one before it was rebuilt or restored, and
	// this service's tokens may take long to catch up. Acquiring again
	// does not help.
	Ahead bool
}

func (e *StaleTokenError) Error() string {
	if e.Ahead {
		return fmt.Sprintf("fence %q refused token %d: it has seen token %d, though the lock service still names this lease the holder, so no later holder raised it: the fence's token came from another lock service, or from this one before it was rebuilt; use the fence with the lock service it belongs to, or, after a rebuild, delete the fence's row from its table once no holder of the old service can write", e.Resource, e.Got, e.Newest)
	}
	return fmt.Sprintf("fence %q refused token %d: it has seen token %d; another holder took the lock since", e.Resource, e.Got, e.Newest)
}

// Is reports whether target is ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// OptionError describes an invalid option, name or URL.
type OptionError struct {
	Option string // the option's name, such as "ttl" or "name"
	Value  string // the value given, printable
	Reason string // what is wrong and what to do instead
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("invalid %s %s: %s", e.Option, e.Value, e.Reason)
}

// Is reports whether target is ErrInvalidOption.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOption }

// UnavailableError wraps a lock-service or fence-store failure with the
// place it happened (a URL without its password, or an address). It is the
// "backend failed" kind, told apart from "cancelled by the caller" and
// "held by someone else".
type UnavailableError struct {
	Where string
	Err   error
}

func (e *UnavailableError) Error() string {
	if e.Where == "" {
		return fmt.Sprintf("lock service unavailable: %v", e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Where, e.Err)
}

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the underlying failure.
func (e *UnavailableError) Unwrap() error { return e.Err }
