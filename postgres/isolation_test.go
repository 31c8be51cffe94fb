package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/rounds"
	"github.com/baton-go/baton/postgres"
)

// withParam returns dsn with one more query parameter.
func withParam(t *testing.T, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del(key)
	u.RawQuery = q.Encode()
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += key + "=" + url.PathEscape(value) // pgx reads + as +
	return u.String()
}

// TestNew_RepeatableReadPool_Refused: a pool whose transactions run
// REPEATABLE READ would fail the lock's statements (a serialization error
// where READ COMMITTED re-reads the row it waited for): New says so.
func TestNew_RepeatableReadPool_Refused(t *testing.T) {
	dsn := pg.Database(t)
	pool := newPool(t, withParam(t, dsn, "default_transaction_isolation", "repeatable read"))
	fl, err := postgres.New(timeout(t, 10*time.Second), pool)
	if err == nil {
		_ = fl.Close()
	}
	if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "READ COMMITTED") {
		t.Fatalf("New on a REPEATABLE READ pool = %v; want an option error naming READ COMMITTED", err)
	}
}

// TestDial_RepeatableReadDatabase_ReleaseHandsOn: on a database whose
// default is REPEATABLE READ, a release that waits for the lock's row
// while another transaction changes it must still free the lock and hand
// it to the waiter. Under REPEATABLE READ its snapshot, taken before the
// wait, failed it with a serialization error: the release rolled back and
// the lock stayed taken for a TTL. Dial runs its connections READ
// COMMITTED.
func TestDial_RepeatableReadDatabase_ReleaseHandsOn(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	var db string
	queryRow(t, admin, "SELECT current_database()", nil, &db)
	execSQL(t, admin, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET default_transaction_isolation = 'repeatable read'")
	h := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("h"))
	w := dial(t, dsn, baton.WithTTL(30*time.Second), baton.WithHolder("w"))
	lh, err := h.Acquire(timeout(t, 10*time.Second), "rr")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lw, err := w.Acquire(timeout(t, 30*time.Second), "rr")
		if err == nil {
			_ = lw.Release(context.Background())
		}
		got <- err
	}()
	batontest.WaitFor(t, 10*time.Second, "w queued", func() bool { return queued(t, admin, "rr") == 1 })
	// Another transaction changes the lock's row while the release waits
	// for it.
	tx := openTx(t, admin, "UPDATE baton_lock SET expires_at = expires_at WHERE name = 'rr'")
	released := make(chan error, 1)
	go func() { released <- lh.Release(timeout(t, 20*time.Second)) }()
	batontest.WaitFor(t, 10*time.Second, "the release waits for the row", func() bool { return lockWaits(t, admin) })
	if err := tx.Commit(timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatalf("Release after waiting for the row: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("w: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("w was not handed the lock within 10s of the release")
	}
}

// TestNew_PoolHooks_ListenerAndObserver: the connections a Locker opens
// for itself (the listener waiters are woken through, an observer's) go
// through the pool's BeforeConnect and AfterConnect, as the pool's own do:
// here BeforeConnect supplies the port (the DSN's is wrong) and
// AfterConnect the search_path where the lock table is.
func TestNew_PoolHooks_ListenerAndObserver(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	execSQL(t, admin, "CREATE SCHEMA app")
	pcfg, err := pgxpool.ParseConfig(withParam(t, dsn, "port", "1"))
	if err != nil {
		t.Fatal(err)
	}
	right, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.BeforeConnect = func(_ context.Context, c *pgx.ConnConfig) error {
		c.Port = right.ConnConfig.Port
		return nil
	}
	pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET search_path TO app")
		return err
	}
	pool, err := pgxpool.NewWithConfig(timeout(t, 10*time.Second), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	locker := func(holder string) *baton.FencedLocker {
		fl, err := postgres.New(timeout(t, 10*time.Second), pool, baton.WithHolder(holder))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fl.Close() })
		return fl
	}
	a, b := locker("a"), locker("b")
	terms, err := b.Observe(timeout(t, 30*time.Second), "hooks")
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	<-terms // no leader
	la, err := a.Acquire(timeout(t, 10*time.Second), "hooks")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lb, err := b.Acquire(timeout(t, 20*time.Second), "hooks") // waits: through the listener
		if err == nil {
			_ = lb.Release(context.Background())
		}
		got <- err
	}()
	if tm := <-terms; tm.Leader != "a" {
		t.Fatalf("term %+v, want a", tm)
	}
	_ = la.Release(timeout(t, 10*time.Second))
	if err := <-got; err != nil {
		t.Fatalf("a waiting Acquire: %v", err)
	}
}

// TestFirstObserve_BehindTableLock_HolderKeepsLease: the first Observe
// adds triggers to the lock table, which waits behind anyone holding a
// conflicting lock on it (autovacuum, here a LOCK TABLE for 1.5s), and
// holds up every statement on the table meanwhile. Each try waits at most
// 100ms, so a holder at MinTTL keeps renewing; Observe gets through once
// the table is free. With a 1s wait the holder lost its lease.
//
// A lease lost by its deadline may also be a stall of a loaded machine
// (a renewal unanswered for 0.9s): such a round runs again, on a database
// of its own; with the 1s wait every round loses.
func TestFirstObserve_BehindTableLock_HolderKeepsLease(t *testing.T) {
	rounds.Run(t, 3, func(int) error { return firstObserveBehindTableLockOnce(t) })
}

// firstObserveBehindTableLockOnce is one round of
// TestFirstObserve_BehindTableLock_HolderKeepsLease: it returns an error
// when the lease ended by its local deadline, and fails t on any other
// miss.
func firstObserveBehindTableLockOnce(t *testing.T) error {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	// At MinTTL, as the 100ms is chosen for; renewing every 100ms, not
	// TTL/3, leaves each renewal about 0.9s to land instead of 0.65s on a
	// loaded machine. A 1s wait would still lose the lease: every renewal
	// is held up behind it, and the last one through went out before it.
	h := dial(t, dsn, baton.WithTTL(postgres.MinTTL), baton.WithRenewEvery(100*time.Millisecond), baton.WithHolder("h"))
	obs := dial(t, dsn)
	lease, err := h.Acquire(timeout(t, 10*time.Second), "stall")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(timeout(t, 10*time.Second))
	tx := openTx(t, admin, "LOCK TABLE baton_lock IN SHARE UPDATE EXCLUSIVE MODE")
	observed := make(chan error, 1)
	go func() {
		_, err := obs.Observe(timeout(t, 30*time.Second), "stall")
		observed <- err
	}()
	hold := time.NewTimer(1500 * time.Millisecond) // the table lock's span: 1.5 TTLs
	select {
	case err := <-observed:
		t.Fatalf("Observe returned while the table was locked: %v", err)
	case <-hold.C:
	}
	if err := tx.Commit(timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-observed; err != nil {
		t.Fatalf("Observe once the table was free: %v", err)
	}
	if err := rounds.Ended(lease, 10*time.Second); err != nil {
		return rounds.ByDeadline(t, err, "while the first Observe waited")
	}
	return nil
}

// TestNew_ReadUncommittedPool: PostgreSQL runs READ UNCOMMITTED as READ
// COMMITTED, so a pool whose default it is works.
func TestNew_ReadUncommittedPool(t *testing.T) {
	pool := newPool(t, withParam(t, pg.Database(t), "default_transaction_isolation", "read uncommitted"))
	fl, err := postgres.New(timeout(t, 10*time.Second), pool)
	if err != nil {
		t.Fatalf("New on a READ UNCOMMITTED pool: %v", err)
	}
	_ = fl.Close()
}

// TestInit_BehindTableLock: Init, an operator's one-off, waits up to 1s
// for a conflicting lock on the table (autovacuum) to add the observers'
// triggers; the first Observe's 100ms, with retries, is not Init's.
func TestInit_BehindTableLock(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	makeTables(t, dsn) // without the triggers
	tx := openTx(t, admin, "LOCK TABLE baton_lock IN SHARE UPDATE EXCLUSIVE MODE")
	done := make(chan error, 1)
	go func() { done <- postgres.Init(timeout(t, 10*time.Second), admin, "") }()
	batontest.WaitFor(t, 10*time.Second, "Init waits for the table", func() bool { return lockWaits(t, admin) })
	// The table lock stays until Init has waited 200ms by the database's
	// clock, the one its lock_timeout runs on (an autovacuum pass, longer
	// than the first Observe's 100ms), and goes in the same round trip: the
	// server commits as soon as it sees that, so however slowly this client
	// wakes, none of Init's 1s goes to it. An Init that gave up sooner ends
	// the wait too, and reports its error below.
	if _, err := tx.Exec(timeout(t, 10*time.Second), `DO $$ BEGIN
		WHILE EXISTS (SELECT FROM pg_locks
			WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND relation = 'baton_lock'::regclass
				AND (waitstart IS NULL OR waitstart > clock_timestamp() - interval '200 milliseconds')) LOOP
			PERFORM pg_sleep(0.005);
		END LOOP;
	END $$; COMMIT`); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Init behind a 200ms table lock: %v", err)
	}
}

// openTx begins a transaction on admin that runs sql and stays open, rolled
// back when t ends unless the test commits it.
func openTx(t *testing.T, admin *pgxpool.Pool, sql string) pgx.Tx {
	t.Helper()
	tx, err := admin.Begin(timeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(timeout(t, 10*time.Second), sql); err != nil {
		t.Fatal(err)
	}
	return tx
}

// lockWaits reports whether a statement in the test's database waits for
// a lock.
func lockWaits(t *testing.T, admin *pgxpool.Pool) bool {
	var n int
	queryRow(t, admin, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'", nil, &n)
	return n >= 1
}
