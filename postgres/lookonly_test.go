package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/postgres"
)

// oldWaitersSQL is the waiters table of an older baton: keyed (name,
// ticket), without slots.
const oldWaitersSQL = `CREATE UNLOGGED TABLE baton_lock_waiters (
	name text NOT NULL, ticket bigint NOT NULL, channel text NOT NULL, waiter text NOT NULL,
	holder text NOT NULL, ttl interval NOT NULL, holder_clock timestamptz, expires_at timestamptz NOT NULL,
	PRIMARY KEY (name, ticket))`

// relations lists the tables, sequences and views of the test's database,
// outside the system's schemas.
func relations(t *testing.T, admin *pgxpool.Pool) []string {
	t.Helper()
	var rels []string
	queryRow(t, admin, `SELECT coalesce(array_agg(r ORDER BY r COLLATE "C"), '{}') FROM (
		SELECT n.nspname || '.' || c.relname || ' (' || c.relkind::text || ')' AS r
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'S', 'v', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%') x`, nil, &rels)
	return rels
}

// openLook opens a Locker on dsn with the URL parameters params (after
// the DSN's own), as baton status and baton release --force do.
func openLook(t *testing.T, ctx context.Context, dsn, params string) *baton.Locker {
	t.Helper()
	u, err := url.Parse(dsn + params)
	if err != nil {
		t.Fatal(err)
	}
	l, err := postgres.Open(ctx, u, baton.WithTTL(5*time.Second), baton.WithHolder("look"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// look runs what baton status, Leader and baton release --force run on
// the lock name, and returns the locks Inspect lists, all of them then
// name's, the term, and ForceRelease's error.
func look(t *testing.T, ctx context.Context, l *baton.Locker, name string) (all, named []baton.LockInfo, term baton.Term, forced error) {
	t.Helper()
	insp := l.Backend().(baton.Inspector)
	all, err := insp.Inspect(ctx)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if named, err = insp.Inspect(ctx, name); err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	if term, err = l.Leader(ctx, name); err != nil {
		t.Fatalf("Leader(%q): %v", name, err)
	}
	_, forced = l.Backend().(baton.ForceReleaser).ForceRelease(ctx, name)
	return all, named, term, forced
}

// TestInspect_MissingTables_CreatesNothing: baton status (Open, then
// Inspect), Leader and baton release --force on a database without the
// lock tables, or with a mistyped ?table=, report every lock free, as etcd
// and ZooKeeper do for a prefix nobody used, and create nothing: looking
// at a lock service must not change it.
func TestInspect_MissingTables_CreatesNothing(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	ctx := timeout(t, 30*time.Second)
	for _, params := range []string{"", "&table=typo_lock", "&table=public.typo_lock"} {
		l := openLook(t, ctx, dsn, params)
		all, named, term, forced := look(t, ctx, l, "job")
		if len(all) != 0 || !reflect.DeepEqual(named, []baton.LockInfo{{Name: "job"}}) || !term.NoLeader() {
			t.Errorf("%q: Inspect() = %+v, Inspect(job) = %+v, Leader = %+v; want no lock held, job free, no leader", params, all, named, term)
		}
		var nae *baton.NotAcquiredError
		if !errors.As(forced, &nae) || !nae.Free {
			t.Errorf("%q: ForceRelease = %v; want a *baton.NotAcquiredError with Free", params, forced)
		}
		infos, err := l.Backend().(baton.Inspector).Inspect(ctx, "b", "a", "b")
		if err != nil || !reflect.DeepEqual(infos, []baton.LockInfo{{Name: "a"}, {Name: "b"}}) {
			t.Errorf("%q: Inspect(b, a, b) = %+v, %v; want a and b free, once each, sorted", params, infos, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if rels := relations(t, admin); len(rels) != 0 {
		t.Fatalf("after Open, Inspect, Leader and ForceRelease on a database without lock tables, it has %v; want nothing created", rels)
	}
}

// TestInspect_OldWaitersTable_LeftAsItIs: a waiters table of an older
// baton, whose Lockers may still run, is left as it is, rows and all, by
// a Locker that only looks; Inspect reads it (its waiters counted), and a
// forced release, which cannot hand the lock on through it, says what to
// do and changes nothing.
func TestInspect_OldWaitersTable_LeftAsItIs(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	ctx := timeout(t, time.Minute)
	makeTables(t, dsn)
	execSQL(t, admin, `DROP TABLE baton_lock_waiters`)
	execSQL(t, admin, oldWaitersSQL)
	// The older baton's: a holder, a waiter queued behind it, and a place
	// that ended two hours ago, which the sweep would delete.
	execSQL(t, admin, `INSERT INTO baton_lock (name, holder, token, acquired_at, expires_at)
		VALUES ('job', 'old-holder', nextval('baton_lock_token'), clock_timestamp(), clock_timestamp() + interval '1 hour')`)
	execSQL(t, admin, `INSERT INTO baton_lock_waiters (name, ticket, channel, waiter, holder, ttl, expires_at) VALUES
		('job', nextval('baton_lock_ticket'), 'old', '1', 'old-waiter', interval '1 hour', clock_timestamp() + interval '1 hour'),
		('job', nextval('baton_lock_ticket'), 'old', '2', 'old-gone', interval '10s', clock_timestamp() - interval '2 hours')`)
	snapshot := func() (s string) {
		queryRow(t, admin, `SELECT 'table ' || 'baton_lock_waiters'::regclass::oid::text
			|| ', waiters ' || coalesce((SELECT string_agg(w::text, '; ' ORDER BY w.ticket) FROM baton_lock_waiters w), '')
			|| ', leases ' || coalesce((SELECT string_agg(l::text, '; ' ORDER BY l.name) FROM baton_lock l), '')`, nil, &s)
		return s
	}
	before := snapshot()

	l := openLook(t, ctx, dsn, "")
	all, named, term, forced := look(t, ctx, l, "job")
	for _, infos := range [][]baton.LockInfo{all, named} {
		if len(infos) != 1 || infos[0].Name != "job" || infos[0].Holder != "old-holder" || infos[0].Waiters != 1 {
			t.Errorf("Inspect = %+v; want job held by old-holder, 1 waiter", infos)
		}
	}
	if term.Leader != "old-holder" {
		t.Errorf("Leader = %+v; want old-holder", term)
	}
	t.Logf("ForceRelease: %v", forced)
	if forced == nil || errors.Is(forced, baton.ErrUnavailable) || !strings.Contains(forced.Error(), "older baton") || !strings.Contains(forced.Error(), "postgres.Init") {
		t.Errorf("ForceRelease with an older baton's waiters table: %v; want an error, not ErrUnavailable, saying it is an older baton's and to run postgres.Init", forced)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); after != before {
		t.Fatalf("an older baton's waiters table and the lease table after a Locker only looked:\n%s\nwant them as they were:\n%s", after, before)
	}
}

// TestInspect_NoSweep_FirstAcquireSweeps: a Locker that only looks does
// not sweep the waiters table; the first acquisition of a Locker does,
// once the tables exist.
func TestInspect_NoSweep_FirstAcquireSweeps(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	ctx := timeout(t, time.Minute)
	makeTables(t, dsn)
	insertEnded(t, admin, "orphan") // places that ended two hours and a minute ago
	count := func() (n int) {
		queryRow(t, admin, `SELECT count(*) FROM baton_lock_waiters WHERE channel = 'crashed'`, nil, &n)
		return n
	}

	l := openLook(t, ctx, dsn, "")
	look(t, ctx, l, "orphan")
	if n := count(); n != 2 {
		t.Fatalf("%d rows of a crashed Locker left after Open, Inspect, Leader and ForceRelease; want both: a Locker that only looks deletes nothing", n)
	}
	lease, err := l.TryAcquire(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d rows of a crashed Locker left after the first acquisition; want 1, the one whose place ended a minute ago", n)
	}
}

// TestAcquire_First_CreatesTables: Dial on a table that does not exist
// creates nothing; the Locker's first acquisitions, many at once, create
// it, and the lock works.
func TestAcquire_First_CreatesTables(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	ctx := timeout(t, time.Minute)
	l := dial(t, dsn, baton.WithPrefix("fresh_lock"), baton.WithHolder("first"))
	if rels := relations(t, admin); len(rels) != 0 {
		t.Fatalf("after Dial: %v; want nothing created before the first acquisition", rels)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.TryAcquire(ctx, fmt.Sprintf("job-%d", i))
			if err == nil {
				err = lease.Release(ctx)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a first acquisition on a missing table: %v", err)
		}
	}
	want := []string{"public.fresh_lock (r)", "public.fresh_lock_ticket (S)", "public.fresh_lock_token (S)", "public.fresh_lock_waiters (r)"}
	if rels := relations(t, admin); !reflect.DeepEqual(rels, want) {
		t.Fatalf("after the first acquisitions: %v; want %v", rels, want)
	}
	first, err := l.Acquire(ctx, "job-0")
	if err != nil {
		t.Fatal(err)
	}
	other := dial(t, dsn, baton.WithPrefix("fresh_lock"), baton.WithHolder("other"))
	if _, err := other.TryAcquire(ctx, "job-0"); !errors.Is(err, baton.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v; want ErrNotAcquired", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := other.TryAcquire(ctx, "job-0")
	if err != nil {
		t.Fatal(err)
	}
	if second.Token() <= first.Token() {
		t.Errorf("token %d after %d", second.Token(), first.Token())
	}
	_ = second.Release(ctx)
}

// TestAcquire_First_NoCreatePrivilege: a user who may not create the
// missing lock tables builds its Locker; its first Acquire, TryAcquire
// and Observe fail with the *baton.OptionError that New gave before,
// saying to create them with postgres.Init and which grants it needs, not
// ErrUnavailable, and create nothing; once the owner has run Init and
// granted them, the same Locker's next acquisition works.
func TestAcquire_First_NoCreatePrivilege(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	ctx := timeout(t, time.Minute)
	execSQL(t, admin, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`) // PostgreSQL 15's default, on any version
	app := roleUser(t, admin, dsn, "GRANT USAGE ON SCHEMA public TO %[1]s")
	l := dial(t, app, baton.WithTTL(5*time.Second), baton.WithHolder("app"))
	for _, c := range []struct {
		what string
		call func() error
	}{
		{"TryAcquire", func() error { _, err := l.TryAcquire(ctx, "x"); return err }},
		{"Acquire", func() error { _, err := l.Acquire(ctx, "x"); return err }},
		{"Observe", func() error { _, err := l.Observe(ctx, "x"); return err }},
	} {
		err := c.call()
		t.Logf("%s: %v", c.what, err)
		if !errors.Is(err, baton.ErrInvalidOption) || errors.Is(err, baton.ErrUnavailable) {
			t.Fatalf("%s by a user who may not create the tables: %v; want ErrInvalidOption, not ErrUnavailable", c.what, err)
		}
		for _, want := range []string{"permission denied", "create them once as a user who may (postgres.Init", `GRANT SELECT, INSERT, UPDATE, DELETE ON "baton_lock", "baton_lock_waiters"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s by a user who may not create the tables: %v; want it to say %q", c.what, err, want)
			}
		}
	}
	if rels := relations(t, admin); len(rels) != 0 {
		t.Fatalf("after refused acquisitions: %v; want nothing created", rels)
	}

	if err := postgres.Init(ctx, admin, ""); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(app)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, admin, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON baton_lock, baton_lock_waiters TO %[1]s; GRANT USAGE ON SEQUENCE baton_lock_token, baton_lock_ticket TO %[1]s", u.User.Username()))
	lease, err := l.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatalf("TryAcquire once the owner ran Init and granted the privileges: %v", err)
	}
	_ = lease.Release(ctx)
}

// TestPrepare_ConcurrentFirstCalls_ShareOneAttempt: the first acquisitions
// of a Locker whose server does not answer share one attempt at the
// tables, and each returns with it, or at its own ctx's end. Before, they
// took the attempt in turn, each a request timeout: four callers returned
// after 1, 2, 3 and 4 request timeouts.
func TestPrepare_ConcurrentFirstCalls_ShareOneAttempt(t *testing.T) {
	dsn := pg.Database(t)
	p, pdsn := proxied(t, dsn)
	const requestTimeout = 2 * time.Second
	l := dial(t, pdsn, baton.WithRequestTimeout(requestTimeout))
	p.Block()
	defer p.Unblock()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	took := make([]time.Duration, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = l.TryAcquire(context.Background(), "job")
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, baton.ErrUnavailable) {
			t.Errorf("caller %d: %v; want ErrUnavailable", i, err)
		}
		// One shared attempt: each returns within about one request
		// timeout, far from the four in turn of before.
		if took[i] >= 5*requestTimeout/2 {
			t.Errorf("caller %d returned after %v; want about one request timeout (%v): the attempts ran in turn", i, took[i], requestTimeout)
		}
	}
	// A caller's own ctx ends its wait, the attempt under way or not.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire with a ctx of 100ms on a silent server = %v; want its ctx's end", err)
	}
}
