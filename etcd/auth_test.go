package etcd_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// enableAuth turns on etcd's authentication at endpoint with a root user
// and a user "jobs" (password "jobs-pw") that may read and write the keys
// under /jobs/ only, as an operator gives each team its own prefix.
func enableAuth(t *testing.T, endpoint string) {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	c := testsvc.Client(t, endpoint)
	steps := []func() error{
		func() error { _, err := c.RoleAdd(ctx, "root"); return err },
		func() error { _, err := c.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "jobs"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "jobs", "/jobs/", clientv3.GetPrefixRangeEnd("/jobs/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "jobs", "jobs-pw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "jobs", "jobs"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("enabling auth, step %d: %v", i, err)
		}
	}
}

// TestOpen_Auth: with authentication on, a user whose role covers only its
// own prefix opens and locks under that prefix; credentials the server
// refuses, none at all, or a prefix the user may not touch are an invalid
// option, named as such, not an unavailable server (which a caller would
// retry).
// It runs on the embedded server and on Debian's etcd 3.4.
func TestOpen_Auth(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { testOpenAuth(t, testsvc.StartEtcd(t)) })
	t.Run("etcd3.4", func(t *testing.T) { testOpenAuth(t, testsvc.StartEtcdBinary(t)) })
}

func testOpenAuth(t *testing.T, srv *testsvc.Etcd) {
	enableAuth(t, srv.Endpoint)
	host := strings.TrimPrefix(srv.Endpoint, "http://")
	open := func(rawURL string) (*baton.Locker, error) {
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		return etcd.Open(timeout(t, 30*time.Second), u, baton.WithTTL(2*time.Second), baton.WithRequestTimeout(10*time.Second)) // bcrypt is slow under -race
	}

	l, err := open("etcd://jobs:jobs-pw@" + host + "/jobs/")
	if err != nil {
		t.Fatalf("Open as a user of /jobs/ under /jobs/: %v", err)
	}
	lease, err := l.TryAcquire(timeout(t, 5*time.Second), "nightly")
	if err != nil {
		t.Fatalf("TryAcquire under /jobs/: %v", err)
	}
	if !strings.HasPrefix(lease.Key(), "/jobs/") {
		t.Errorf("key %q is not under /jobs/", lease.Key())
	}
	term, err := l.Leader(timeout(t, 5*time.Second), "nightly")
	if err != nil || term.Key != lease.Key() {
		t.Errorf("Leader under /jobs/ = %+v, %v; want the holder of %s", term, err, lease.Key())
	}
	if err := lease.Release(timeout(t, 5*time.Second)); err != nil {
		t.Errorf("Release: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	for _, tc := range []struct{ name, url, want string }{
		{"wrong password", "etcd://jobs:wrong@" + host + "/jobs/", "user:password"},
		{"no credentials", "etcd://" + host + "/jobs/", "user:password"},
		{"prefix not granted", "etcd://jobs:jobs-pw@" + host + "/other/", "/other/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := open(tc.url)
			if err == nil {
				_ = l.Close()
				t.Fatal("Open succeeded")
			}
			t.Log(err)
			var oe *baton.OptionError
			if !errors.As(err, &oe) || errors.Is(err, baton.ErrUnavailable) {
				t.Fatalf("err = %v (%T), want a *baton.OptionError and not ErrUnavailable", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "jobs-pw") {
				t.Errorf("err = %q: want it to mention %q, and no password", err, tc.want)
			}
		})
	}
}

// TestDial_AuthNotEnabled: credentials given to a server without
// authentication are accepted, as etcdctl accepts them.
func TestDial_AuthNotEnabled(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	u, _ := url.Parse("etcd://someone:pw@" + strings.TrimPrefix(srv.Endpoint, "http://"))
	l, err := etcd.Open(context.Background(), u, baton.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("Open with credentials on a server without auth: %v", err)
	}
	_ = l.Close()
}

// TestAcquire_ReadOnlyUser: a user whose role may read the prefix but not
// write it passes Dial's read, and every acquisition is then refused at
// its first write. That is an invalid option naming the grant, not an
// unavailable server, which baton elect and run --wait would retry for
// ever.
// It runs on the embedded server and on Debian's etcd 3.4.
func TestAcquire_ReadOnlyUser(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { testAcquireReadOnlyUser(t, testsvc.StartEtcd(t)) })
	t.Run("etcd3.4", func(t *testing.T) { testAcquireReadOnlyUser(t, testsvc.StartEtcdBinary(t)) })
}

func testAcquireReadOnlyUser(t *testing.T, srv *testsvc.Etcd) {
	ctx := timeout(t, 10*time.Second)
	c := testsvc.Client(t, srv.Endpoint)
	for i, step := range []func() error{
		func() error { _, err := c.RoleAdd(ctx, "reader"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "reader", "/ro/", clientv3.GetPrefixRangeEnd("/ro/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "reader", "reader-pw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "reader", "reader"); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("adding the read-only user, step %d: %v", i, err)
		}
	}
	enableAuth(t, srv.Endpoint)

	u, _ := url.Parse("etcd://reader:reader-pw@" + strings.TrimPrefix(srv.Endpoint, "http://") + "/ro/")
	l, err := etcd.Open(timeout(t, 30*time.Second), u, baton.WithTTL(2*time.Second), baton.WithRequestTimeout(10*time.Second)) // bcrypt is slow under -race
	if err != nil {
		t.Fatalf("Open as a user who may read /ro/: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var grants atomic.Int32
	etcd.OnGrantSent(l, func() { grants.Add(1) })

	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s succeeded for a user who may not write the prefix", what)
		}
		t.Logf("%s: %v", what, err)
		var oe *baton.OptionError
		if !errors.As(err, &oe) || !errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) {
			t.Fatalf("%s: err = %v (%T), want a *baton.OptionError and not ErrUnavailable", what, err, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "/ro/") || !strings.Contains(msg, "readwrite") || strings.Contains(msg, "reader-pw") {
			t.Errorf("%s: err = %q: want it to name the prefix /ro/ and the readwrite grant, and no password", what, msg)
		}
	}
	_, err = l.TryAcquire(timeout(t, 10*time.Second), "nightly")
	check("TryAcquire", err)
	_, err = l.Acquire(timeout(t, 10*time.Second), "nightly")
	check("Acquire", err)
	_, err = l.TryAcquire(timeout(t, 10*time.Second), "nightly")
	check("TryAcquire again", err)
	// A refused create applied nothing: its session is not retired for a
	// key to abandon, so the three refusals share one lease grant (each
	// granted one, and left a delete retrying, before).
	if n := grants.Load(); n != 1 {
		t.Errorf("three refused acquisitions sent %d lease grants; want 1", n)
	}
}
