package baton

import "context"

// Fence is the storage-side check that makes a stale holder harmless: a
// store that remembers, per resource, the newest token it has seen and
// refuses older ones. fence/postgres and fence/sqlite implement it, and
// also offer the check inside the caller's own transaction, which is where
// it protects a write.
type Fence interface {
	// Raise raises the fence for resource to token when token is at least
	// as new as the newest token seen ("at least", because one holder makes
	// many writes with one token). An older token gets a *StaleTokenError.
	// Errors name the resource and the token; callers add no prefix.
	Raise(ctx context.Context, resource string, token Token) error
}
