package zk_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/zk"
)

func TestParseURL(t *testing.T) {
	u, err := baton.ParseURL("zk://app:s3cret@10.0.0.1:2181,10.0.0.2:2181/jobs/locks?session-timeout=4s&request-timeout=2s&drift=1500ms&on-suspend=continue")
	if err != nil {
		t.Fatal(err)
	}
	servers, set, opts, err := zk.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(servers, ","); got != "10.0.0.1:2181,10.0.0.2:2181" {
		t.Errorf("servers %s", got)
	}
	if set.Auth == nil || set.Auth.User != "app" || set.Auth.Password != "s3cret" {
		t.Errorf("auth %v", set.Auth)
	}
	if !set.ContinueWhileSuspended {
		t.Error("on-suspend=continue not applied")
	}
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != 4*time.Second || cfg.RequestTimeout != 2*time.Second || cfg.Drift != 1500*time.Millisecond || cfg.Prefix != "/jobs/locks" {
		t.Errorf("options from the URL not applied: ttl %v, request timeout %v, drift %v, prefix %q", cfg.TTL, cfg.RequestTimeout, cfg.Drift, cfg.Prefix)
	}

	for _, bad := range []string{
		"zk://", "zk://host", "zk://h:1,,h:2", "zk://h:0", "zk://h:99999", "zk://h:1?session-timeout=ten", "zk://h:1?session-timeout=0",
		"zk://h:1?request-timeout=-1s", "zk://h:1?drift=0", "zk://h:1?drift=soon", "zk://h:1?session-timeout=4s&session-timeout=5s",
		"zk://h:1?colour=red", "zk://h:1,h:1", "zk:opaque", "zk://h:1/a//b", "zk://h:1/zookeeper/x", "zk://h:1/a/../b",
		"zk://user@h:1", "zk://h:1?on-suspend=maybe", "etcd://h:1", "zk://h:1/app?session-timeout=4s;drift=1s", "zk://h:1/app#x",
	} {
		u, err := baton.ParseURL(bad)
		if err == nil {
			_, _, _, err = zk.ParseURL(u)
		}
		if !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
	// A session-timeout the TTL's rules refuse is named as the URL names
	// it; a --ttl given after it, as ttl.
	u, _ = baton.ParseURL("zk://127.0.0.1:1?session-timeout=1ms")
	if _, err := zk.Open(context.Background(), u); err == nil || !strings.HasPrefix(err.Error(), "invalid session-timeout 1ms: ") {
		t.Errorf("Open with session-timeout=1ms: %v, want it named", err)
	}
	u, _ = baton.ParseURL("zk://127.0.0.1:1?session-timeout=4s")
	if _, err := zk.Open(context.Background(), u, baton.WithTTL(time.Millisecond)); err == nil || !strings.HasPrefix(err.Error(), "invalid ttl 1ms: ") {
		t.Errorf("Open with session-timeout=4s and WithTTL(1ms): %v, want the option named", err)
	}
	// The password never shows, in errors or in the Settings.
	u, _ = baton.ParseURL("zk://app:s3cret@h:1?colour=red")
	if _, _, _, err := zk.ParseURL(u); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v shows the password", err)
	}
	if s := (zk.Digest{User: "app", Password: "s3cret"}); strings.Contains(s.String()+s.GoString(), "s3cret") {
		t.Errorf("Digest prints its password: %s %#v", s, s)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"zk://127.0.0.1:2181", "zk://a:1,b:2/p?session-timeout=5s", "zk://u:p@h:1/r", "zk://h:1?on-suspend=continue", "zk://[::1]:2181/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := baton.ParseURL(s)
		if err != nil {
			return
		}
		servers, _, opts, err := zk.ParseURL(u)
		if err != nil {
			if !errors.Is(err, baton.ErrInvalidOption) {
				t.Fatalf("error %v is not an option error", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			if pw, ok := u.User.Password(); ok && len(pw) > 3 && strings.Contains(err.Error(), pw) {
				t.Fatalf("error %q shows the password", err)
			}
			return
		}
		if len(servers) == 0 {
			t.Fatal("no servers and no error")
		}
		for _, s := range servers {
			if _, port, ok := strings.Cut(s, ":"); !ok || port == "" {
				t.Fatalf("server %q without a port", s)
			}
		}
		if _, err := baton.NewConfig(opts...); err != nil && !errors.Is(err, baton.ErrInvalidOption) {
			t.Fatalf("options give %v", err)
		}
	})
}

// TestDial_SessionTimeoutOutsideServerLimits: the test server grants 1s to
// 10s (tickTime 500ms x 2 ... x 20); Dial refuses a TTL outside that,
// naming the limit, instead of holding a session of another length, and
// says what was granted (a *zk.SessionTimeoutError).
func TestDial_SessionTimeoutOutsideServerLimits(t *testing.T) {
	addr := zkServer.Addr(t)
	for _, tc := range []struct {
		ttl     time.Duration
		want    string
		granted time.Duration
	}{
		{500 * time.Millisecond, "1s or more", time.Second},
		{30 * time.Second, "10s or less", 10 * time.Second},
	} {
		_, err := zk.Dial(timeout(t, 20*time.Second), []string{addr}, baton.WithTTL(tc.ttl))
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tickTime") {
			t.Errorf("TTL %v: err = %v, want ErrInvalidOption naming %q and tickTime", tc.ttl, err, tc.want)
		}
		var ste *zk.SessionTimeoutError
		if !errors.As(err, &ste) || ste.Asked != tc.ttl || ste.Granted != tc.granted {
			t.Errorf("TTL %v: err = %#v; want a *zk.SessionTimeoutError, %v asked and %v granted", tc.ttl, err, tc.ttl, tc.granted)
		}
	}
	fl, err := zk.Dial(timeout(t, 20*time.Second), []string{addr}, baton.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("TTL 10s, the server's maximum: %v", err)
	}
	_ = fl.Close()
	for _, ttl := range []time.Duration{50 * time.Millisecond, 1500*time.Millisecond + 500*time.Microsecond} {
		if _, err := zk.Dial(context.Background(), []string{addr}, baton.WithTTL(ttl)); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("TTL %v: err = %v, want ErrInvalidOption before dialling", ttl, err)
		}
	}
}

// TestDial_RenewalsMustFitTwiceInTTL: a lease's deadline counts from the
// renewal before the last, so a renew interval or a drift that leaves no
// room for two renewals in the TTL is an option error naming it, before
// any dial; the defaults and TTL/2.5 fit.
func TestDial_RenewalsMustFitTwiceInTTL(t *testing.T) {
	for _, tc := range []struct {
		opts []baton.Option
		want string // "" for none
	}{
		{[]baton.Option{baton.WithTTL(4 * time.Second), baton.WithRenewEvery(2 * time.Second)}, "renew interval"},
		{[]baton.Option{baton.WithTTL(4 * time.Second), baton.WithRenewEvery(1960 * time.Millisecond), baton.WithDrift(100 * time.Millisecond)}, "renew interval"},
		{[]baton.Option{baton.WithTTL(4 * time.Second), baton.WithDrift(1600 * time.Millisecond)}, "drift"},
		{[]baton.Option{baton.WithTTL(4 * time.Second)}, ""},
		{[]baton.Option{baton.WithTTL(4 * time.Second), baton.WithRenewEvery(1600 * time.Millisecond), baton.WithDrift(100 * time.Millisecond)}, ""},
	} {
		// A closed port: the options are checked before dialling.
		_, err := zk.Dial(context.Background(), []string{"127.0.0.1:1"}, append(tc.opts, baton.WithRequestTimeout(100*time.Millisecond))...)
		var oe *baton.OptionError
		switch {
		case tc.want == "" && errors.As(err, &oe):
			t.Errorf("%v: %v; want no option error", tc.opts, err)
		case tc.want != "" && (!errors.As(err, &oe) || oe.Option != tc.want || !strings.Contains(err.Error(), "renewal before the last")):
			t.Errorf("%v: err = %v; want an option error on the %s saying why", tc.opts, err, tc.want)
		}
	}
}

// TestLeaderHeard: a session's first request counts from its
// connection's dial, when that began at most RenewEvery before it; from
// none (wait for a renewal to settle it) when the dial is older or not
// known.
func TestLeaderHeard(t *testing.T) {
	cfg, err := baton.NewConfig(baton.WithTTL(3 * time.Second)) // RenewEvery 1s
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for _, tc := range []struct {
		dialed, want time.Time
	}{
		{sent.Add(-10 * time.Millisecond), sent.Add(-10 * time.Millisecond)},
		{sent.Add(-time.Second), sent.Add(-time.Second)},
		{sent.Add(-time.Second - time.Millisecond), time.Time{}},
		{time.Time{}, time.Time{}},
	} {
		if got := zk.LeaderHeard(cfg, sent, tc.dialed); !got.Equal(tc.want) {
			t.Errorf("dialed %v before the request: base %v, want %v", sent.Sub(tc.dialed), got, tc.want)
		}
	}
}

// TestDial_Unreachable: a Dial to servers that all refuse the connection
// fails as soon as each was dialed, with their errors, and does not wait
// out the request timeout (here a minute, which the bound below is far
// from) for servers that are not there.
func TestDial_Unreachable(t *testing.T) {
	ports := []int{testsvc.ClosedPort(t), testsvc.ClosedPort(t)} // refuse connections until the test ends
	where := "127.0.0.1:" + strconv.Itoa(ports[0])
	other := "127.0.0.1:" + strconv.Itoa(ports[1])
	start := time.Now()
	_, err := zk.Dial(context.Background(), []string{where, other}, baton.WithRequestTimeout(time.Minute))
	if !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("Dial to closed ports: err = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Dial took %v to fail on refused connections, as if it waited for the 1m request timeout", d)
	}
	for _, want := range []string{"cannot reach any server", "dial tcp " + where + ": connect: connection refused", "dial tcp " + other + ": connect: connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error %q does not wrap ECONNREFUSED", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("caller gave up")
	cancel(cause)
	if _, err := zk.Dial(ctx, []string{where}); !errors.Is(err, cause) {
		t.Errorf("Dial with a cancelled ctx: %v, want the ctx's cause", err)
	}
}

// TestDial_HangsUp: a server that takes the connection and hangs up (as
// one does while its ensemble forms a quorum) is waited for until the
// request timeout, and said to have given no answer, also when another
// server refuses the connection.
func TestDial_HangsUp(t *testing.T) {
	addr := testsvc.Listen(t, func(net.Conn) {})
	start := time.Now()
	refusing := "127.0.0.1:" + strconv.Itoa(testsvc.ClosedPort(t))
	_, err := zk.Dial(context.Background(), []string{addr, refusing}, baton.WithRequestTimeout(time.Second))
	took := time.Since(start)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "no ZooKeeper server answered within 1s") {
		t.Fatalf("Dial to a server that hangs up: err = %v, want ErrUnavailable, no answer within 1s", err)
	}
	if took < time.Second {
		t.Errorf("Dial gave up after %v, before its 1s request timeout", took)
	}
}

// TestDial_DialTimesOut: a server whose dial times out (its SYNs dropped,
// as one lost packet, or a firewall, does) may answer the next dial: Dial
// waits for it up to the request timeout, also when the other server
// refuses the connection, and says no server answered.
func TestDial_DialTimesOut(t *testing.T) {
	dropping := "127.0.0.1:" + strconv.Itoa(testsvc.DroppingPort(t))
	refusing := "127.0.0.1:" + strconv.Itoa(testsvc.ClosedPort(t))
	start := time.Now()
	_, err := zk.Dial(context.Background(), []string{dropping, refusing}, baton.WithRequestTimeout(2500*time.Millisecond))
	took := time.Since(start)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "no ZooKeeper server answered within 2.5s") {
		t.Fatalf("Dial to a server whose dials time out: err = %v, want ErrUnavailable, no answer within 2.5s", err)
	}
	if took < 2500*time.Millisecond {
		t.Errorf("Dial gave up after %v, before its 2.5s request timeout", took)
	}
}

// TestDial_BadServers: Dial checks each server as ParseURL does, before it
// connects: a Java connect string's chroot (zk1:2181/app) is refused at
// once, pointing to the root option with the chroot before the root,
// rather than failing as no server answering; so are two servers in one
// string, a bad port, and one given twice (a host alone is ZooKeeper's
// port, 2181, as go-zookeeper and the Java client take it).
func TestDial_BadServers(t *testing.T) {
	for _, tc := range []struct {
		servers []string
		want    string // in the reason
	}{
		{[]string{"127.0.0.1:2181/app"}, `baton.WithPrefix("/app/baton/lock") or the URL's path (zk://host:port/app/baton/lock)`},
		{[]string{"127.0.0.1:2181", "127.0.0.1:2182/app/locks"}, "(/app/locks)"},
		{[]string{"127.0.0.1", "127.0.0.1:2181"}, "given twice"},
		{[]string{":2181"}, "want host:port"},
		{[]string{"127.0.0.1:2181,127.0.0.1:2182"}, "a host:port of its own"},
		{[]string{"127.0.0.1:0"}, "1 to 65535"},
		{[]string{"127.0.0.1:2181", "127.0.0.1:2181"}, "given twice"},
	} {
		start := time.Now()
		_, err := zk.Dial(timeout(t, 10*time.Second), tc.servers)
		var oe *baton.OptionError
		if !errors.As(err, &oe) || !strings.Contains(oe.Reason, tc.want) {
			t.Errorf("Dial(%q) = %v; want a *baton.OptionError saying %q", tc.servers, err, tc.want)
			continue
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Dial(%q) took %v to refuse a server it need not try", tc.servers, d)
		}
		if strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("Dial(%q): multi-line error %q", tc.servers, err)
		}
	}
}

// TestDial_DigestAuth: with a user and password the nodes are the
// identity's alone; another identity, or none, cannot take the lock, and is
// told it is a permission problem, not contention: at Dial when the root is
// not theirs, at the attempt when only the lock is.
func TestDial_DigestAuth(t *testing.T) {
	addr := zkServer.Addr(t)
	root := "/" + uniqueName(t)
	name := "invoices"
	alice := zk.Settings{Auth: &zk.Digest{User: "alice", Password: "s3cret"}}
	a := dial(t, []string{addr}, alice, baton.WithPrefix(root), baton.WithHolder("alice-1"))
	ctx := timeout(t, 20*time.Second)
	la, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	acl, _, err := zk.ConnOf(a.Locker()).GetACL(la.Key()) // reading an ACL needs READ or ADMIN on the node
	if err != nil {
		t.Fatal(err)
	}
	if len(acl) != 1 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, "alice:") || acl[0].Perms != zkgo.PermAll {
		t.Errorf("node ACL %+v, want digest alice with all permissions", acl)
	}

	// The root is alice's too: another identity, or none, is told at Dial
	// that it has the wrong credentials, not that the server is down.
	for who, set := range map[string]zk.Settings{
		"anonymous": {},
		"mallory":   {Auth: &zk.Digest{User: "alice", Password: "guess"}},
	} {
		l, err := set.Dial(ctx, []string{addr}, baton.WithPrefix(root), baton.WithTTL(suiteTTL))
		if err == nil {
			_ = l.Close()
		}
		var oe *baton.OptionError
		if !errors.As(err, &oe) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "ACL of "+root) {
			t.Errorf("%s: Dial = %v; want a *baton.OptionError saying the ACL of %s refuses it", who, err, root)
		} else if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "guess") {
			t.Errorf("%s: error shows a password: %v", who, err)
		}
	}

	// Under a root anyone may list, alice's lock is still hers alone: the
	// refusal comes with the attempt, named as a permission problem: an
	// invalid option, neither contention nor an unavailable server (which
	// baton elect and run --wait would retry for ever).
	shared := "/" + uniqueName(t) + "-shared"
	anon := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(shared))
	lo, err := anon.Acquire(ctx, "open")
	if err != nil {
		t.Fatal(err)
	}
	if err := lo.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, []string{addr}, alice, baton.WithPrefix(shared)).Acquire(ctx, name); err != nil {
		t.Fatal(err)
	}
	m := dial(t, []string{addr}, zk.Settings{Auth: &zk.Digest{User: "alice", Password: "guess"}}, baton.WithPrefix(shared))
	_, err = m.TryAcquire(ctx, name)
	var oe *baton.OptionError
	if !errors.As(err, &oe) || errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrNotAcquired) || !strings.Contains(err.Error(), "ACL") || !strings.Contains(err.Error(), "alice:xxxxx") {
		t.Errorf("TryAcquire of alice's lock under a shared root = %v; want a *baton.OptionError saying the ACL refuses the identity alice", err)
	} else if strings.Contains(err.Error(), "guess") {
		t.Errorf("error shows a password: %v", err)
	}
	a2 := dial(t, []string{addr}, alice, baton.WithPrefix(root))
	var nae *baton.NotAcquiredError
	if _, err := a2.TryAcquire(ctx, name); !errors.As(err, &nae) || nae.Holder != "alice-1" || nae.Token != la.Token() {
		t.Fatalf("same identity: TryAcquire = %v; want held by alice-1 (token %d)", err, la.Token())
	}
}

// TestOpen_URL builds a Locker from a zk:// URL and uses it as the CLI
// would, with a fence.
func TestOpen_URL(t *testing.T) {
	addr := zkServer.Addr(t)
	root := "/" + uniqueName(t)
	u, err := baton.ParseURL("zk://" + addr + root + "?session-timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	l, err := zk.Open(timeout(t, 20*time.Second), u)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fl, ok := l.Fenced()
	if !ok {
		t.Fatal("a zk:// Locker does not give fencing tokens")
	}
	if l.Config().TTL != 2*time.Second {
		t.Errorf("TTL %v, want the URL's 2s", l.Config().TTL)
	}
	lease, err := fl.Acquire(timeout(t, 10*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	if !strings.HasPrefix(lease.Key(), root+"/x/") || lease.Token() <= 0 {
		t.Errorf("key %s token %d; want a node under %s/x and a positive token", lease.Key(), lease.Token(), root)
	}
	if !strings.Contains(fl.TokenSource(), "czxid") {
		t.Errorf("token source %q", fl.TokenSource())
	}
}
