package postgres_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/postgres"
)

// factory builds the conformance factory for the database at dsn. Each
// client has its own pool, as a process would.
func factory(t *testing.T, dsn string) batontest.Factory {
	admin := newPool(t, dsn)
	return batontest.Factory{
		TTL:     postgres.MinTTL,
		Fenced:  true,
		Holds:   postgres.Holds,
		Observe: true,
		New: func(t testing.TB, opts ...baton.Option) (batontest.Client, error) {
			return newClient(t, dsn, 0, opts...)
		},
		Slow: func(t testing.TB, latency time.Duration, opts ...baton.Option) (batontest.Client, error) {
			return newClient(t, dsn, latency, opts...)
		},
		// The row's expiry moved to the past, as if its TTL had run out.
		ExpireSeenByRenewal: true,
		Expire: func(t testing.TB, l *baton.Lease) {
			execSQL(t, admin, `UPDATE baton_lock SET expires_at = '-infinity' WHERE name = $1`, l.Name())
		},
	}
}

// newClient is one conformance client: a pool of its own on dsn, as a
// process would have, closed when t ends, through a proxy of its own,
// each way latency late. Its Crash blocks the proxy: a cut cable, so that
// its statements go unanswered (not refused at once, as by a closed pool)
// and its leases end at their local deadline, as batontest.Client says.
func newClient(t testing.TB, dsn string, latency time.Duration, opts ...baton.Option) (batontest.Client, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := testsvc.NewDelayedProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))), latency)
	host, port, _ := net.SplitHostPort(p.Addr())
	cfg.ConnConfig.Host = host
	n, _ := strconv.Atoi(port)
	cfg.ConnConfig.Port = uint16(n)
	cfg.ConnConfig.Fallbacks = nil // none may bypass the proxy
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	fl, err := postgres.New(timeout(t, 10*time.Second), pool, opts...)
	if err != nil {
		return batontest.Client{}, err
	}
	return batontest.Client{Locker: fl.Locker(), Crash: func() {
		p.Block()
		t.Cleanup(p.Unblock) // before the Locker's Close: cleanups run last first
	}}, nil
}

func TestConformance(t *testing.T) {
	batontest.Run(t, factory(t, pg.Database(t)))
}
