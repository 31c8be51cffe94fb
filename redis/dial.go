package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/rediskit"
)

// DefaultPort is used when a redis:// URL names a host without a port.
const DefaultPort = rediskit.DefaultPort

// Open implements baton.Opener for URLs of the form
//
//	redis://[user:password@]host[:port][/db][?ttl=15s&renew-every=5s&request-timeout=5s&drift=2ms&prefix=baton:lock:]
//
// It connects, checks that the server answers PING within the request
// timeout, and returns a Locker that owns the client: closing the Locker
// closes it. Options in opts override those in the URL.
func Open(ctx context.Context, u *url.URL, opts ...baton.Option) (_ *baton.Locker, err error) {
	ro, urlOpts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	opts = append(urlOpts, opts...)
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	// One log queue for the Dial and the Locker (see baton.WithLogger).
	opts = append(slices.Clip(opts), baton.WithLogger(cfg.Logger))
	defer asynclog.FlushFailed(&err, cfg.Logger) // no Locker.Close will
	clientOptions(ro, cfg)
	client := goredis.NewClient(ro)
	if err := ping(ctx, client, cfg.RequestTimeout); err != nil {
		_ = client.Close()
		return nil, err
	}
	b, err := newBackend(client, opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	b.owned = true
	return baton.NewLocker(b, b.cfg), nil
}

// clientOptions sets the client options baton relies on for a client it
// makes itself: context deadlines honoured on every command, and dial,
// read and write timeouts of the request timeout.
func clientOptions(o *goredis.Options, cfg baton.Config) {
	o.ContextTimeoutEnabled = true
	o.DialTimeout = cfg.RequestTimeout
	o.ReadTimeout = cfg.RequestTimeout
	o.WriteTimeout = cfg.RequestTimeout
	o.MaxRetries = -1   // the keeper retries renewals and the waiter its attempts, within their deadlines
	o.DialerRetries = 1 // a refused connection is reported at once, not after five tries
}

// ping checks that client's server answers within timeout, and returns a
// *baton.UnavailableError naming it otherwise (or the cause of ctx), or a
// *baton.OptionError when the server refused the URL's database number or
// credentials. A replica (see rediskit.Role), which would refuse every
// acquisition with READONLY, is unavailable, as it is for a while after a
// failover behind the address.
func ping(ctx context.Context, client *goredis.Client, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	o := client.Options()
	where := fmt.Sprintf("redis://%s/%d", o.Addr, o.DB)
	err := client.Ping(pctx).Err()
	switch {
	case err == nil:
		if rediskit.Role(pctx, client) == "replica" {
			return rediskit.ReplicaError(where)
		}
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case rediskit.Refused(err):
		return &baton.OptionError{Option: "redis URL", Value: where, Reason: fmt.Sprintf("the server refused the connection (%v): check the database number and the user:password", err)}
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		return &baton.UnavailableError{Where: where, Err: fmt.Errorf("PING answered with an error: %w", err)}
	}
	if !rediskit.TimedOut(err) && !errors.Is(err, context.DeadlineExceeded) {
		// Refused or reset at once: no wait to speak of.
		return &baton.UnavailableError{Where: where, Err: fmt.Errorf("cannot reach the server: %w", err)}
	}
	return &baton.UnavailableError{Where: where, Err: fmt.Errorf("no answer to PING within %v: %w", timeout, err)}
}

// ParseURL turns a redis:// URL into client options and baton options.
// It refuses a user name without a password (redis://app@host), which
// go-redis would run as the default user (see rediskit.Credentials);
// a password alone (redis://:pw@host) is the default user's.
func ParseURL(u *url.URL) (*goredis.Options, []baton.Option, error) {
	bad := func(reason string) error {
		return &baton.OptionError{Option: "redis URL", Value: baton.Redact(u.String()), Reason: reason}
	}
	if u.Scheme != "redis" {
		return nil, nil, bad(`scheme must be "redis"`)
	}
	const want = "want redis://[user:password@]host[:port][/db]"
	if u.Opaque != "" || u.Host == "" {
		return nil, nil, bad(want)
	}
	if strings.Contains(u.Host, ",") {
		return nil, nil, bad(want + "; for several nodes, use redlock://")
	}
	addr, err := rediskit.HostPort(u.Host)
	if err != nil {
		return nil, nil, bad(err.Error())
	}
	o := &goredis.Options{Addr: addr}
	if o.Username, o.Password, err = rediskit.Credentials(u); err != nil {
		return nil, nil, bad(err.Error())
	}
	if o.DB, err = rediskit.DB(u.Path); err != nil {
		return nil, nil, bad(err.Error())
	}
	opts, err := rediskit.URLOptions(u)
	if err != nil {
		return nil, nil, bad(err.Error())
	}
	return o, opts, nil
}
