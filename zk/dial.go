package zk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/failkit"
	"github.com/baton-go/baton/internal/urlparam"
)

// Dial connects to the ZooKeeper servers (host:port) with the default
// Settings; see Settings.Dial.
func Dial(ctx context.Context, servers []string, opts ...baton.Option) (*baton.FencedLocker, error) {
	return Settings{}.Dial(ctx, servers, opts...)
}

// Dial connects to the ZooKeeper servers (host:port), asking for a session
// timeout equal to the TTL (baton.WithTTL; default 15s), and returns a
// FencedLocker that owns the connection: closing the Locker closes it,
// which ends the session and every node it holds. A server that is not a
// host:port, or is given twice, is a *baton.OptionError; a chroot, as in
// a Java connect string (zk1:2181/app), is the root: baton.WithPrefix.
//
// It waits, within the request timeout, for a session (servers that all
// refuse the connection, or cannot be routed to, are a
// *baton.UnavailableError as soon as each was dialed once, with their
// errors; one that takes the connection, or does not answer the dial, is
// waited for), and checks the session timeout the server granted: a
// server grants from 2 to 20 times its tickTime (unless minSessionTimeout
// and maxSessionTimeout say otherwise) and silently raises or lowers a
// request outside that range, which would make the local deadline wrong;
// Dial refuses that with a *baton.OptionError that names the limit. With s.Auth it adds the digest
// identity to the connection before any request. It lists the root, when
// it exists, and returns a *baton.OptionError when the root's ACL refuses
// the connection's identity (ZooKeeper accepts any digest identity and
// refuses only the requests that nodes' ACLs do not allow). The first
// acquisition counts its lease's deadline from the dial if it comes within
// RenewEvery of it, and otherwise waits about 3/10 of the session timeout
// for a renewal to settle the session (see the package doc).
func (s Settings) Dial(ctx context.Context, servers []string, opts ...baton.Option) (_ *baton.FencedLocker, err error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	// One log queue for the Dial and the Locker (see baton.WithLogger).
	opts = append(slices.Clip(opts), baton.WithLogger(cfg.Logger))
	defer asynclog.FlushFailed(&err, cfg.Logger) // no Locker.Close will
	if _, err := cleanRoot(cfg.Prefix); err != nil {
		return nil, err
	}
	if len(servers) == 0 {
		return nil, &baton.OptionError{Option: "ZooKeeper servers", Value: "[]", Reason: "give at least one host:port"}
	}
	servers = slices.Clone(servers)
	for i, hp := range servers {
		if _, _, err := net.SplitHostPort(hp); err != nil && !strings.ContainsAny(hp, "/,") && hp != "" {
			// A host alone: ZooKeeper's port, as go-zookeeper, the Java
			// client and kazoo default it.
			hp = net.JoinHostPort(strings.Trim(hp, "[]"), "2181")
			servers[i] = hp
		}
		if reason := checkServer(hp, servers[:i]); reason != "" {
			return nil, &baton.OptionError{Option: "ZooKeeper server", Value: baton.Printable(strconv.Quote(hp)), Reason: reason}
		}
	}
	where := "zk://" + strings.Join(servers, ",")
	cs := newConnState()
	tap := &logTap{log: cfg.Logger, cs: cs}
	dials := new(dialClock)
	reach := newReach(dials.dial)
	conn, events, err := zkgo.Connect(servers, cfg.TTL,
		zkgo.WithDialer(reach.dial),
		zkgo.WithHostProvider(reach),
		zkgo.WithLogger(tap),
		zkgo.WithLogInfo(true), // the granted session timeout is only in an info line
		zkgo.WithEventCallback(func(ev zkgo.Event) {
			if ev.Type == zkgo.EventSession {
				cs.record(ev.State)
			}
		}),
	)
	if err != nil {
		return nil, &baton.UnavailableError{Where: where, Err: err}
	}
	b, err := newBackend(conn, cs, s, opts, where)
	if err != nil {
		conn.Close()
		return nil, err
	}
	b.owned, b.events, b.dials = true, events, dials
	b.start()
	if err := b.handshake(ctx, reach.unreachable()); err != nil {
		_ = b.Close()
		return nil, err
	}
	return baton.NewFencedLocker(b, b.cfg), nil
}

// handshake waits for the first session and the timeout the server
// granted, checks it against the TTL, and authenticates. It gives up at
// once when unreachable gets an error: every server was dialed, and each
// refused the connection (see reach).
func (b *backend) handshake(ctx context.Context, unreachable <-chan error) error {
	t := time.NewTimer(b.cfg.RequestTimeout)
	defer t.Stop()
	for {
		v := b.observe()
		if v.connected() && v.timeout != 0 {
			if v.timeout != b.cfg.TTL {
				return b.timeoutError(v.timeout)
			}
			break
		}
		select {
		case <-v.changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		case err := <-unreachable:
			if ctx.Err() != nil { // both ready: the caller's cause wins, as it would have before
				return context.Cause(ctx)
			}
			return &baton.UnavailableError{Where: b.place(), Err: err}
		case <-t.C:
			if v.connected() {
				return &baton.UnavailableError{Where: b.place(), Err: errors.New("go-zookeeper did not report the session timeout the server granted; cannot check it against the TTL")}
			}
			return &baton.UnavailableError{Where: b.place(), Err: fmt.Errorf("no ZooKeeper server answered within %v", b.cfg.RequestTimeout)}
		}
	}
	if a := b.set.Auth; a != nil {
		_, err := call(b, ctx, func() (struct{}, error) { return struct{}{}, b.conn.AddAuth("digest", a.auth()) })
		if err != nil {
			return b.fail(ctx, "authenticate as "+a.String(), err)
		}
	}
	return b.probeRoot(ctx)
}

// probeRoot lists the root, when it exists, so that an identity its ACL
// refuses is told at once, as a setting to change: ZooKeeper accepts any
// digest identity and refuses only the requests its nodes' ACLs do not
// allow.
func (b *backend) probeRoot(ctx context.Context) error {
	_, err := call(b, ctx, func() ([]string, error) {
		names, _, err := b.conn.Children(b.root)
		return names, err
	})
	switch {
	case err == nil, errors.Is(err, zkgo.ErrNoNode):
		return nil
	case errors.Is(err, zkgo.ErrNoAuth):
		return &baton.OptionError{Option: "ZooKeeper credentials for", Value: b.place() + b.root, Reason: "the ACL of " + b.root + " refuses " + b.identity()}
	}
	return b.fail(ctx, "list "+b.root, err)
}

// reach is go-zookeeper's host provider (its own DNSHostProvider) and the
// dialer under it, which tells Dial when every server has been dialed once
// and each refused the connection (or the host or network was
// unreachable): a server that is not there is said at once, with the
// dials' errors, as the other backends do, not after the request timeout.
// A dial that timed out (a lost SYN is sent again only after a second,
// go-zookeeper's connect timeout) may reach a server on the next try, and
// a server that took the connection and then failed the session's
// handshake (an ensemble still forming its quorum) may yet answer: either
// is waited for, up to the request timeout.
type reach struct {
	zkgo.DNSHostProvider
	dialer zkgo.Dialer

	mu    sync.Mutex
	maybe bool             // a dial succeeded or timed out: a server may be there
	errs  map[string]error // each refusing server's last dial error
	order []string         // the refusing servers, in the order first refused
	told  bool             // done has had its error
	done  chan error       // gets the errors once every server refused (buffered)
}

func newReach(dialer zkgo.Dialer) *reach {
	return &reach{dialer: dialer, errs: make(map[string]error), done: make(chan error, 1)}
}

// dial dials through the dialer, noting the outcome.
func (r *reach) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := r.dialer(network, address, timeout)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil, !refusal(err):
		r.maybe = true
	default:
		if _, ok := r.errs[address]; !ok {
			r.order = append(r.order, address)
		}
		r.errs[address] = err
	}
	return c, err
}

// refusal reports whether a dial's err says that nothing is there to
// reach: the connection refused, no route to the host or network, or an
// address this machine cannot dial from (::1 for localhost where IPv6 is
// off).
func refusal(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EADDRNOTAVAIL, syscall.EAFNOSUPPORT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Next implements zkgo.HostProvider: go-zookeeper's provider says
// retryStart when it has gone through every server without a session.
func (r *reach) Next() (string, bool) {
	server, retryStart := r.DNSHostProvider.Next()
	if retryStart {
		r.mu.Lock()
		if !r.maybe && !r.told && len(r.order) > 0 {
			errs := make([]string, len(r.order))
			for i, a := range r.order {
				errs[i] = r.errs[a].Error()
			}
			r.done <- failkit.Reworded("cannot reach any server: "+strings.Join(errs, "; "), r.errs[r.order[len(r.order)-1]])
			r.told = true
		}
		r.mu.Unlock()
	}
	return server, retryStart
}

// unreachable returns the channel that gets reach's error, once.
func (r *reach) unreachable() <-chan error { return r.done }

// logTap receives go-zookeeper's log lines: it passes them on to the
// Logger at debug level, and reads from one of them the session timeout
// the server granted, which go-zookeeper does not report otherwise.
type logTap struct {
	log *slog.Logger
	cs  *connState
}

// authenticatedFormat is go-zookeeper's log line after each handshake
// (conn.go, Conn.loop), with the session id and the granted timeout in ms.
const authenticatedFormat = "authenticated: id=%d, timeout=%d"

// Printf implements zk.Logger.
func (t *logTap) Printf(format string, args ...any) {
	if format == authenticatedFormat && len(args) == 2 {
		if ms, ok := args[1].(int32); ok {
			t.cs.setTimeout(time.Duration(ms) * time.Millisecond)
		}
	}
	t.log.Debug("go-zookeeper: " + fmt.Sprintf(format, args...))
}

// Open implements baton.Opener for URLs of the form
//
//	zk://[user:password@]host:port[,host:port...][/root][?session-timeout=15s]
//
// The user and password, when given, are a digest identity (and the nodes
// baton creates are then readable and writable by that identity only). The
// path is the root under which locks live (default DefaultRoot). The query
// may set session-timeout (the TTL), request-timeout, drift (Go durations)
// and
// on-suspend=cancel|continue (Settings.ContinueWhileSuspended); options
// passed in opts override the URL's.
func Open(ctx context.Context, u *url.URL, opts ...baton.Option) (*baton.Locker, error) {
	servers, set, urlOpts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	fl, err := set.Dial(ctx, servers, append(urlOpts, opts...)...)
	if err != nil {
		return nil, urlTTL(u, err)
	}
	return fl.Locker(), nil
}

// urlTTL names the URL's session-timeout in err, when err is about the
// TTL it gave (and not a TTL option given after it): the URL does not
// say "ttl".
func urlTTL(u *url.URL, err error) error {
	var oe *baton.OptionError
	st := u.Query().Get("session-timeout")
	if st == "" || !errors.As(err, &oe) || oe.Option != "ttl" {
		return err
	}
	if d, perr := time.ParseDuration(st); perr == nil && d.String() == oe.Value {
		oe.Option = "session-timeout"
	}
	return err
}

// checkServer says what is wrong with hp, one of the servers given to
// Dial or in a URL, after those in earlier: "" when it is a host:port not
// among them. A Java connect string's chroot (zk1:2181/app) is not part
// of a server: it is the root.
func checkServer(hp string, earlier []string) string {
	if i := strings.IndexByte(hp, '/'); i >= 0 {
		chroot := hp[i:]
		root := chroot + DefaultRoot // where the locks are under the chroot
		return fmt.Sprintf("is not a host:port: a chroot (%s) is not part of a server; put it before the root, with baton.WithPrefix(%q) or the URL's path (zk://host:port%s), so that the locks are where they are under the chroot", baton.Printable(chroot), root, baton.Printable(root))
	}
	if strings.Contains(hp, ",") {
		return "is not a host:port: give each server as a host:port of its own"
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" {
		return "is not a host:port: want host:port, such as zk1:2181"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "has a bad port: the port must be 1 to 65535"
	}
	if slices.Contains(earlier, hp) {
		return "is given twice"
	}
	return ""
}

// ParseURL turns a zk:// URL (see Open) into the servers, the Settings and
// baton's options. Its errors are *baton.OptionError, on one line, and
// never contain the password.
func ParseURL(u *url.URL) (servers []string, set Settings, opts []baton.Option, err error) {
	bad := func(reason string) error {
		return &baton.OptionError{Option: "ZooKeeper URL", Value: baton.Redact(u.String()), Reason: reason}
	}
	if u.Scheme != "zk" {
		return nil, set, nil, bad(`scheme must be "zk"`)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, set, nil, bad("want zk://host:port[,host:port][/root]")
	}
	for _, hp := range strings.Split(u.Host, ",") {
		if reason := checkServer(hp, servers); reason != "" {
			return nil, set, nil, bad(fmt.Sprintf("server %s %s", baton.Printable(strconv.Quote(hp)), reason))
		}
		servers = append(servers, hp)
	}
	if u.User != nil {
		pw, ok := u.User.Password()
		if u.User.Username() == "" || !ok {
			return nil, set, nil, bad("digest authentication needs both a user and a password: zk://user:password@host:port")
		}
		set.Auth = &Digest{User: u.User.Username(), Password: pw}
	}
	if p := u.Path; p != "" && p != "/" {
		if _, err := cleanRoot(p); err != nil {
			var oe *baton.OptionError
			if errors.As(err, &oe) {
				return nil, set, nil, bad("root " + oe.Value + " " + oe.Reason)
			}
			return nil, set, nil, bad(err.Error())
		}
		opts = append(opts, baton.WithPrefix(p))
	}
	q, err := urlparam.Query(u)
	if err != nil {
		return nil, set, nil, bad(err.Error())
	}
	if err := urlparam.Once(q); err != nil {
		return nil, set, nil, bad(err.Error())
	}
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "session-timeout":
			d, err := urlparam.Positive(k, v, "4s")
			if err != nil {
				return nil, set, nil, bad(err.Error())
			}
			opts = append(opts, baton.WithTTL(d))
		case "request-timeout", "drift":
			opt, _, err := urlparam.Duration(k, v)
			if err != nil {
				return nil, set, nil, bad(err.Error())
			}
			opts = append(opts, opt)
		case "on-suspend":
			switch v {
			case "cancel":
				set.ContinueWhileSuspended = false
			case "continue":
				set.ContinueWhileSuspended = true
			default:
				return nil, set, nil, bad(fmt.Sprintf("on-suspend=%s: want cancel (the default) or continue", baton.Printable(strconv.Quote(v))))
			}
		default:
			return nil, set, nil, bad(fmt.Sprintf("unknown parameter %s; known: session-timeout, request-timeout, drift, on-suspend", baton.Printable(strconv.Quote(k))))
		}
	}
	return servers, set, opts, nil
}
