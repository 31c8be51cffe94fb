package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/benchcycle"
	"github.com/baton-go/baton/postgres"
)

// Run with:
//
//	go test -run '^$' -bench . -count 5 ./postgres/ | tee bench.txt
//	go run golang.org/x/perf/cmd/benchstat@latest bench.txt
//
// Every benchmark runs baton's PostgreSQL lock and a session-level
// pg_advisory_lock (each client on a dedicated connection) side by side, on
// the same server, in the same run.

// advisoryCycler holds a session-level advisory lock on its own connection.
type advisoryCycler struct{ conn *pgx.Conn }

const advisoryKey = 4242

func (c *advisoryCycler) Lock(ctx context.Context) error {
	_, err := c.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(advisoryKey))
	return err
}

func (c *advisoryCycler) Unlock(ctx context.Context) error {
	var ok bool
	if err := c.conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(advisoryKey)).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("pg_advisory_unlock: not held")
	}
	return nil
}

// newCyclers builds n contenders of one kind, each with its own pool or
// connection, as n processes would have, and has each take and give back
// the lock once, so that connecting is not timed.
func newCyclers(b *testing.B, dsn, kind string, n int) []benchcycle.Cycler {
	b.Helper()
	out := make([]benchcycle.Cycler, n)
	for i := range out {
		switch kind {
		case "baton":
			fl := dial(b, dsn, baton.WithTTL(10*time.Second), baton.WithHolder("bench-"+strconv.Itoa(i)))
			out[i] = benchcycle.Baton(fl.Acquire)
		case "advisory":
			conn, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = conn.Close(context.Background()) })
			out[i] = &advisoryCycler{conn: conn}
		}
	}
	benchcycle.Warm(b, out...)
	return out
}

var kinds = []string{"baton", "advisory"}

// BenchmarkCycle measures one uncontended acquire + release.
func BenchmarkCycle(b *testing.B) {
	dsn := pg.Database(b)
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			benchcycle.Cycle(b, newCyclers(b, dsn, kind, 1)[0])
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}

// BenchmarkContended has 8 contenders loop lock/unlock on one lock and
// reports cycles per second, checking mutual exclusion as it goes, and
// fairness: the fewest and the most cycles any one contender got, as a
// fraction of its fair share (1 = exactly fair; 0 = starved).
func BenchmarkContended(b *testing.B) {
	dsn := pg.Database(b)
	const contenders = 8
	for _, kind := range kinds {
		b.Run(fmt.Sprintf("%s/%d", kind, contenders), func(b *testing.B) {
			r := benchcycle.Contend(b, newCyclers(b, dsn, kind, contenders))
			benchcycle.ReportCycles(b, r)
			benchcycle.ReportShares(b, r)
		})
	}
}

// BenchmarkTakeover freezes a holder process with SIGSTOP and measures how
// long a waiter takes to get the lock. For baton the figures are the time
// from the frozen holder's lease expiry, by the database's clock, to the
// waiter's acquisition, by the same clock (ms-after-expiry), and from the
// freeze to the acquisition (ms-after-freeze; aim: TTL + 150ms). An
// advisory lock's frozen holder keeps its connection, so it keeps the lock:
// the waiter gives up after 3 TTLs (taken-over = 0).
func BenchmarkTakeover(b *testing.B) {
	const ttl = time.Second
	dsn := pg.Database(b)
	admin := newPool(b, dsn)
	b.Run("baton", func(b *testing.B) {
		waiter := dial(b, dsn, baton.WithTTL(ttl), baton.WithHolder("waiter"))
		var afterExpiry, afterFreeze time.Duration
		for i := 0; i < b.N; i++ {
			name := fmt.Sprintf("takeover-%d-%d", b.N, i)
			h := startHolder(b, "hold-baton", dsn, name, ttl)
			type res struct {
				l   *baton.FencedLease
				err error
			}
			done := make(chan res, 1)
			go func() {
				l, err := waiter.Acquire(timeout(b, 10*ttl), name)
				done <- res{l, err}
			}()
			batontest.WaitFor(b, 10*time.Second, "waiter queued", func() bool { return queued(b, admin, name) == 1 })
			if err := h.freeze(); err != nil {
				b.Fatal(err)
			}
			frozen := time.Now()
			// Once none of its statements is running, its row's expiry is final.
			app := "baton frozen-" + strconv.Itoa(h.cmd.Process.Pid)
			batontest.WaitFor(b, 5*time.Second, "frozen holder idle", func() bool {
				var n int
				queryRow(b, admin, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'`, []any{app}, &n)
				return n == 0
			})
			var end time.Time
			queryRow(b, admin, `SELECT expires_at FROM baton_lock WHERE name = $1`, []any{name}, &end)
			r := <-done
			took := time.Since(frozen)
			if r.err != nil {
				b.Fatalf("takeover: %v", r.err)
			}
			var after float64
			queryRow(b, admin, `SELECT extract(epoch FROM acquired_at - $2::timestamptz)::float8 FROM baton_lock WHERE name = $1`, []any{name, end}, &after)
			if after < 0 {
				b.Fatalf("acquired %.3fs before the frozen holder's lease expired", -after)
			}
			if r.l.Token() <= h.token {
				b.Fatalf("token %d after takeover <= frozen holder's %d", r.l.Token(), h.token)
			}
			afterExpiry += time.Duration(after * float64(time.Second))
			afterFreeze += took
			_ = r.l.Release(context.Background())
			h.kill()
		}
		b.ReportMetric(float64(afterExpiry.Milliseconds())/float64(b.N), "ms-after-expiry")
		b.ReportMetric(float64(afterFreeze.Milliseconds())/float64(b.N), "ms-after-freeze")
	})
	b.Run("advisory", func(b *testing.B) {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(context.Background())
		bound := 3 * ttl
		if _, err := conn.Exec(context.Background(), fmt.Sprintf("SET lock_timeout = %d", bound.Milliseconds())); err != nil {
			b.Fatal(err)
		}
		takenOver := 0
		for i := 0; i < b.N; i++ {
			name := fmt.Sprintf("takeover-%d-%d", b.N, i)
			h := startHolder(b, "hold-advisory", dsn, name, ttl)
			if err := h.freeze(); err != nil {
				b.Fatal(err)
			}
			_, err := conn.Exec(context.Background(), "SELECT pg_advisory_lock(hashtext($1))", name)
			var pgErr *pgconn.PgError
			switch {
			case err == nil:
				takenOver++
				if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock(hashtext($1))", name); err != nil {
					b.Fatal(err)
				}
			case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
			default:
				b.Fatal(err)
			}
			h.kill()
		}
		b.ReportMetric(float64(takenOver)/float64(b.N), "taken-over")
		b.Logf("a frozen advisory-lock holder kept the lock past %v in %d of %d tries", bound, b.N-takenOver, b.N)
	})
	_ = postgres.MinTTL
}
