package redlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/rediskit"
)

// DefaultPort is used for a node given without a port.
const DefaultPort = rediskit.DefaultPort

// Open implements baton.Opener for URLs of the form
//
//	redlock://[user:password@]host:port,host:port,host:port[/db][?ttl=15s&renew-every=5s&request-timeout=5s&drift=2ms&prefix=baton:lock:]
//
// naming an odd number (at least 3) of independent Redis nodes, all with
// the same credentials and database. It connects to each, checks that a
// majority answers and that no two nodes are one server (reached by two
// names, such as localhost and 127.0.0.1: Redis's run_id tells), and
// returns a Locker that owns the clients. A node that is a replica (HELLO
// tells, see rediskit.Role: it refuses every write, READONLY) counts as a
// failed node, and is logged; a majority of nodes down or replicas is
// unavailable.
// Options in opts override those in the URL.
func Open(ctx context.Context, u *url.URL, opts ...baton.Option) (_ *baton.Locker, err error) {
	ros, urlOpts, err := ParseURL(u)
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
	type server struct {
		id      string // run_id, or "" when not told
		replica bool
	}
	servers, errs := each(ctx, b, cfg.RequestTimeout, func(ctx context.Context, n *node) (server, error) {
		id, err := serverID(ctx, n.client)
		if err != nil {
			return server{}, n.err("INFO server", err)
		}
		return server{id: id, replica: rediskit.Role(ctx, n.client) == "replica"}, nil
	}, nil)
	_, failed := count(errs)
	if failed > len(clients)-b.quorum {
		b.bg.Wait()
		closeAll()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		// Nodes that refused the URL's settings, enough of them to deny
		// the majority alone, make a configuration error.
		var refused []error
		for _, err := range errs {
			if rediskit.Refused(err) {
				refused = append(refused, err)
			}
		}
		if len(refused) > len(clients)-b.quorum {
			return nil, &baton.OptionError{Option: "redlock URL", Value: b.where, Reason: fmt.Sprintf("the servers refused the connection (%v): check the database number and the user:password", refused[0])}
		}
		return nil, &baton.UnavailableError{Where: b.where, Err: fmt.Errorf("a majority of nodes did not answer INFO within %v, or answered it with an error: %w", cfg.RequestTimeout, errors.Join(errs...))}
	}
	// A replica refuses every write (READONLY): a node that does not vote
	// while it is one, as for a while after a failover behind its
	// address. Like a node down, it is borne while the others make a
	// majority, and said.
	ids := make([]string, len(servers))
	var replicas []int
	for i, s := range servers {
		ids[i] = s.id
		if s.replica && errs[i] == nil {
			replicas = append(replicas, i)
		}
	}
	if failed+len(replicas) > len(clients)-b.quorum {
		b.bg.Wait()
		closeAll()
		return nil, rediskit.ReplicaError(b.nodes[replicas[0]].where + " in " + b.where)
	}
	for _, i := range replicas {
		cfg.Logger.Warn("a redlock node is a replica, which refuses writes: it fails every request until it is a primary again; if it stays so, give its primary's address (a replica of another node is not an independent node)", "node", b.nodes[i].where, "nodes", b.where)
	}
	if i, j, ok := sameServer(ids, errs); ok {
		b.bg.Wait()
		closeAll()
		return nil, &baton.OptionError{Option: "redlock URL", Value: b.where, Reason: fmt.Sprintf("nodes %s and %s are one server (run_id %s): Redlock needs independent nodes, or one server's votes make a majority", ros[i].Addr, ros[j].Addr, ids[i])}
	}
	b.owned = true
	return baton.NewLocker(b, b.cfg), nil
}

// serverID returns the server's run_id (INFO server), which tells one
// Redis process from another whatever name it was reached by, or "" when
// the server answers PING but refuses INFO (an ACL without it, a renamed
// command, a proxy in front).
func serverID(ctx context.Context, c goredis.UniversalClient) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	var rerr goredis.Error
	if errors.As(err, &rerr) && (rediskit.NoPerm(err) || !rediskit.Refused(err)) { // INFO is refused, not the connection
		return "", c.Ping(ctx).Err()
	}
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return id, nil
		}
	}
	return "", nil
}

// sameServer finds two nodes that answered with one run_id.
func sameServer(ids []string, errs []error) (i, j int, ok bool) {
	first := map[string]int{}
	for j, id := range ids {
		if errs[j] != nil || id == "" {
			continue
		}
		if i, ok := first[id]; ok {
			return i, j, true
		}
		first[id] = j
	}
	return 0, 0, false
}

// ParseURL turns a redlock:// URL into one set of client options per node
// and baton options. It refuses a user name without a password
// (redlock://app@a,b,c), which go-redis would run as the default user
// (see rediskit.Credentials); a password alone (redlock://:pw@a,b,c) is
// the default user's.
func ParseURL(u *url.URL) ([]*goredis.Options, []baton.Option, error) {
	bad := func(reason string) error {
		return &baton.OptionError{Option: "redlock URL", Value: baton.Redact(u.String()), Reason: reason}
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
	db, err := rediskit.DB(u.Path)
	if err != nil {
		return nil, nil, bad(err.Error())
	}
	user, pass, err := rediskit.Credentials(u)
	if err != nil {
		return nil, nil, bad(err.Error())
	}
	seen := map[string]bool{}
	var out []*goredis.Options
	for _, h := range hosts {
		addr, err := rediskit.HostPort(h)
		if err != nil {
			return nil, nil, bad(fmt.Sprintf("node %s: %v", strconv.Quote(h), err))
		}
		if seen[addr] {
			return nil, nil, bad(fmt.Sprintf("node %s named twice: the nodes must be independent", addr))
		}
		seen[addr] = true
		out = append(out, &goredis.Options{Addr: addr, DB: db, Username: user, Password: pass})
	}
	opts, err := rediskit.URLOptions(u)
	if err != nil {
		return nil, nil, bad(err.Error())
	}
	return out, opts, nil
}
