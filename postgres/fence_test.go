package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	fencepg "github.com/baton-go/baton/fence/postgres"
	"github.com/baton-go/baton/postgres"
)

// TestCheckLease_WithFence writes invoices through a fence/postgres Store
// in the same database as the locks, checking the lease in the same
// transaction as the fence (the guide's save_invoice, plus the lease).
// The lease check closes the guide's first gap: once A's lease has expired
// by the database's clock, A's writes are refused even though B has not
// raised the fence yet; once B has, the fence refuses them too.
func TestCheckLease_WithFence(t *testing.T) {
	// The test ends A's lease by hand and waits for no expiry, and B's lease
	// must stay live through its writes: no renewal need land within it.
	const ttl = 5 * time.Minute
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	a := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("runner-1"))
	b := dial(t, dsn, baton.WithTTL(ttl), baton.WithHolder("runner-2"))
	// The fence writes through one connection of its own, as the guide's
	// save_invoice does.
	conn, err := pgx.Connect(timeout(t, 10*time.Second), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	store, err := fencepg.New(timeout(t, 10*time.Second), conn)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, admin, `CREATE TABLE invoices (client_id int PRIMARY KEY, token bigint NOT NULL)`)

	save := func(lease *baton.FencedLease, client int) error {
		return store.WithTx(timeout(t, 10*time.Second), "invoices", lease.Token(), func(ctx context.Context, tx pgx.Tx) error {
			if err := postgres.CheckLease(ctx, tx, lease); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO invoices VALUES ($1, $2) ON CONFLICT (client_id) DO NOTHING`, client, int64(lease.Token()))
			return err
		})
	}

	la, err := a.Acquire(timeout(t, 10*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	if err := save(la, 1); err != nil {
		t.Fatalf("A's write while it holds the lease: %v", err)
	}

	// A's lease ends by the database's clock; nobody has taken the lock.
	execSQL(t, admin, `UPDATE baton_lock SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE name = 'invoices'`)
	err = save(la, 2)
	if !errors.Is(err, baton.ErrLeaseLost) {
		t.Fatalf("A's write after its lease expired: %v, want ErrLeaseLost", err)
	}
	var lost *baton.LostError
	if !errors.As(err, &lost) || lost.Token != la.Token() {
		t.Errorf("error %v is not a *LostError for token %d", err, la.Token())
	}
	// The fence alone would still have taken it: the guide's first gap.
	if err := store.Raise(timeout(t, 10*time.Second), "invoices", la.Token()); err != nil {
		t.Fatalf("fence refused A's token before B raised it: %v", err)
	}

	lb, err := b.Acquire(timeout(t, 10*time.Second), "invoices")
	if err != nil {
		t.Fatal(err)
	}
	if err := save(lb, 2); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	err = save(la, 3)
	var stale *baton.StaleTokenError
	if !errors.As(err, &stale) || stale.Got != la.Token() || stale.Newest != lb.Token() {
		t.Fatalf("A's write after B raised the fence: %v, want a *StaleTokenError (got %d, newest %d)", err, la.Token(), lb.Token())
	}

	rows, err := admin.Query(timeout(t, 10*time.Second), `SELECT client_id, token FROM invoices ORDER BY client_id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (c [2]int64, err error) {
		err = r.Scan(&c[0], &c[1])
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int64{{1, int64(la.Token())}, {2, int64(lb.Token())}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("invoices %v, want %v", got, want)
	}
}

// TestCheckLease_BadArguments: no lease, no querier (nil, or a nil
// *pgxpool.Pool), or a lease of another backend is an invalid option, not
// a panic or a check against some row; Init refuses a nil pool likewise.
func TestCheckLease_BadArguments(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	ctx := timeout(t, 30*time.Second)
	lease, err := dial(t, dsn, baton.WithTTL(5*time.Second)).Acquire(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if err := postgres.CheckLease(ctx, admin, nil); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("CheckLease of a nil lease = %v, want ErrInvalidOption", err)
	}
	if err := postgres.CheckLease(ctx, nil, lease); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("CheckLease in a nil querier = %v, want ErrInvalidOption", err)
	}
	var pool *pgxpool.Pool
	if err := postgres.CheckLease(ctx, pool, lease); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("CheckLease in a nil *pgxpool.Pool = %v, want ErrInvalidOption", err)
	}
	if err := postgres.Init(ctx, pool, ""); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("Init on a nil *pgxpool.Pool = %v, want ErrInvalidOption", err)
	}
	var conn *pgx.Conn
	if err := postgres.Init(ctx, conn, ""); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("Init on a nil *pgx.Conn = %v, want ErrInvalidOption", err)
	}

	// Leases of other backends, with their keys' shapes (an etcd key, a
	// ZooKeeper node), and a key of this backend's shape naming another
	// lock: CheckLease reads only the key, the name and the token.
	for _, key := range []string{"/baton/lock/invoices/694d8c1a2b3c4d5e", "/baton/invoices/_c_9f3b2e-lock-0000000001", "baton_lock/payroll"} {
		cfg, err := baton.NewConfig()
		if err != nil {
			t.Fatal(err)
		}
		fl := baton.NewFencedLocker(foreignBackend{key: key}, cfg)
		foreign, err := fl.Acquire(ctx, "invoices")
		if err != nil {
			t.Fatal(err)
		}
		err = postgres.CheckLease(ctx, admin, foreign)
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "not a lease of the postgres backend") {
			t.Errorf("CheckLease of a lease with key %q = %v; want ErrInvalidOption saying it is not this backend's", key, err)
		}
		_ = foreign.Release(ctx)
	}
}

// foreignBackend is a fenced backend whose only hold has the key key:
// pure logic, for the leases of another backend that CheckLease refuses.
type foreignBackend struct{ key string }

func (f foreignBackend) Acquire(context.Context, baton.Request) (baton.Hold, error) {
	return foreignHold(f), nil
}
func (foreignBackend) Close() error        { return nil }
func (foreignBackend) TokenSource() string { return "a test's constant" }

// foreignHold is foreignBackend's hold: live for an hour, token 7.
type foreignHold struct{ key string }

func (h foreignHold) Key() string                 { return h.key }
func (foreignHold) Token() baton.Token            { return 7 }
func (foreignHold) Context() context.Context      { return context.Background() }
func (foreignHold) Err() error                    { return nil }
func (foreignHold) Deadline() time.Time           { return time.Now().Add(time.Hour) }
func (foreignHold) Release(context.Context) error { return nil }

// TestCheckLease_SQLErrorIsNotUnavailable: only a failed connection or a
// statement PostgreSQL gave up on is ErrUnavailable; a transaction on a
// database without the lease table, or one an earlier statement aborted,
// would fail again however often a caller retried, and says what it is.
func TestCheckLease_SQLErrorIsNotUnavailable(t *testing.T) {
	dsn := pg.Database(t)
	ctx := timeout(t, 30*time.Second)
	lease, err := dial(t, dsn, baton.WithTTL(5*time.Second)).Acquire(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)

	other, err := newPool(t, pg.Database(t)).Begin(ctx) // another database: no lease table
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	err = postgres.CheckLease(ctx, other, lease)
	if err == nil || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "lock's database") {
		t.Errorf("CheckLease where there is no lease table: %v; want an error, not ErrUnavailable, that names the lock's database", err)
	}

	aborted, err := newPool(t, dsn).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer aborted.Rollback(ctx)
	_, _ = aborted.Exec(ctx, `SELECT 1/0`)
	if err := postgres.CheckLease(ctx, aborted, lease); err == nil || errors.Is(err, baton.ErrUnavailable) {
		t.Errorf("CheckLease in an aborted transaction: %v; want an error, not ErrUnavailable", err)
	}
	if err := postgres.CheckLease(ctx, newPool(t, dsn), lease); err != nil {
		t.Errorf("CheckLease of the live lease: %v", err)
	}
}
