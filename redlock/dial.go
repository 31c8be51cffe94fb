package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
)

// DefaultPort is used for a node given without a port.
const DefaultPort = "6379"

// Open implements baton.Opener for URLs of the form
//
//	redlock://[user:password@]host:port,host:port,host:port[/db][?ttl=15s&renew-every=5s&request-timeout=5s&prefix=baton:lock:]
//
// naming an odd number (at least 3) of independent Redis nodes, all with
// the same credentials and database. It connects to each, checks that a
// majority answers PING, and returns a Locker that owns the clients.
// Options in opts override those in the URL.
func Open(ctx context.Context, u *url.URL, opts ...baton.Option) (*baton.Locker, error) {
	ros, urlOpts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	opts = append(urlOpts, opts...)
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	clients := make([]goredis.UniversalClient, len(ros))
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for i, o := range ros {
		o.ContextTimeoutEnabled = true
		o.DialTimeout = cfg.RequestTimeout
		o.ReadTimeout = cfg.RequestTimeout
		o.WriteTimeout = cfg.RequestTimeout
		o.MaxRetries = -1   // each attempt is a Redlock round; the round retries
		o.DialerRetries = 1 // a dead node must fail within the node timeout
		clients[i] = goredis.NewClient(o)
	}
	b, err := newBackend(clients, opts)
	if err != nil {
		closeAll()
		return nil, err
	}
	_, errs := each(ctx, b, cfg.RequestTimeout, func(ctx context.Context, n *node) (struct{}, error) {
		if err := n.client.Ping(ctx).Err(); err != nil {
			return struct{}{}, n.err("PING", err)
		}
		return struct{}{}, nil
	}, nil)
	if _, failed := count(errs); failed > len(clients)-b.quorum {
		b.bg.Wait()
		closeAll()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, &baton.UnavailableError{Where: b.where, Err: fmt.Errorf("a majority of nodes did not answer PING within %v: %w", cfg.RequestTimeout, errors.Join(errs...))}
	}
	b.owned = true
	return baton.NewLocker(b, b.cfg), nil
}

// ParseURL turns a redlock:// URL into one set of client options per node
// and baton options.
func ParseURL(u *url.URL) ([]*goredis.Options, []baton.Option, error) {
	bad := func(reason string) error {
		return &baton.OptionError{Option: "redlock URL", Value: baton.Printable(u.Redacted()), Reason: reason}
	}
	if u.Scheme != "redlock" {
		return nil, nil, bad(`scheme must be "redlock"`)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, nil, bad("want redlock://host:port,host:port,host:port")
	}
	hosts := strings.Split(u.Host, ",")
	if n := len(hosts); n < 3 || n%2 == 0 {
		return nil, nil, bad(fmt.Sprintf("%d nodes: Redlock needs an odd number of independent nodes, at least 3", n))
	}
	db := 0
	if p := strings.Trim(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || strconv.Itoa(n) != p {
			return nil, nil, bad(fmt.Sprintf("path %q: want a database number such as /0", u.Path))
		}
		db = n
	}
	var user, pass string
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	seen := map[string]bool{}
	var out []*goredis.Options
	for _, h := range hosts {
		addr, err := hostPort(h)
		if err != nil {
			return nil, nil, bad(fmt.Sprintf("node %s: %v", strconv.Quote(h), err))
		}
		if seen[addr] {
			return nil, nil, bad(fmt.Sprintf("node %s named twice: the nodes must be independent", addr))
		}
		seen[addr] = true
		out = append(out, &goredis.Options{Addr: addr, DB: db, Username: user, Password: pass})
	}
	opts, err := queryOptions(u.Query())
	if err != nil {
		return nil, nil, bad(err.Error())
	}
	return out, opts, nil
}

// hostPort checks a node's host[:port] and adds the default port.
func hostPort(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		host, port = strings.Trim(h, "[]"), DefaultPort
		if strings.ContainsAny(host, "[]") {
			return "", errors.New("bad host")
		}
	}
	if host == "" {
		return "", errors.New("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("bad port %s", strconv.Quote(port))
	}
	return net.JoinHostPort(host, port), nil
}

// queryOptions reads the query parameters.
func queryOptions(q url.Values) ([]baton.Option, error) {
	var opts []baton.Option
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "ttl", "renew-every", "request-timeout", "drift":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%s is not a duration such as 15s", k, strconv.Quote(v))
			}
			switch k {
			case "ttl":
				opts = append(opts, baton.WithTTL(d))
			case "renew-every":
				opts = append(opts, baton.WithRenewEvery(d))
			case "request-timeout":
				opts = append(opts, baton.WithRequestTimeout(d))
			case "drift":
				opts = append(opts, baton.WithDrift(d))
			}
		case "prefix":
			opts = append(opts, baton.WithPrefix(v))
		default:
			return nil, fmt.Errorf("unknown parameter %s; known: ttl, renew-every, request-timeout, drift, prefix", strconv.Quote(k))
		}
	}
	return opts, nil
}
