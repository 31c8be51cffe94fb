package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/postgres"
)

// TestLease_ConnectionsKilled_LostWithinTTL kills the holder's connections
// with pg_terminate_backend. Killed once, the holder reconnects and keeps
// its lease: the lease is a row, not a session. Killed and kept out (its
// role may no longer log in), it loses the lease within one TTL, its work
// context is cancelled, and only then can another client take the lock,
// after the row's expiry by the database's clock, with a higher token.
func TestLease_ConnectionsKilled_LostWithinTTL(t *testing.T) {
	const ttl = 2 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	makeTables(t, dsn) // by this user: the victim's role, dropped at the end, must own nothing
	taker := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("taker"))

	role := fmt.Sprintf("victim_%d", time.Now().UnixNano()%1e9)
	execSQL(t, admin, "CREATE ROLE "+role+" LOGIN SUPERUSER")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP ROLE "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	q := u.Query()
	q.Set("application_name", role)
	u.RawQuery = q.Encode()
	victim := dial(t, u.String(), baton.WithTTL(ttl), baton.WithHolder("victim"))

	lease, err := victim.Acquire(timeout(t, 10*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	work := lease.Context()
	kill := func() int {
		var n int
		queryRow(t, admin, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, []any{role}, &n)
		return n
	}
	expiry := func() time.Time {
		var e time.Time
		queryRow(t, admin, `SELECT expires_at FROM baton_lock WHERE name = 'invoices'`, nil, &e)
		return e
	}

	// Killed once: the next renewal goes through a new connection.
	if n := kill(); n == 0 {
		t.Fatal("the victim has no connection to kill")
	}
	before := expiry()
	batontest.WaitFor(t, 2*ttl, "a renewal after the connection was killed", func() bool { return expiry().After(before) })
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost after one killed connection, though the holder could reconnect: %v", err)
	}

	// Killed and kept out.
	execSQL(t, admin, "ALTER ROLE "+role+" NOLOGIN")
	kill()
	cut := time.Now()
	batontest.WaitFor(t, 5*time.Second, "the victim's backends gone", func() bool { return kill() == 0 })
	end := expiry() // no renewal can land any more

	var lostAt time.Time
	select {
	case <-lease.Done():
		lostAt = time.Now()
	case <-time.After(ttl + 2*time.Second):
		t.Fatalf("lease not lost %v after its connections were killed (TTL %v)", time.Since(cut), ttl)
	}
	// The lease ends at its local deadline: a TTL (less the drift) after the
	// last renewal it heard back from, all of which went out before the
	// cut. When this goroutine woke to see it is scheduling, not the lease.
	if d := lease.Deadline().Sub(cut); d > ttl {
		t.Errorf("lease's local deadline %v after the kill; want within one TTL (%v)", d, ttl)
	}
	// And it ended at that deadline, not later: a second is scheduling
	// on a loaded machine, well short of a wait for some timeout.
	if late := lostAt.Sub(lease.Deadline()); late > time.Second {
		t.Errorf("lease ended %v after its local deadline", late)
	}
	if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", lease.Err())
	}
	var lost *baton.LostError
	if !errors.As(context.Cause(work), &lost) || lost.Name != "invoices" {
		t.Errorf("work ctx cause = %v, want *LostError for invoices", context.Cause(work))
	}

	lt, err := taker.Acquire(timeout(t, 3*ttl), "invoices")
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	takenAt := time.Now()
	defer lt.Release(context.Background())
	var acquired time.Time
	queryRow(t, admin, `SELECT acquired_at FROM baton_lock WHERE name = 'invoices'`, nil, &acquired)
	if acquired.Before(end) {
		t.Errorf("taken at %v by the database's clock, before the victim's lease expired at %v", acquired, end)
	}
	if !lostAt.Before(takenAt) {
		t.Errorf("victim stopped at +%v, not before the taker acquired at +%v", lostAt.Sub(cut), takenAt.Sub(cut))
	}
	if lt.Token() <= lease.Token() {
		t.Errorf("taker's token %d <= victim's %d", lt.Token(), lease.Token())
	}
	t.Logf("killed at 0; victim's work stopped at +%v (TTL %v); the taker acquired %v after the victim's lease expired by the database's clock",
		lostAt.Sub(cut).Round(time.Millisecond), ttl, acquired.Sub(end).Round(time.Millisecond))
}

// TestAcquire_WokenByRelease_FIFO queues four waiters and releases the lock
// down the line: each release hands the lock to exactly the next waiter,
// in the order they queued, and wakes it at once (well before the fallback
// re-check). No waiter sends a statement meanwhile: the woken one holds the
// lock without a round trip, the others sleep (no herd).
func TestAcquire_WokenByRelease_FIFO(t *testing.T) {
	// A waiter's own re-check is a statement, counted below. Its bound is
	// RenewEvery, TTL/3: at a 30s TTL, 10s, which a loaded machine can
	// spend between the first waiter queueing and the last release. At 5
	// minutes no re-check comes within the test.
	const ttl = 5 * time.Minute
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	holder := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("holder"))
	prev, err := holder.Acquire(timeout(t, 10*time.Second), "fifo")
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	waiters := make([]*baton.FencedLocker, n)
	leases := make([]*baton.FencedLease, n)
	got := make(chan int, n)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i := range n {
		waiters[i] = dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder(fmt.Sprintf("waiter-%d", i)))
		listenFirst(t, waiters[i])
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := waiters[i].Acquire(timeout(t, 2*time.Minute), "fifo")
			if err != nil {
				errc <- err
				return
			}
			leases[i] = l
			got <- i
		}()
		batontest.WaitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "fifo") == i+1 })
	}
	attempts := func() []int64 {
		a := make([]int64, n)
		for i, w := range waiters {
			a[i] = postgres.Attempts(w.Locker())
		}
		return a
	}
	var latencies []time.Duration
	for i := range n {
		before := attempts()
		start := time.Now()
		if err := prev.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case j := <-got:
			if j != i {
				t.Fatalf("waiter %d got the lock before waiter %d, which queued first", j, i)
			}
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d not woken 10s after the release (the fallback re-check is %v)", i, ttl/3)
		}
		latencies = append(latencies, time.Since(start))
		after := attempts()
		for j := range n {
			if d := after[j] - before[j]; d != 0 {
				t.Errorf("release %d: waiter %d sent %d acquisition statements, want none", i, j, d)
			}
		}
		prev = leases[i]
	}
	if err := prev.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Each wake came within 10s, with no statement sent: the NOTIFY, since
	// no re-check comes for 100s. How fast it was is for the log, not a
	// bound a loaded machine could break.
	t.Logf("release-to-acquisition latencies %v", latencies)
}

// TestAcquire_CrashedHolder_TakenOverAtExpiry: a waiter whose own fallback
// bound is long (100s) still takes over from a crashed holder right after
// the holder's lease expires by the database's clock, because it sleeps
// until that expiry as the database reported it.
func TestAcquire_CrashedHolder_TakenOverAtExpiry(t *testing.T) {
	// The holder must keep its lease until the crash: renewing every 250ms
	// with 3s to spare, a late renewal on a loaded machine does not lose it
	// early (at a 1s TTL one late by 0.65s would).
	const ttl, renew = 3 * time.Second, 250 * time.Millisecond
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	holder, err := postgres.New(timeout(t, 10*time.Second), pool, baton.WithTTL(ttl), baton.WithRenewEvery(renew), baton.WithHolder("crasher"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	lh, err := holder.Acquire(timeout(t, 10*time.Second), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	waiter := dial(t, dsn, baton.WithTTL(5*time.Minute), baton.WithHolder("waiter")) // re-checks on its own every 100s
	type res struct {
		l   *baton.FencedLease
		err error
	}
	done := make(chan res, 1)
	go func() {
		l, err := waiter.Acquire(timeout(t, 30*time.Second), "nightly")
		done <- res{l, err}
	}()
	batontest.WaitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "nightly") == 1 })
	// Let the waiter see at least one renewal, so it sleeps on a later
	// expiry than the first one.
	var first time.Time
	queryRow(t, admin, `SELECT expires_at FROM baton_lock WHERE name = 'nightly'`, nil, &first)
	batontest.WaitFor(t, 3*ttl, "a renewal", func() bool {
		var e time.Time
		queryRow(t, admin, `SELECT expires_at FROM baton_lock WHERE name = 'nightly'`, nil, &e)
		return e.After(first)
	})

	pool.Close() // the crash: no renewal, no release; Close waits for one in flight
	crashed := time.Now()
	var end time.Time
	queryRow(t, admin, `SELECT expires_at FROM baton_lock WHERE name = 'nightly'`, nil, &end)

	r := <-done
	if r.err != nil {
		t.Fatalf("takeover: %v", r.err)
	}
	defer r.l.Release(context.Background())
	var after time.Duration
	queryRow(t, admin, `SELECT (extract(epoch FROM acquired_at - $1::timestamptz) * 1e6)::bigint * interval '1 microsecond' FROM baton_lock WHERE name = 'nightly'`, []any{end}, &after)
	t.Logf("crashed holder's lease expired (database clock) at +%v after the crash; waiter acquired %v after that expiry (its fallback bound is 100s)",
		end.Sub(crashed).Round(time.Millisecond), after.Round(time.Millisecond))
	if after < 0 {
		t.Fatalf("acquired %v before the lease expired by the database's clock", -after)
	}
	// At the expiry it is a timer and one statement; at the fallback bound
	// it would be up to 100s. 2s leaves a loaded machine room, and is
	// short of the holder's TTL (3s).
	if after > 2*time.Second {
		t.Errorf("acquired %v after the expiry; want it at the expiry, not at the fallback bound", after)
	}
	if r.l.Token() <= lh.Token() {
		t.Errorf("token %d after takeover <= crashed holder's %d", r.l.Token(), lh.Token())
	}
}

// TestTokens_IncreaseInHoldOrder has four clients take the lock in turns
// as fast as they can, and checks that no two hold it at once, that the
// tokens, in the order the lock was held, strictly increase, and that
// every client got its turns. Each holder stays inside across a round trip
// to the database, in which the row must hold its lease's token: a second
// holder let in meanwhile would be inside too, or have taken the row.
func TestTokens_IncreaseInHoldOrder(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	const clients, rounds = 4, 25
	var mu sync.Mutex
	var tokens []baton.Token
	var inside int
	var wg sync.WaitGroup
	errc := make(chan error, clients*(2*rounds+1)) // room for every error: a sender never blocks
	for i := range clients {
		l := dial(t, dsn, baton.WithTTL(5*time.Second), baton.WithHolder(fmt.Sprintf("client-%d", i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ctx := timeout(t, 30*time.Second)
				lease, err := l.Acquire(ctx, "tokens")
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				inside++
				n := inside
				mu.Unlock()
				if n != 1 {
					errc <- fmt.Errorf("%d holders at once", n)
				}
				var live int64
				if err := admin.QueryRow(ctx, `SELECT token FROM baton_lock WHERE name = 'tokens' AND expires_at > clock_timestamp()`).Scan(&live); err != nil || live != int64(lease.Token()) {
					errc <- fmt.Errorf("holder of token %d: the row's live token is %d (%v)", lease.Token(), live, err)
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				inside--
				mu.Unlock()
				if err := lease.Release(context.Background()); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if len(tokens) != clients*rounds {
		t.Fatalf("%d holds, want %d", len(tokens), clients*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("hold %d got token %d after %d", i, tokens[i], tokens[i-1])
		}
	}
}

// TestListener_Reconnects kills a waiting Locker's LISTEN connection: it
// connects again, and the waiter is still woken by the next release.
func TestListener_Reconnects(t *testing.T) {
	const ttl = 30 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	holder := dial(t, dsn, baton.WithTTL(ttl))
	lh, err := holder.Acquire(timeout(t, 10*time.Second), "relisten")
	if err != nil {
		t.Fatal(err)
	}
	waiter := dial(t, dsn, baton.WithTTL(ttl))
	done := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(timeout(t, 20*time.Second), "relisten")
		if err == nil {
			err = l.Release(context.Background())
		}
		done <- err
	}()
	batontest.WaitFor(t, 10*time.Second, "waiter queued", func() bool { return queued(t, admin, "relisten") == 1 })
	listen := `LISTEN "` + postgres.Channel(waiter.Locker()) + `"`
	listeners := func() (pids []int32) {
		rows, err := admin.Query(timeout(t, 5*time.Second), `SELECT pid FROM pg_stat_activity WHERE query = $1`, listen)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var pid int32
			if err := rows.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		return pids
	}
	// The waiter's first wait starts the listener once it has queued.
	var old []int32
	batontest.WaitFor(t, 10*time.Second, "the waiter's listener connection", func() bool {
		old = listeners()
		return len(old) == 1
	})
	execSQL(t, admin, `SELECT pg_terminate_backend($1)`, old[0])
	batontest.WaitFor(t, 10*time.Second, "a new listener connection", func() bool {
		p := listeners()
		return len(p) == 1 && p[0] != old[0]
	})
	start := time.Now()
	if err := lh.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(ttl / 6):
		t.Fatalf("waiter not woken %v after the release", ttl/6)
	}
	t.Logf("woken %v after the release, through the new listener connection", time.Since(start).Round(time.Millisecond))
}

// TestAcquire_SeesQueueAsOfRowLock: an acquisition that waits for the
// lock's row must judge the queue as it is once it has the row, not as it
// was when it started. Here a waiter queued ahead of B leaves (it was handed
// the lock and released it) while B waits for the row: B must then take the
// free lock at once, not queue behind a waiter that is gone and sleep until
// its own re-check, 10s later, with the lock free.
func TestAcquire_SeesQueueAsOfRowLock(t *testing.T) {
	const ttl = 30 * time.Second
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	makeTables(t, dsn)
	b := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("stale-b"))
	// A holder and a waiter queued behind it, written by hand.
	execSQL(t, admin, `INSERT INTO baton_lock (name, holder, token, acquired_at, expires_at)
		VALUES ('ghost', 'holder', nextval('baton_lock_token'), clock_timestamp(), clock_timestamp() + interval '1 hour')`)
	execSQL(t, admin, `INSERT INTO baton_lock_waiters (name, channel, slot, ticket, waiter, holder, ttl, expires_at)
		VALUES ('ghost', 'nobody', 1, nextval('baton_lock_ticket'), '0', 'waiter-a', interval '1 hour', clock_timestamp() + interval '1 hour')`)

	ctx := timeout(t, time.Minute)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT FROM baton_lock WHERE name = 'ghost' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, b, timeout(t, time.Minute), "ghost")
	batontest.WaitFor(t, 10*time.Second, "B waiting for the row's lock", func() bool {
		var n int
		queryRow(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'baton stale-b' AND wait_event_type = 'Lock'`, nil, &n)
		return n > 0
	})
	// Meanwhile the lock went to waiter-a and waiter-a released it.
	if _, err := tx.Exec(ctx, `DELETE FROM baton_lock_waiters WHERE name = 'ghost'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE baton_lock SET expires_at = '-infinity' WHERE name = 'ghost'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	select {
	case <-got.done:
		if got.err != nil {
			t.Fatal(got.err)
		}
		t.Logf("B took the freed lock %v after it was freed", time.Since(freed).Round(time.Millisecond))
	case <-time.After(ttl / 6):
		t.Fatalf("B still waiting %v after the lock was freed with nobody else queued", ttl/6)
	}
}
