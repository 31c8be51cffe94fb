package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/pgkit"
	"github.com/baton-go/baton/internal/urlparam"
)

// Dial connects to the PostgreSQL database at dsn (a postgres:// URL or a
// key=value string, as pgx accepts), checks that it answers within the
// request timeout, and returns a FencedLocker that owns its pool: closing
// the Locker closes it. Like New, it writes nothing to the database: the
// Locker's first Acquire, TryAcquire or Observe creates the lock tables if
// they are missing. Unless dsn sets application_name, the Locker's
// connections carry "baton HOLDER", so pg_stat_activity shows whose they
// are. Unless it sets
// statement_timeout, the server cancels any of the Locker's statements
// after half the request timeout (baton.WithRequestTimeout), so that an
// acquisition the Locker gave up on cannot take a lease later (a renewal,
// given up sooner, at the lease's local deadline, can still extend the
// row up to that timeout after it began, for a lease its holder no longer
// uses: see the package documentation);
// it is SET on each new connection, as is default_transaction_isolation
// to READ COMMITTED, which the lock's statements need whatever the
// database's or the role's default. Behind a pooler such as PgBouncer,
// use session pooling: waiters LISTEN, and session settings must stay
// with the connection that set them.
func Dial(ctx context.Context, dsn string, opts ...baton.Option) (_ *baton.FencedLocker, err error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, &baton.OptionError{Option: "PostgreSQL URL", Value: baton.Redact(dsn), Reason: pgkit.ParseReason(err)}
	}
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	// One log queue for the Dial and the Locker (see baton.WithLogger).
	opts = append(slices.Clip(opts), baton.WithLogger(cfg.Logger))
	defer asynclog.FlushFailed(&err, cfg.Logger) // no Locker.Close will
	if err := checkHolder(cfg.Holder); err != nil {
		return nil, err
	}
	cc := pcfg.ConnConfig
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = appName(cfg.Holder)
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = cfg.RequestTimeout
	}
	// SET, not startup parameters, which a pooler such as PgBouncer
	// refuses unless told to ignore them. The lock's statements need READ
	// COMMITTED, whatever the database's or the role's default (see
	// checkIsolation).
	set := "SET default_transaction_isolation = 'read committed'"
	if ms, ok := statementTimeout(cc.RuntimeParams, cfg.RequestTimeout); ok {
		set += "; SET statement_timeout = " + strconv.FormatInt(ms, 10)
	}
	after := pcfg.AfterConnect
	pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, c); err != nil {
				return err
			}
		}
		_, err := c.Exec(ctx, set)
		return err
	}
	w := where(&cc.Config)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, &baton.UnavailableError{Where: w, Err: err}
	}
	// pgxpool connects lazily; one round trip says whether anyone answers.
	pctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if advice, cause := pgkit.Refusal(err); advice != "" {
			return nil, &baton.OptionError{Option: "PostgreSQL URL", Value: baton.Redact(dsn), Reason: fmt.Sprintf("the server refused it (%v): %s", cause, advice)}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v: %w", cfg.RequestTimeout, err)
		}
		return nil, &baton.UnavailableError{Where: w, Err: err}
	}
	b, err := newBackend(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.owned = true
	return baton.NewFencedLocker(b, b.cfg), nil
}

// statementTimeout is the statement_timeout, in milliseconds, that Dial
// sets on each of its pool's connections: half the request timeout. ok is
// false when the DSN's session parameters set it already (also in options,
// as -c statement_timeout=...), which then stands. The client
// gives up on a statement after the request timeout, but the server does
// not know: a statement waiting for a lock row (behind a long transaction,
// a stalled server) would run when the row is free and commit what nobody
// waits for any more (a lease taken for an Acquire that already failed).
// With the timeout, the server cancels such a statement while its client
// still waits for the answer, and the client learns that it failed. A
// renewal's client gives up sooner, at the lease's local deadline, which
// can come well within the timeout (under a second after the send at
// MinTTL): such a renewal can still commit up to the timeout after it
// began, keeping the row taken for another TTL for a holder that has
// stopped; Release frees it by its token. A batch of two statements (lock
// the row, then act) waits in the first; the second runs when the first
// is done, well within the other half.
func statementTimeout(params map[string]string, requestTimeout time.Duration) (ms int64, ok bool) {
	if _, set := params["statement_timeout"]; set || strings.Contains(params["options"], "statement_timeout") {
		return 0, false
	}
	return max(requestTimeout/2, time.Millisecond).Milliseconds(), true
}

// appName is the default application_name: "baton HOLDER", cut to
// PostgreSQL's 63 bytes.
func appName(holder string) string {
	s := "baton " + holder
	for len(s) > maxIdentLen {
		s = s[:len(s)-1]
	}
	return strings.ToValidUTF8(s, "")
}

// Open implements baton.Opener for URLs of the form
//
//	postgres://[user[:password]@]host[:port]/database[?param=value&...]
//	postgresql://...
//
// baton's own parameters are ttl, renew-every, request-timeout and drift
// (Go durations such as 15s) and table (the lease table, as baton.WithPrefix);
// options passed in opts override them. Every other parameter (sslmode,
// connect_timeout, application_name, ...) goes to pgx as it is.
func Open(ctx context.Context, u *url.URL, opts ...baton.Option) (*baton.Locker, error) {
	dsn, urlOpts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	fl, err := Dial(ctx, dsn, append(urlOpts, opts...)...)
	if err != nil {
		return nil, err
	}
	return fl.Locker(), nil
}

// ParseURL splits a postgres:// or postgresql:// URL into the DSN for pgx,
// without baton's own parameters, and the options those parameters set.
// Its errors are *baton.OptionError and never show the password.
func ParseURL(u *url.URL) (dsn string, opts []baton.Option, err error) {
	bad := func(reason string) error {
		return &baton.OptionError{Option: "PostgreSQL URL", Value: baton.Redact(u.String()), Reason: reason}
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", nil, bad(`scheme must be "postgres" or "postgresql"`)
	}
	if u.Opaque != "" {
		return "", nil, bad("want postgres://[user@]host[:port]/database")
	}
	q, err := urlparam.Query(u)
	if err != nil {
		return "", nil, bad(err.Error())
	}
	if err := urlparam.Once(q, urlparam.Postgres...); err != nil {
		return "", nil, bad(err.Error())
	}
	for k, vs := range q {
		if !slices.Contains(urlparam.Postgres, k) { // the rest is pgx's
			continue
		}
		v := vs[0]
		q.Del(k)
		if k == "table" {
			if _, err := newNames(v); err != nil {
				var oe *baton.OptionError
				if errors.As(err, &oe) {
					return "", nil, bad("table=" + oe.Value + " " + oe.Reason)
				}
				return "", nil, bad(err.Error())
			}
			opts = append(opts, baton.WithPrefix(v))
			continue
		}
		opt, _, err := urlparam.Duration(k, v)
		if err != nil {
			return "", nil, bad(err.Error())
		}
		opts = append(opts, opt)
	}
	rest := *u
	rest.RawQuery = q.Encode()
	dsn = rest.String()
	if _, err := pgxpool.ParseConfig(dsn); err != nil {
		return "", nil, bad(pgkit.ParseReason(err))
	}
	return dsn, opts, nil
}
