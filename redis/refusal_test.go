package redis_test

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
)

// refusedForGood fails t unless err is a refusal that trying again cannot
// mend: not ErrUnavailable (which baton elect and run --wait retry for
// ever), not an invalid option (the CLI's exit 2 is for configuration),
// the server's reply kept, and saying each of says.
func refusedForGood(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded", what)
	}
	t.Logf("%s: %v", what, err)
	var rerr goredis.Error
	if errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrInvalidOption) || !errors.As(err, &rerr) {
		t.Fatalf("%s: err = %v; want the server's refusal, neither ErrUnavailable nor ErrInvalidOption", what, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: err = %q; want it to say %q", what, err, s)
		}
	}
}

// TestAcquire_WrongType: a lock key that holds a list (set by something
// other than baton) refuses every acquisition with WRONGTYPE until it is
// deleted: an error naming the key, not an unavailable server.
func TestAcquire_WrongType(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := client(t, srv.Addr)
	ctx := timeout(t, 10*time.Second)
	key := redis.DefaultPrefix + "job"
	if err := c.LPush(ctx, key, "x").Err(); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, srv.Addr)
	_, err := l.TryAcquire(ctx, "job")
	refusedForGood(t, "TryAcquire", err, "WRONGTYPE", key)
	_, err = l.Acquire(timeout(t, 5*time.Second), "job")
	refusedForGood(t, "Acquire", err, "WRONGTYPE", key)

	// Waiting behind a holder: the acquire script meets the list in the
	// queue's place.
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	held, err := newLocker(t, srv.Addr, baton.WithHolder("a")).TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	q := "{" + key + "}:q"
	if err := c.LPush(ctx, q, "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire(timeout(t, 5*time.Second), "job")
	refusedForGood(t, "Acquire behind a holder", err, "WRONGTYPE", q)
	// Redis 7 says where in the script the error was raised: baton's
	// business, not the user's.
	if strings.Contains(err.Error(), ", on @user_script:") {
		t.Errorf("Acquire behind a holder: %q tells the script's SHA1 and line", err)
	}
}

// TestAcquire_UnknownCommand: a server whose scripting commands are
// renamed away refuses a waiting acquisition (which runs a script) with
// "unknown command": an error saying so, not an unavailable server.
func TestAcquire_UnknownCommand(t *testing.T) {
	srv := testsvc.StartRedis(t, "--rename-command", "EVALSHA", "", "--rename-command", "EVAL", "")
	ctx := timeout(t, 10*time.Second)
	held, err := newLocker(t, srv.Addr, baton.WithHolder("a")).TryAcquire(ctx, "job") // a claim: no script
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	_, err = newLocker(t, srv.Addr, baton.WithHolder("b")).Acquire(timeout(t, 5*time.Second), "job")
	refusedForGood(t, "Acquire", err, "unknown command", "renamed or disabled")
}

// TestReplica: a replica refuses writes with READONLY. Open refuses a URL
// that names one as an invalid option (the CLI's exit 2) saying to give
// the primary. A READONLY reply to a request stays the service failing,
// since a primary demoted by a failover answers so until a new connection
// reaches its successor (go-redis drops the connection on READONLY), but
// says what it may mean.
func TestReplica(t *testing.T) {
	primary, replica := testsvc.StartRedis(t), testsvc.StartRedis(t)
	ctx := timeout(t, 10*time.Second)
	host, port, _ := strings.Cut(primary.Addr, ":")
	if err := client(t, replica.Addr).ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(replica.URL())
	l, err := redis.Open(ctx, u)
	if err == nil {
		_ = l.Close()
		t.Fatal("Open on a replica succeeded")
	}
	t.Logf("Open: %v", err)
	// Unavailable, as READONLY is: for a while after a failover the
	// primary's address reaches the old one, now a replica.
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "primary") || !strings.Contains(err.Error(), replica.Addr) {
		t.Fatalf("Open on a replica: %v; want unavailable, naming it and saying to give the primary if it stays so", err)
	}

	u, _ = url.Parse(primary.URL())
	if l, err = redis.Open(ctx, u); err != nil {
		t.Fatalf("Open on the primary: %v", err)
	}
	_ = l.Close()

	_, err = newLocker(t, replica.Addr).TryAcquire(ctx, "job")
	t.Logf("TryAcquire on a replica's client: %v", err)
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") || !strings.Contains(err.Error(), "give the primary's") {
		t.Fatalf("TryAcquire on a replica's client: %v; want ErrUnavailable saying it is a replica", err)
	}
}

// TestInspect_WrongTypeBehindFreeLock: a lock key that holds a hash (set
// by something other than baton) makes Inspect fail with WRONGTYPE naming
// it, also when a lock inspected before it is free: the pipeline's error
// was only the first failed command's, that free lock's GET (Nil), which
// was ignored, so the hash showed as a free lock and no error.
func TestInspect_WrongTypeBehindFreeLock(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := client(t, srv.Addr)
	ctx := timeout(t, 10*time.Second)
	key := redis.DefaultPrefix + "b"
	if err := c.HSet(ctx, key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	insp := newLocker(t, srv.Addr).Backend().(baton.Inspector)
	for _, names := range [][]string{{"b"}, {"a", "b"}, {"b", "a"}, nil} {
		infos, err := insp.Inspect(ctx, names...)
		if err == nil {
			t.Errorf("Inspect(%q) = %+v, nil error; want WRONGTYPE naming %s", names, infos, key)
			continue
		}
		refusedForGood(t, fmt.Sprintf("Inspect(%q)", names), err, "WRONGTYPE", key)
	}
}

// TestInspect_ListShowsWhatItCannotRead: listing every lock, one whose
// keys cannot be read (a hash under the prefix, set by another tool; keys
// the user's ACL does not grant) is listed with its error, and the others
// as they are; the stray key failed the whole list. Named, it is
// Inspect's error, and so is the first one's when no lock can be read.
func TestInspect_ListShowsWhatItCannotRead(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := client(t, srv.Addr)
	ctx := timeout(t, 20*time.Second)
	if err := c.HSet(ctx, redis.DefaultPrefix+"b", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, redis.DefaultPrefix+"a", "set by another tool", 0).Err(); err != nil {
		t.Fatal(err)
	}
	lease, err := newLocker(t, srv.Addr, baton.WithHolder("h"), baton.WithTTL(10*time.Second)).Acquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)

	// list checks that l lists held as read and unread with their errors,
	// each saying want.
	list := func(l *baton.Locker, held []string, unread []string, want string) {
		t.Helper()
		infos, err := l.Backend().(baton.Inspector).Inspect(ctx)
		if err != nil {
			t.Fatalf("Inspect() = %v; want %q held and %q unreadable", err, held, unread)
		}
		var gotHeld, gotUnread []string
		for _, in := range infos {
			if in.Err == nil {
				gotHeld = append(gotHeld, in.Name)
				continue
			}
			gotUnread = append(gotUnread, in.Name)
			if !strings.Contains(in.Err.Error(), want) || in.Holder != "" || in.Key != "" {
				t.Errorf("Inspect(): %+v; want no holder, and an error saying %q", in, want)
			}
		}
		if !slices.Equal(gotHeld, held) || !slices.Equal(gotUnread, unread) {
			t.Fatalf("Inspect() = %+v; want %q held and %q unreadable", infos, held, unread)
		}
	}
	list(newLocker(t, srv.Addr), []string{"a", "c"}, []string{"b"}, "WRONGTYPE")

	// A user granted c's keys alone: a and b cannot be read (NOPERM).
	onlyC := aclUser(t, srv, strings.Fields(rediskit.Grants(redis.DefaultPrefix+"c"))...)("looker")
	list(onlyC, []string{"c"}, []string{"a", "b"}, "NOPERM")
	if _, err := onlyC.Backend().(baton.Inspector).Inspect(ctx, "a"); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Inspect(a) by a user not granted its key = %v; want the ACL's refusal (ErrInvalidOption)", err)
	}

	// No lock can be read: the refusal, not a list of errors alone.
	none := aclUser(t, srv, strings.Fields(rediskit.Grants(redis.DefaultPrefix+"nothing"))...)("looker")
	if infos, err := none.Backend().(baton.Inspector).Inspect(ctx); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("Inspect() with every lock refused = %+v, %v; want the ACL's refusal (ErrInvalidOption)", infos, err)
	}
}
