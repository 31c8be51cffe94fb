package rediswake_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/rediswake"
	"github.com/baton-go/baton/internal/syncbuf"
	"github.com/baton-go/baton/internal/testsvc"
)

const channel = "rediswake-test"

// start returns a Waker checking its subscription every check, subscribed
// through a proxy in front of a real redis-server, a client straight to
// the server that publishes, and the proxy.
func start(t *testing.T, check time.Duration) (*rediswake.Waker, *goredis.Client, *testsvc.Proxy) {
	t.Helper()
	srv := testsvc.StartRedis(t)
	proxy := testsvc.NewProxy(t, srv.Addr)
	via := goredis.NewClient(&goredis.Options{Addr: proxy.Addr()})
	direct := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = via.Close(); _ = direct.Close() })
	w := rediswake.New(via, channel, 10*time.Millisecond, check, slog.New(slog.DiscardHandler))
	t.Cleanup(w.Close) // before the clients close: cleanups run last first
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return w, direct, proxy
}

// wokenWithin publishes a message for the waiter whose channel is ch every
// 50ms until one arrives, and reports whether one did within bound.
func wokenWithin(t *testing.T, pub *goredis.Client, ch chan string, bound time.Duration) bool {
	t.Helper()
	select {
	case <-ch: // a wake-up left from an earlier call proves nothing now
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_ = pub.Publish(ctx, channel, "v tag").Err()
		select {
		case tag := <-ch:
			if tag != "tag" {
				t.Fatalf("woken with tag %q, want %q", tag, "tag")
			}
			return true
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// pubsubClients returns the ids of the server's clients in Pub/Sub mode.
func pubsubClients(t *testing.T, c *goredis.Client) []string {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for line := range strings.Lines(list) {
		if strings.Contains(line, " sub=1 ") {
			id, _, _ := strings.Cut(line, " ")
			ids = append(ids, id)
		}
	}
	return ids
}

// pings returns how many PINGs the server has answered.
func pings(t *testing.T, c *goredis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_ping:calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			calls, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			return calls
		}
	}
	return 0
}

// TestSilentlyDroppedSubscription: a subscription whose connection goes
// silent both ways, without either side being told (a NAT or firewall
// that dropped an idle connection's state: the proxy stalls it), is made
// again on a new connection, and wakes its waiters again. go-redis alone
// would read from the silent connection for as long as TCP keepalive
// takes to give up on it, or for ever when, as here, the peer's kernel
// still answers the probes.
func TestSilentlyDroppedSubscription(t *testing.T) {
	const check = 200 * time.Millisecond
	w, pub, proxy := start(t, check)
	ch := make(chan string, 1)
	w.Register("v", ch)
	if !wokenWithin(t, pub, ch, 5*time.Second) {
		t.Fatal("not woken before the connection went silent")
	}
	before := pubsubClients(t, pub)
	proxy.Stall()
	// A PING after a quiet check, unanswered for another: 2 x 200ms,
	// and the new connection's subscription.
	if !wokenWithin(t, pub, ch, 10*time.Second) {
		t.Fatalf("not woken within 10s after the subscription's connection went silent (check %v)", check)
	}
	if after := pubsubClients(t, pub); len(after) == 0 || after[len(after)-1] == before[len(before)-1] {
		t.Errorf("subscribed clients %v before the stall, %v after; want a new one", before, after)
	}
}

// TestQuietSubscriptionKept: a subscription that is quiet but answers its
// PINGs keeps its connection. (Each PING must be answered within the
// check, here a second, which leaves a loaded machine room.)
func TestQuietSubscriptionKept(t *testing.T) {
	const check = time.Second
	w, pub, _ := start(t, check)
	ch := make(chan string, 1)
	w.Register("v", ch)
	before := pubsubClients(t, pub)
	if len(before) != 1 {
		t.Fatalf("subscribed clients %v, want one", before)
	}
	// Three quiet checks, each a PING that must be answered in time.
	from := pings(t, pub)
	batontest.WaitFor(t, 20*time.Second, "three PINGs answered in quiet, checking every "+check.String(), func() bool {
		return pings(t, pub) >= from+3
	})
	if after := pubsubClients(t, pub); len(after) != 1 || after[0] != before[0] {
		t.Errorf("subscribed clients %v before three quiet checks, %v after; want the same one", before, after)
	}
	if !wokenWithin(t, pub, ch, 5*time.Second) {
		t.Fatal("not woken after three quiet checks")
	}
}

// refused returns a Waker checking every check, logged in as an ACL user
// whose channel was taken away after the Waker was woken once, and
// which the server has since refused: Redis disconnects a client
// subscribed to a channel its user loses, and the Waker's next read
// connects again. It also returns a client of the server's default user,
// a function that gives the channel back, and the Waker's log.
func refused(t *testing.T, check time.Duration) (w *rediswake.Waker, admin *goredis.Client, ch chan string, giveBack func(), logs *syncbuf.Buffer) {
	t.Helper()
	srv := testsvc.StartRedis(t)
	admin = goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setUser := func(rule string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.Do(ctx, "ACL", "SETUSER", "waker", "on", ">pw", "+@all", rule).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setUser("&" + channel)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Username: "waker", Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	logs = new(syncbuf.Buffer)
	w = rediswake.New(c, channel, 10*time.Millisecond, check, slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(w.Close)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ch = make(chan string, 1)
	w.Register("v", ch)
	if !wokenWithin(t, admin, ch, 5*time.Second) {
		t.Fatal("not woken before the channel was taken away")
	}
	if err := admin.ACLLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	setUser("resetchannels")
	batontest.WaitFor(t, 30*time.Second, "the server refused the Waker's subscription after the channel was taken away", func() bool {
		return aclRefusals(t, admin, func(e *goredis.ACLLogEntry) bool { return e.Reason == "channel" }) > 0
	})
	return w, admin, ch, func() { setUser("&" + channel) }, logs
}

// TestRefusedSubscriptionTriedAgain: a subscription the server refuses on
// a reconnect (an ACL that took the channel away, then gave it back) is
// asked for again until the server takes it. go-redis sends SUBSCRIBE once
// per connection and reads the refusal as one more reply, so the
// connection, its PINGs answered, stayed up unsubscribed: no waiter was
// woken again.
func TestRefusedSubscriptionTriedAgain(t *testing.T) {
	const check = 200 * time.Millisecond
	_, admin, ch, giveBack, logs := refused(t, check)
	giveBack()
	if !wokenWithin(t, admin, ch, 10*time.Second) {
		t.Fatalf("not woken within 10s after the channel was given back (check %v)", check)
	}
	for _, want := range []string{
		`level=WARN msg="the server refused the wake-up subscription or its connection's log-in; waiters are woken by their timed retries, and it is asked for again every 200ms" channel=rediswake-test err="NOPERM`,
		`level=INFO msg="the server took the wake-up subscription again" channel=rediswake-test`,
	} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("log has %d lines with %s, want one; log:\n%s", n, want, logs.String())
		}
	}
}

// TestClose_WhileRefused: Close does not wait out the pause before a
// refused subscription is asked for again (here a minute).
func TestClose_WhileRefused(t *testing.T) {
	w, _, _, _, logs := refused(t, time.Minute)
	// The warning is logged just before the pause.
	batontest.WaitFor(t, 10*time.Second, "the refusal logged", func() bool {
		return strings.Contains(logs.String(), "refused the wake-up subscription")
	})
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return within 20s while the subscription was refused (the pause is a minute)")
	}
}

// TestRefusedPingIsNoRefusedSubscription: a PING the server refuses (an
// ACL user without it; a server loading its data refuses PING, not
// SUBSCRIBE) is not taken for a refused subscription, which would be
// logged as one and paused after for a check, the subscription up and
// unread.
func TestRefusedPingIsNoRefusedSubscription(t *testing.T) {
	const check = 100 * time.Millisecond
	srv := testsvc.StartRedis(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.Do(ctx, "ACL", "SETUSER", "waker", "on", ">pw", "+@all", "-ping", "&"+channel).Err(); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Username: "waker", Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	var logs syncbuf.Buffer
	w := rediswake.New(c, channel, 10*time.Millisecond, check, slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(w.Close)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1)
	w.Register("v", ch)
	if !wokenWithin(t, admin, ch, 5*time.Second) {
		t.Fatal("not woken")
	}
	batontest.WaitFor(t, 30*time.Second, "three PINGs refused, checking every "+check.String(), func() bool {
		return aclRefusals(t, admin, func(e *goredis.ACLLogEntry) bool { return e.Object == "ping" }) >= 3
	})
	if strings.Contains(logs.String(), "refused") {
		t.Errorf("a refused PING was logged as a refused subscription:\n%s", logs.String())
	}
	if !wokenWithin(t, admin, ch, 5*time.Second) {
		t.Fatal("not woken after three refused PINGs")
	}
}

// aclRefusals counts the server's refusals of the user waker that match,
// from its ACL LOG (an entry counts its repeats).
func aclRefusals(t *testing.T, c *goredis.Client, match func(*goredis.ACLLogEntry) bool) int64 {
	t.Helper()
	entries, err := c.ACLLog(context.Background(), 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if e.Username == "waker" && match(e) {
			n += e.Count
		}
	}
	return n
}
