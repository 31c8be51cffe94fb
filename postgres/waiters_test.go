package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
)

// pingPong has a and b take the lock name in turns, rounds times each,
// every acquisition but the first waiting behind the other's hold, and
// returns once both gave it back for the last time.
func pingPong(t *testing.T, a, b *baton.FencedLocker, name string, rounds int) {
	t.Helper()
	ctx := timeout(t, 2*time.Minute)
	cur, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	lockers := [2]*baton.FencedLocker{b, a}
	for i := range 2*rounds - 1 {
		next := make(chan error, 1)
		var got *baton.FencedLease
		go func() {
			var err error
			got, err = lockers[i%2].Acquire(ctx, name)
			next <- err
		}()
		// Release only once the other is queued, so that every turn is a
		// wait and a hand-off, as under contention.
		waitQueued(t, lockers[i%2], name)
		if err := cur.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-next; err != nil {
			t.Fatal(err)
		}
		cur = got
	}
	if err := cur.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// lockers dials two Lockers on dsn (TTL 10s) holding as x and y.
func lockers(t *testing.T, dsn, x, y string) (*baton.FencedLocker, *baton.FencedLocker) {
	t.Helper()
	return dial(t, dsn, baton.WithTTL(10*time.Second), baton.WithHolder(x)), dial(t, dsn, baton.WithTTL(10*time.Second), baton.WithHolder(y))
}

// waitQueued returns once l's status of name shows a waiter.
func waitQueued(t *testing.T, l *baton.FencedLocker, name string) {
	t.Helper()
	ins, ok := l.Locker().Backend().(baton.Inspector)
	if !ok {
		t.Fatal("the postgres backend is not a baton.Inspector")
	}
	batontest.WaitFor(t, 10*time.Second, "the waiter queued", func() bool {
		infos, err := ins.Inspect(context.Background(), name)
		return err == nil && len(infos) == 1 && infos[0].Waiters > 0
	})
}

// TestWaiters_RowsReusedNoIndexChurn: a thousand waits by two Lockers on
// one lock leave the waiters table's index as small as it started. Each
// wait reuses its Locker's row (a HOT update), so the index gains no entry
// per wait; with a row inserted and deleted per wait it held a dead entry
// for each (six pages here) until VACUUM, and every statement reading
// the queue walked them all.
func TestWaiters_RowsReusedNoIndexChurn(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a, b := lockers(t, dsn, "a", "b")
	pingPong(t, a, b, "churn", 500)

	var rows, pages int64
	queryRow(t, admin, `SELECT (SELECT count(*) FROM baton_lock_waiters),
		pg_relation_size('baton_lock_waiters_pkey') / current_setting('block_size')::int`, nil, &rows, &pages)
	if rows > 2 {
		t.Errorf("the waiters table has %d rows after two Lockers waited in turns; want one per Locker", rows)
	}
	// A B-tree's metapage and one leaf; a third page allows for an
	// update that could not stay on its heap page.
	if pages > 3 {
		t.Errorf("the waiters table's primary key has %d pages after 1000 waits; want at most 3 (no entry per wait)", pages)
	}
}

// TestWaiters_ClosedLockerRowsDeleted: Close deletes the rows of a Locker
// that waited and, like building a Locker, the rows whose place ended over
// an hour ago (a crashed Locker's), but not newer ones.
func TestWaiters_ClosedLockerRowsDeleted(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a, b := lockers(t, dsn, "a", "b")
	pingPong(t, a, b, "gc", 2)
	count := func(where string) (n int) {
		queryRow(t, admin, `SELECT count(*) FROM baton_lock_waiters WHERE `+where, nil, &n)
		return n
	}
	if n := count("true"); n != 2 {
		t.Fatalf("%d waiters rows after both Lockers waited; want 2", n)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count("true"); n != 0 {
		t.Fatalf("%d waiters rows after both Lockers closed; want 0", n)
	}

	// Rows a crashed Locker left, after c and d were built and made their
	// first acquisitions (which sweep): one whose place ended two hours
	// ago, one a minute ago. The Close of a Locker that waited (d) sweeps
	// them too.
	c, d := lockers(t, dsn, "c", "d")
	for _, l := range []*baton.FencedLocker{c, d} {
		lease, err := l.TryAcquire(timeout(t, 10*time.Second), "first")
		if err != nil {
			t.Fatal(err)
		}
		_ = lease.Release(context.Background())
	}
	insertEnded(t, admin, "gc")
	pingPong(t, c, d, "gc", 1)
	if n := count("channel = 'crashed'"); n != 2 {
		t.Fatalf("%d rows of the crashed Locker before any Close; want 2", n)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count("channel = 'crashed' AND expires_at < clock_timestamp() - interval '1 hour'"); n != 0 {
		t.Errorf("the row whose place ended two hours ago is still there after a Locker that waited closed")
	}
	if n := count("channel = 'crashed'"); n != 1 {
		t.Errorf("%d rows of the crashed Locker left; want 1, the one whose place ended a minute ago", n)
	}

	// On a lock nobody waits on again, a Locker's first acquisition
	// sweeps them.
	insertEnded(t, admin, "orphan")
	e := dial(t, dsn)
	if n := count("name = 'orphan'"); n != 2 {
		t.Errorf("%d rows on a lock nobody waits on after a Locker was built; want both: only its first acquisition sweeps", n)
	}
	le, err := e.TryAcquire(timeout(t, 10*time.Second), "other")
	if err != nil {
		t.Fatal(err)
	}
	_ = le.Release(context.Background())
	if n := count("name = 'orphan'"); n != 1 {
		t.Errorf("%d rows on a lock nobody waits on after a Locker's first acquisition; want 1, the one whose place ended a minute ago", n)
	}
}

// insertEnded writes two rows of a crashed Locker on lock name, as its
// Close would not have deleted them: one whose place ended two hours ago,
// one a minute ago.
func insertEnded(t *testing.T, admin *pgxpool.Pool, name string) {
	t.Helper()
	for slot, ended := range []string{"2 hours", "1 minute"} {
		execSQL(t, admin, `INSERT INTO baton_lock_waiters (name, channel, slot, ticket, waiter, holder, ttl, expires_at)
			VALUES ($1, 'crashed', $2, nextval('baton_lock_ticket'), '0', 'crashed', interval '10s', clock_timestamp() - $3::interval)`,
			name, slot+1, ended)
	}
}

// TestWaiters_KeptOnBoundedLocks: a Locker that waits on ever new locks
// keeps its rows on the 64 it waited on last, not on all of them; taking
// free locks, which writes no row, does not count.
func TestWaiters_KeptOnBoundedLocks(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a, b := lockers(t, dsn, "a", "b")
	const locks = 70
	for i := range locks {
		pingPong(t, a, b, fmt.Sprintf("job-%d", i), 1) // b waits on job-i
	}
	// Acquisitions that did not wait write no row and evict none.
	for i := range 100 {
		l, err := b.Acquire(timeout(t, 10*time.Second), fmt.Sprintf("free-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var n, first int
	queryRow(t, admin, `SELECT count(DISTINCT name), count(DISTINCT name) FILTER (WHERE name = ANY ($1))
		FROM baton_lock_waiters`, []any{[]string{"job-0", "job-1", "job-2", "job-3", "job-4", "job-5"}}, &n, &first)
	if n != 64 {
		t.Errorf("rows on %d locks after a Locker waited on %d and took 100 free ones; want 64, the last it waited on", n, locks)
	}
	if first != 0 {
		t.Errorf("rows kept on %d of the 6 locks waited on first; want them dropped", first)
	}
}

// TestWaiters_OldTableReplaced: a waiters table of an older baton (keyed
// by name and ticket, without slots) is replaced by the first acquisition
// of a Locker whose user may, and the lock works; a user who may not is
// told how by its first acquisition. Building a Locker replaces nothing.
func TestWaiters_OldTableReplaced(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	makeTables(t, dsn) // the current schema
	execSQL(t, admin, `DROP TABLE baton_lock_waiters`)
	execSQL(t, admin, oldWaitersSQL)
	slot := func() (slot bool) {
		queryRow(t, admin, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'baton_lock_waiters'::regclass AND attname = 'slot')`, nil, &slot)
		return slot
	}

	// A user who may not drop it is told what to do; trying again would
	// not mend it.
	app := dial(t, dmlUser(t, admin, dsn))
	_, err := app.TryAcquire(timeout(t, 10*time.Second), "upgraded")
	if !errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "older baton") || !strings.Contains(err.Error(), `DROP TABLE "baton_lock_waiters"`) {
		t.Fatalf("TryAcquire by a user who may not replace the old waiters table: %v; want ErrInvalidOption, not ErrUnavailable, saying it is an older baton's and how to drop it", err)
	}

	a, b := lockers(t, dsn, "a", "b")
	if slot() {
		t.Fatal("building a Locker replaced the old waiters table")
	}
	pingPong(t, a, b, "upgraded", 2)
	if !slot() {
		t.Fatal("the old waiters table was kept")
	}
}

// TestWaiters_HeadLeaves_NextTold: the first waiter gives up while a
// frozen holder's lease still runs; the second, asleep for up to
// RenewEvery as waiters behind the first are, is told that it is first
// now, and takes the lock right after the frozen holder's lease ends by
// the database's clock, not at its next timed look.
func TestWaiters_HeadLeaves_NextTold(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	const holderTTL, ttl = 2 * time.Second, 30 * time.Second // the waiters' RenewEvery: 10s
	h := startHolder(t, "hold-baton", dsn, "job", holderTTL)
	x := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("x"))
	y := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("y"))
	batontest.HeadLeaves(t, x.Acquire, y.Acquire, "job",
		func(n int) {
			t.Helper()
			batontest.WaitFor(t, 10*time.Second, "waiters queued", func() bool { return queued(t, admin, "job") == n })
		},
		func() time.Time {
			if err := h.freeze(); err != nil {
				t.Fatal(err)
			}
			return time.Now().Add(holderTTL) // its lease ends holderTTL after its last renewal, at the latest
		}, ttl/3)
}
