// Package backends lists every lock service baton supports, by URL scheme,
// for programs (like the baton command) that pick one from configuration:
//
//	locker, err := backends.Open(ctx, "etcd://127.0.0.1:2379", baton.WithTTL(15*time.Second))
//
// Importing it links every backend; a program that uses one backend imports
// that backend's package instead.
package backends

import (
	"context"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/postgres"
	"github.com/baton-go/baton/redis"
	"github.com/baton-go/baton/redlock"
	"github.com/baton-go/baton/zk"
)

// All maps each URL scheme to its backend.
func All() baton.Openers {
	return baton.Openers{
		"etcd":       etcd.Open,
		"postgres":   postgres.Open,
		"postgresql": postgres.Open,
		"redis":      redis.Open,
		"redlock":    redlock.Open,
		"zk":         zk.Open,
	}
}

// Unfenced reports whether the backend of URL scheme gives no fencing
// tokens (Redis, Redlock), so that a program can refuse a fenced use of
// it before it connects.
func Unfenced(scheme string) bool { return scheme == "redis" || scheme == "redlock" }

// Observable reports whether the backend of URL scheme can report changes
// of leader (baton.Observer): every one but Redlock, whose nodes keep no
// common history to follow. A program can refuse an observation before
// it connects.
func Observable(scheme string) bool {
	_, known := All()[scheme]
	return known && scheme != "redlock"
}

// Open builds a Locker from a backend URL; see each backend's Open for its
// URL form.
func Open(ctx context.Context, rawURL string, opts ...baton.Option) (*baton.Locker, error) {
	return All().Open(ctx, rawURL, opts...)
}
