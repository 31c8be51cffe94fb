package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/postgres"
)

// TestAcquire_PrivilegeRefusedIsNotUnavailable: a user who may only read
// the lock tables is refused by the server on every attempt, which trying
// again cannot mend. That is not the service failing (baton elect would
// campaign for ever, baton run would report it unreachable): it is an
// invalid option, the user, with the grants it lacks.
func TestAcquire_PrivilegeRefusedIsNotUnavailable(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	makeTables(t, dsn)
	reader := roleUser(t, admin, dsn, "GRANT SELECT ON baton_lock, baton_lock_waiters TO %[1]s")
	l := dial(t, reader, baton.WithHolder("reader"))
	ctx := timeout(t, 30*time.Second)
	for _, c := range []struct {
		what    string
		acquire func() error
	}{
		{"TryAcquire", func() error { _, err := l.TryAcquire(ctx, "refused"); return err }},
		{"Acquire", func() error { _, err := l.Acquire(ctx, "refused"); return err }},
	} {
		err := c.acquire()
		t.Logf("%s: %v", c.what, err)
		if err == nil || errors.Is(err, baton.ErrUnavailable) || !errors.Is(err, baton.ErrInvalidOption) {
			t.Fatalf("%s by a user who may only read: %v; want ErrInvalidOption, not ErrUnavailable", c.what, err)
		}
		for _, want := range []string{"permission denied", `GRANT SELECT, INSERT, UPDATE, DELETE ON "baton_lock", "baton_lock_waiters"`, "GRANT USAGE ON SEQUENCE"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s by a user who may only read: %v; want it to say %q", c.what, err, want)
			}
		}
		if n := strings.Count(err.Error(), `acquire "refused"`); n != 1 {
			t.Errorf("%s: %v; says acquire \"refused\" %d times, want once", c.what, err, n)
		}
	}
}

// TestInit_ReadOnlyIsUnavailable: a server that cannot write, as a primary
// turned standby is during a failover until its clients reach the new
// one (read_only_sql_transaction), is the service failing for Init as it
// is for Acquire: an error matching baton.ErrUnavailable, which trying
// again mends. Init called it a refusal. So is it for a Locker's first
// acquisition, which creates the missing tables.
func TestInit_ReadOnlyIsUnavailable(t *testing.T) {
	dsn := pg.Database(t)
	ro := withParam(t, dsn, "default_transaction_read_only", "on")
	ctx := timeout(t, 30*time.Second)
	err := postgres.Init(ctx, newPool(t, ro), "")
	t.Logf("Init: %v", err)
	if !errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrInvalidOption) {
		t.Fatalf("Init on a read-only server: %v; want ErrUnavailable", err)
	}
	l := dial(t, ro, baton.WithHolder("ro"))
	_, err = l.TryAcquire(ctx, "read-only")
	t.Logf("first TryAcquire, without the tables: %v", err)
	if !errors.Is(err, baton.ErrUnavailable) || errors.Is(err, baton.ErrInvalidOption) {
		t.Fatalf("a first TryAcquire that must create the tables on a read-only server: %v; want ErrUnavailable, as Init", err)
	}
	makeTables(t, dsn) // for the Locker on the read-only server
	_, err = l.TryAcquire(ctx, "read-only")
	t.Logf("TryAcquire: %v", err)
	if !errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("TryAcquire on a read-only server: %v; want ErrUnavailable, as Init", err)
	}
}
