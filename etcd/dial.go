package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/failkit"
	"github.com/baton-go/baton/internal/urlparam"
)

// Dial connects to the etcd endpoints (host:port or http://host:port), checks
// that the cluster answers within the request timeout, and returns a
// FencedLocker that owns the client: closing the Locker closes it. When
// every endpoint fails its connection (refused, or cut short by a server
// that does not speak gRPC), Dial returns a *baton.UnavailableError saying
// so at once; an endpoint still connecting, or a cluster without a leader,
// is waited for up to the request timeout.
func Dial(ctx context.Context, endpoints []string, opts ...baton.Option) (_ *baton.FencedLocker, err error) {
	return dial(ctx, clientv3.Config{Endpoints: endpoints}, opts)
}

// keepAliveTime is how long a connection Dial made may hear nothing
// before it is pinged: twice etcd's default --grpc-keepalive-min-time
// (5s), below which a server ends a connection that pings too often.
const keepAliveTime = 10 * time.Second

func dial(ctx context.Context, cc clientv3.Config, opts []baton.Option) (*baton.FencedLocker, error) {
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	// One log queue for the Dial and the Locker (see baton.WithLogger).
	opts = append(slices.Clip(opts), baton.WithLogger(cfg.Logger))
	defer asynclog.FlushFailed(&err, cfg.Logger) // no Locker.Close will
	if len(cc.Endpoints) == 0 {
		return nil, &baton.OptionError{Option: "etcd endpoints", Value: "[]", Reason: "give at least one host:port"}
	}
	where := "etcd://" + strings.Join(stripSchemes(cc.Endpoints), ",")
	cc.DialTimeout = cfg.RequestTimeout
	// gRPC keep-alive: a connection that hears nothing for keepAliveTime
	// is pinged, and closed when the ping is not answered within the
	// request timeout; its watches then go on over a new one. Without it,
	// a connection gone silent (a host that died, a NAT or firewall that
	// dropped its state) kept the client's watches, all on one stream,
	// waiting for as long as TCP takes to give up: minutes, and waiters
	// with them.
	cc.DialKeepAliveTime = keepAliveTime
	cc.DialKeepAliveTimeout = cfg.RequestTimeout
	cc.Logger = zap.NewNop()
	cc.Context = ctx
	if cc.Username != "" {
		// clientv3.New authenticates first, and waits for a connection to
		// do it: a client without the credentials looks first.
		if err := reachable(ctx, cc, cfg.Prefix); err != nil {
			return nil, &baton.UnavailableError{Where: where, Err: err}
		}
	}
	client, err := clientv3.New(cc)
	if err != nil {
		if err := refused(err, where, "", ""); err != nil {
			return nil, err
		}
		return nil, &baton.UnavailableError{Where: where, Err: err}
	}
	b, err := newBackend(client, opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	// clientv3.New does not wait for a connection; one read does. It reads
	// under the prefix, the only keys a user limited to it may read. The
	// first read does not wait for a connection every endpoint failed to
	// make (refused, or no etcd on it): that is said at once, as the redis
	// and postgres backends do, not after the request timeout.
	pctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	err = probe(pctx, client, b.prefix)
	var unreachable error
	if err != nil && ctx.Err() == nil {
		// Anything but no connection or a refusal (an error of the
		// server's own, such as no leader) is waited out, as the client's
		// reads retry it; a refusal is said below, not asked again.
		if unreachable = connError(err, len(cc.Endpoints)); unreachable == nil && refused(err, where, b.prefix, "") == nil {
			_, err = client.Get(pctx, b.prefix, clientv3.WithCountOnly())
		}
	}
	answered := pctx.Err() == nil // an error before the deadline is an answer
	cancel()
	if err != nil {
		b.bgStop()
		_ = client.Close()
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case unreachable != nil:
			return nil, &baton.UnavailableError{Where: where, Err: unreachable}
		}
		if err := refused(err, where, b.prefix, "may not read keys under it"); err != nil {
			return nil, err
		}
		if answered {
			return nil, &baton.UnavailableError{Where: where, Err: fmt.Errorf("a read under %s failed: %w", b.prefix, err)}
		}
		return nil, &baton.UnavailableError{Where: where, Err: fmt.Errorf("no answer within %v: %w", cfg.RequestTimeout, err)}
	}
	b.owned = true
	b.where = where
	return baton.NewFencedLocker(b, b.cfg), nil
}

// Open implements baton.Opener for URLs of the form
//
//	etcd://[user:password@]host:port[,host:port...][/prefix/]?[ttl=15s]
//
// The path, when given, is the key prefix; the query may set ttl,
// renew-every, request-timeout and drift (Go durations), which options
// passed in opts override.
func Open(ctx context.Context, u *url.URL, opts ...baton.Option) (*baton.Locker, error) {
	cc, urlOpts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	fl, err := dial(ctx, cc, append(urlOpts, opts...))
	if err != nil {
		return nil, err
	}
	return fl.Locker(), nil
}

// ParseURL turns an etcd:// URL into a client configuration and options.
func ParseURL(u *url.URL) (clientv3.Config, []baton.Option, error) {
	var cc clientv3.Config
	bad := func(reason string) error {
		return &baton.OptionError{Option: "etcd URL", Value: baton.Redact(u.String()), Reason: reason}
	}
	if u.Scheme != "etcd" {
		return cc, nil, bad(`scheme must be "etcd"`)
	}
	if u.Opaque != "" || u.Host == "" {
		return cc, nil, bad("want etcd://host:port[,host:port]")
	}
	for _, hp := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || host == "" {
			return cc, nil, bad(fmt.Sprintf("endpoint %q: want host:port", hp))
		}
		if _, ok := urlparam.Port(port); !ok {
			return cc, nil, bad(fmt.Sprintf("endpoint %q: port must be 1 to 65535", hp))
		}
		cc.Endpoints = append(cc.Endpoints, "http://"+hp)
	}
	if u.User != nil {
		cc.Username = u.User.Username()
		cc.Password, _ = u.User.Password()
		// The client authenticates only with both: one alone would be
		// dropped without a word, and the connection left unauthenticated.
		if cc.Username == "" || cc.Password == "" {
			return cc, nil, bad("give both a user name and a password (etcd://user:password@host:port), or neither: etcd authenticates only with both")
		}
	}
	var opts []baton.Option
	if p := u.Path; p != "" && p != "/" {
		opts = append(opts, baton.WithPrefix(p))
	}
	q, err := urlparam.Query(u)
	if err != nil {
		return cc, nil, bad(err.Error())
	}
	if err := urlparam.Once(q); err != nil {
		return cc, nil, bad(err.Error())
	}
	for k, vs := range q {
		v := vs[0]
		opt, ok, err := urlparam.Duration(k, v)
		switch {
		case err != nil:
			return cc, nil, bad(err.Error())
		case !ok:
			return cc, nil, bad(fmt.Sprintf("unknown parameter %s; known: %s", strconv.Quote(baton.Printable(k)), strings.Join(urlparam.Durations, ", ")))
		}
		opts = append(opts, opt)
	}
	return cc, opts, nil
}

// refused returns a *baton.OptionError when err is the server's refusal of
// the client's credentials, or of its access to prefix (when not ""), which
// denied says in words ("may not read keys under it"): settings to change,
// not a server to wait for. Otherwise it returns nil.
func refused(err error, where, prefix, denied string) error {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrGRPCAuthFailed):
		return &baton.OptionError{Option: "etcd credentials for", Value: where, Reason: "the server refused the user:password; check them"}
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		return &baton.OptionError{Option: "etcd credentials for", Value: where, Reason: "the server has authentication on and none were given; write etcd://user:password@host:port"}
	case prefix != "" && (errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied)):
		return &baton.OptionError{Option: "prefix", Value: prefix, Reason: "the etcd user " + denied + " at " + where + "; grant its role readwrite on the prefix, or use a prefix it has"}
	}
	return nil
}

// probe reads under prefix (a count, no values) without waiting for a
// connection: gRPC fails the call at once when every endpoint's connection
// has failed, and waits while one is still being made. It goes through the
// client's connection, so its credentials and interceptors, but not through
// its KV, which would retry a failed connection until ctx ends and then
// report the deadline alone.
func probe(ctx context.Context, client *clientv3.Client, prefix string) error {
	req := &pb.RangeRequest{Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)), CountOnly: true}
	_, err := pb.NewKVClient(client.ActiveConnection()).Range(ctx, req, grpc.WaitForReady(false))
	return err
}

// reachable returns connError's error when a client of cc, without its
// credentials, finds that no endpoint can be connected to, and an error
// saying so when its read got no answer within cc.DialTimeout; nil
// otherwise (also when the server refuses the client without
// credentials).
func reachable(ctx context.Context, cc clientv3.Config, key string) error {
	cc.Username, cc.Password = "", ""
	if key == "" {
		key = "/"
	}
	client, err := clientv3.New(cc)
	if err != nil {
		return nil // the client with them will say
	}
	defer client.Close()
	pctx, cancel := context.WithTimeout(ctx, cc.DialTimeout)
	defer cancel()
	err = probe(pctx, client, key)
	if cerr := connError(err, len(cc.Endpoints)); cerr != nil {
		return cerr
	}
	if err != nil && ctx.Err() == nil && pctx.Err() != nil {
		// Authenticating would wait as long again.
		return fmt.Errorf("no answer within %v: %w", cc.DialTimeout, err)
	}
	return nil
}

// dialFailed is gRPC's "Error while dialing" before the dial's own error.
const dialFailed = "Error while dialing: "

// connError returns, for a probe that failed because none of n endpoints
// could be connected to, the cause in a line ("cannot reach the server:
// dial tcp ...: connection refused"), wrapping err; nil for any other
// error. gRPC gives the cause only as text (status Unavailable,
// "connection error: desc = ..."), which is kept whole where its form is
// not the expected one, and for one endpoint only.
func connError(err error, n int) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || !strings.HasPrefix(st.Message(), "connection error") {
		return nil
	}
	msg := st.Message()
	if i := strings.Index(msg, dialFailed); i >= 0 {
		msg = strings.TrimSuffix(msg[i+len(dialFailed):], `"`)
	}
	if n > 1 {
		return failkit.Reworded(fmt.Sprintf("cannot reach any of the %d endpoints (one of them: %s)", n, msg), err)
	}
	return failkit.Reworded("cannot reach the server: "+msg, err)
}
