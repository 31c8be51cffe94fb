// Package fence opens a fence store by URL, for the baton command and for
// programs that take the store as configuration. A fence store remembers,
// per resource, the newest fencing token it has accepted and refuses older
// ones; it also records which scheduled runs are done. The stores
// themselves, with the checks inside the caller's transaction, are in
// fence/postgres and fence/sqlite.
//
// Store URLs:
//
//	postgres://user:password@host:5432/database?sslmode=disable   (also postgresql://)
//	sqlite:relative/path.db   sqlite:/absolute/path.db   sqlite:///absolute/path.db
//
// A PostgreSQL URL takes every parameter pgx accepts (sslmode,
// connect_timeout, ...). It may also carry the lock service's parameters
// (ttl, renew-every, request-timeout, drift and table), so that one URL can
// serve as both --backend and --fence; the store ignores them. Its tables
// are always baton_fence and baton_runs: table= names the lock service's
// table, not the fence's (fence/postgres.WithTable and WithRunsTable choose
// others in a program). A SQLite URL takes busy_timeout, a duration such as
// 10s (default 5s; from 1ms to SQLite's limit, about 24 days). It has no
// host or user (sqlite://host/x.db is refused, not read as a relative
// path), and a '%', '?' or '#' in its path is written %25, %3F or %23: a
// '#' would start a fragment, and is refused.
package fence

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
	"github.com/baton-go/baton/fence/postgres"
	"github.com/baton-go/baton/fence/sqlite"
	"github.com/baton-go/baton/internal/urlparam"
)

// Store is what the baton command needs from a fence store. Both
// *postgres.Store and *sqlite.Store implement it.
type Store interface {
	// Raise raises the fence for resource to token, or returns a
	// *baton.StaleTokenError if it has seen a newer token.
	baton.Fence
	// Newest returns the newest token accepted for resource; zero if none.
	Newest(ctx context.Context, resource string) (baton.Token, error)
	// List returns every fence, sorted by resource.
	List(ctx context.Context) ([]Entry, error)
	// Done reports whether run runID of resource is marked done.
	Done(ctx context.Context, resource, runID string) (bool, error)
	// MarkDone marks run runID of resource done, raising the fence to
	// token in the same transaction; a stale token writes nothing.
	MarkDone(ctx context.Context, resource, runID string, token baton.Token) error
	// Init creates the store's tables if they are missing.
	Init(ctx context.Context) error
	// Close frees the store's connections.
	Close() error
}

var (
	_ Store = (*postgres.Store)(nil)
	_ Store = (*sqlite.Store)(nil)
)

// Entry is one fence, as List returns it: its Resource, the newest Token
// it has accepted, and UpdatedAt, when it first accepted that token. It is
// the same type as postgres.Entry and sqlite.Entry.
type Entry = fencesql.Entry

// Option configures Open.
type Option func(*options)

type options struct{ create bool }

// WithCreate says whether Open creates the store's tables when they are
// missing, as `baton fence init` does. Default false: Open checks that they
// exist and otherwise fails with the store's *MissingTableError, whose
// message says to run `baton fence init --store URL`.
func WithCreate(create bool) Option { return func(o *options) { o.create = create } }

// Open connects to the fence store at rawURL: postgres:// or postgresql://
// for fence/postgres, sqlite: for fence/sqlite. An unknown scheme or a
// malformed URL is a *baton.OptionError; a store that cannot be reached
// returns an error wrapping baton.ErrUnavailable. Error messages never show
// the URL's password.
func Open(ctx context.Context, rawURL string, opts ...Option) (Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	u, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "sqlite" {
		path, sopts, err := sqliteURL(rawURL, u)
		if err != nil {
			return nil, err
		}
		s, err := sqlite.Open(ctx, path, append(sopts, sqlite.WithCreate(o.create))...)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := postgres.Open(ctx, stripLockParams(u), postgres.WithCreate(o.create))
	if err != nil {
		return nil, err
	}
	return s, nil
}

// CheckURL reports, without connecting, whether Open could take rawURL:
// nil for a URL whose scheme names a fence store, else the
// *baton.OptionError Open would return for a malformed URL or an
// unknown scheme. Open checks the rest of the URL.
func CheckURL(rawURL string) error {
	_, err := parse(rawURL)
	return err
}

// The example URL that baton.ParseURL's errors give, and the one a fence
// store's give in its place.
const (
	lockURLExample  = "such as etcd://127.0.0.1:2379"
	storeURLExample = "such as postgres://user@127.0.0.1:5432/database"
)

// parse parses rawURL and checks that its scheme names a fence store:
// postgres (or postgresql) or sqlite.
func parse(rawURL string) (*url.URL, error) {
	u, err := baton.ParseURL(rawURL)
	if err != nil {
		// ParseURL's example is a lock service's, which no fence store is.
		var oe *baton.OptionError
		if errors.As(err, &oe) {
			oe.Reason = strings.Replace(oe.Reason, lockURLExample, storeURLExample, 1)
		}
		return nil, err
	}
	switch u.Scheme {
	case "sqlite": // sqliteURL reads the rest
		return u, nil
	case "postgres", "postgresql":
		if _, err := urlparam.Query(u); err != nil {
			return nil, &baton.OptionError{Option: "fence store URL", Value: baton.Redact(rawURL), Reason: err.Error()}
		}
		return u, nil
	}
	return nil, &baton.OptionError{Option: "fence store URL", Value: baton.Redact(rawURL),
		Reason: fmt.Sprintf("has the unknown scheme %q; use postgres://user@host:port/database or sqlite:path", u.Scheme)}
}

// stripLockParams returns u, whose query parse has checked, without the
// lock service's parameters.
func stripLockParams(u *url.URL) string {
	q := u.Query()
	for _, p := range urlparam.Postgres {
		q.Del(p)
	}
	v := *u
	v.RawQuery = q.Encode()
	return v.String()
}

// sqliteURL returns the file path and options of a sqlite: URL.
func sqliteURL(rawURL string, u *url.URL) (string, []sqlite.Option, error) {
	bad := func(reason string) error {
		return &baton.OptionError{Option: "fence store URL", Value: baton.Redact(rawURL), Reason: reason}
	}
	// url.Parse would take these parts out of the path, or take the path
	// for a host's: refuse them rather than open another file.
	const how = "write sqlite:/absolute/path.db (or sqlite:///absolute/path.db) or sqlite:relative/path.db"
	switch {
	case strings.Contains(rawURL, "#"):
		return "", nil, bad("has a '#', which ends a URL's path and starts a fragment, so the file would be another; write a '#' in the path as %23")
	case u.User != nil:
		return "", nil, bad("has user info (user@), which a sqlite: URL does not take; " + how)
	case u.Host != "":
		return "", nil, bad(fmt.Sprintf("has the host %q, which a sqlite: URL does not take: the file is on this machine; %s", u.Host, how))
	}
	path := u.Path      // sqlite:/abs, sqlite:///abs
	if u.Opaque != "" { // sqlite:rel
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", nil, bad(err.Error())
		}
		path = p
	}
	if path == "" {
		return "", nil, bad("has no file path; write sqlite:path/to/fence.db")
	}
	var opts []sqlite.Option
	q, err := urlparam.Query(u)
	if err != nil {
		return "", nil, bad(err.Error())
	}
	if err := urlparam.Once(q); err != nil {
		return "", nil, bad(err.Error())
	}
	for k, vs := range q {
		switch k {
		case "busy_timeout":
			d, err := time.ParseDuration(vs[0])
			if err != nil {
				return "", nil, bad(fmt.Sprintf("has busy_timeout %q; write a duration such as 10s", vs[0]))
			}
			opts = append(opts, sqlite.WithBusyTimeout(d))
		default:
			return "", nil, bad(fmt.Sprintf("has the unknown parameter %q; sqlite: URLs take only busy_timeout", k))
		}
	}
	return path, opts, nil
}
