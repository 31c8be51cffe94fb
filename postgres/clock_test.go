package postgres_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/postgres"
)

// TestFaketime_DoesNotReachGo runs this test binary under faketime -f +1h.
// A libc program in the same environment (date) sees the skew; the Go
// binary does not, because Go reads the clock through the vDSO, not libc.
// So a real libfaketime skew cannot play a Go client with a wrong clock,
// and TestLease_WrongClientClock uses the client clock hook instead. If
// this test fails, libfaketime does reach Go: run the wrong-clock test in
// a helper process under faketime instead.
func TestFaketime_DoesNotReachGo(t *testing.T) {
	ft, err := exec.LookPath("faketime")
	if err != nil {
		testsvc.Unavailable(t, "faketime (Debian package faketime)", err)
	}
	cmd := exec.Command(ft, "-f", "+1h", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=now")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper under faketime: %v", err)
	}
	now := time.Now()
	skew := map[string]time.Duration{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, " ")
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("helper said %q", out)
		}
		skew[k] = time.Unix(0, ns).Sub(now)
	}
	if d := skew["date"] - time.Hour; d.Abs() > 5*time.Minute {
		t.Fatalf("faketime did not move date(1)'s clock by 1h (it is %v off): the experiment shows nothing", skew["date"].Round(time.Second))
	}
	if skew["go"].Abs() > 5*time.Minute {
		t.Fatalf("libfaketime moved this Go binary's clock by %v: a real skew is possible, use it", skew["go"].Round(time.Second))
	}
	t.Logf("under faketime -f +1h: date(1) is %v off, this Go binary %v off", skew["date"].Round(time.Second), skew["go"].Round(time.Second))
}

// TestLease_WrongClientClock plays clients whose wall clock is an hour
// ahead or behind (through the client clock hook). What they believe the
// time is reaches the database, in holder_clock, and decides nothing: the
// lease starts and ends by the database's clock, a skewed holder that stops
// renewing loses the lock one TTL after its last renewal (it cannot
// extend it), and a skewed client cannot take a lock another holder keeps
// renewing (it cannot steal it).
func TestLease_WrongClientClock(t *testing.T) {
	// The skewed holder must keep its lease until it stops, and the honest
	// one for two TTLs while the thief tries: renewing every 250ms with 3s
	// to spare, a late renewal on a loaded machine loses neither (at a 1s
	// TTL one late by 0.65s would, and the test would then see a theft).
	const ttl, renew = 3 * time.Second, 250 * time.Millisecond
	for name, skew := range map[string]time.Duration{"ahead_1h": time.Hour, "behind_1h": -time.Hour} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := pg.Database(t)
			admin := newPool(t, dsn)
			skewedClock := func() time.Time { return time.Now().Add(skew) }

			pool, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			skewed, err := postgres.New(timeout(t, 10*time.Second), pool, baton.WithTTL(ttl), baton.WithRenewEvery(renew), baton.WithHolder("skewed"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = skewed.Close() })
			postgres.SetClock(skewed.Locker(), skewedClock)
			honest := dial(t, dsn, baton.WithTTL(ttl), baton.WithRenewEvery(renew), baton.WithHolder("honest"))

			ls, err := skewed.Acquire(timeout(t, 10*time.Second), "clock")
			if err != nil {
				t.Fatal(err)
			}
			// Offsets from the database's clock, in seconds.
			row := func() (holderClock, acquired, left float64) {
				queryRow(t, admin, `SELECT extract(epoch FROM holder_clock - clock_timestamp())::float8,
					extract(epoch FROM acquired_at - clock_timestamp())::float8,
					extract(epoch FROM expires_at - clock_timestamp())::float8
					FROM baton_lock WHERE name = 'clock'`, nil, &holderClock, &acquired, &left)
				return
			}
			hc, acq, left := row()
			t.Logf("skewed holder's row: holder_clock %+.0fs, acquired_at %+.3fs, expires_at %+.3fs from the database's clock", hc, acq, left)
			if d := time.Duration(hc*float64(time.Second)) - skew; d.Abs() > time.Minute {
				t.Fatalf("holder_clock is %+.0fs from the database's clock; the skewed client's clock (%v) did not reach the database", hc, skew)
			}
			if acq > 0 || acq < -5 {
				t.Errorf("acquired_at %+.3fs from the database's clock; want the database's own time of acquisition", acq)
			}
			if left <= 0 || left > ttl.Seconds() {
				t.Errorf("expires_at %+.3fs from the database's clock; want within (0, TTL]", left)
			}
			// Renewals extend from the database's clock too.
			var first time.Time
			queryRow(t, admin, `SELECT expires_at FROM baton_lock WHERE name = 'clock'`, nil, &first)
			batontest.WaitFor(t, 3*ttl, "a renewal", func() bool {
				var e time.Time
				queryRow(t, admin, `SELECT expires_at FROM baton_lock WHERE name = 'clock'`, nil, &e)
				return e.After(first)
			})
			if _, _, left := row(); left <= 0 || left > ttl.Seconds() {
				t.Errorf("after a renewal expires_at is %+.3fs from the database's clock; want within (0, TTL]", left)
			}

			// Cannot extend: the skewed holder stops renewing (its pool
			// closes); the honest client takes over once its row expires by
			// the database's clock, one TTL after its last renewal.
			pool.Close()
			var end time.Time
			queryRow(t, admin, `SELECT expires_at FROM baton_lock WHERE name = 'clock'`, nil, &end)
			lh, err := honest.Acquire(timeout(t, 3*ttl), "clock")
			if err != nil {
				t.Fatalf("takeover from the skewed holder: %v", err)
			}
			var after float64
			queryRow(t, admin, `SELECT extract(epoch FROM acquired_at - $1::timestamptz)::float8 FROM baton_lock WHERE name = 'clock'`, []any{end}, &after)
			// The honest client looks again every 250ms; an expiry read
			// off the skewed clock would be an hour off. 3s leaves a
			// loaded machine room and tells the two apart.
			if after < 0 || after > 3 {
				t.Errorf("the honest client acquired %+.3fs from the skewed holder's expiry by the database's clock; want just after it", after)
			}
			if lh.Token() <= ls.Token() {
				t.Errorf("token %d after takeover <= %d", lh.Token(), ls.Token())
			}

			// Cannot steal: a skewed client tries while the honest one
			// holds and renews, for two TTLs.
			thief := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("thief"))
			postgres.SetClock(thief.Locker(), skewedClock)
			_, err = thief.TryAcquire(timeout(t, 10*time.Second), "clock")
			var nae *baton.NotAcquiredError
			if !errors.As(err, &nae) || nae.Holder != "honest" || nae.Token != lh.Token() {
				t.Fatalf("skewed TryAcquire while honest holds: %v, want held by honest with token %d", err, lh.Token())
			}
			if _, err := thief.Acquire(timeout(t, 2*ttl), "clock"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("skewed Acquire for 2 TTLs while honest holds: %v, want its deadline to pass", err)
			}
			if err := lh.Err(); err != nil {
				t.Fatalf("honest lease ended while the skewed client tried: %v", err)
			}
			if err := lh.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
