package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The DBs WithTx runs on: the three it pipelines BEGIN and the check on,
// and one of another type, which gets them as two round trips.
var txDBs = []struct {
	name string
	open func(t *testing.T, cfg *pgx.ConnConfig) postgres.DB
}{
	{"pool", func(t *testing.T, cfg *pgx.ConnConfig) postgres.DB { return openPool(t, cfg) }},
	{"poolconn", func(t *testing.T, cfg *pgx.ConnConfig) postgres.DB {
		c, err := openPool(t, cfg).Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Release)
		return c
	}},
	{"conn", func(t *testing.T, cfg *pgx.ConnConfig) postgres.DB { return openConn(t, cfg) }},
	{"other", func(t *testing.T, cfg *pgx.ConnConfig) postgres.DB { return otherDB{openPool(t, cfg)} }},
}

// otherDB is a DB of a type the Store does not know: it has SendBatch, but
// the Store must not rely on it.
type otherDB struct{ *pgxpool.Pool }

func openPool(t *testing.T, cfg *pgx.ConnConfig) *pgxpool.Pool {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig = cfg.Copy()
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(t.Context(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closePool(t, pool) })
	return pool
}

// closePool closes pool, unless a connection was never given back: Close
// would wait for it for ever, so that is an error instead.
func closePool(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d pool connections never released", n)
		return
	}
	pool.Close()
}

func openConn(t *testing.T, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(t.Context(), cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// leftOver says what WithTx left behind on db, "" if nothing: pool
// connections still acquired, or a connection still in a transaction.
func leftOver(db postgres.DB) string {
	var pool *pgxpool.Pool
	var conn *pgx.Conn
	switch db := db.(type) {
	case *pgxpool.Pool:
		pool = db
	case otherDB:
		pool = db.Pool
	case *pgxpool.Conn:
		conn = db.Conn()
	case *pgx.Conn:
		conn = db
	}
	if pool != nil {
		if n := pool.Stat().AcquiredConns(); n != 0 {
			return fmt.Sprintf("%d pool connections still acquired", n)
		}
	}
	if conn != nil {
		if st := conn.PgConn().TxStatus(); st != 'I' {
			return fmt.Sprintf("the connection is in transaction status %q, not idle", st)
		}
	}
	return ""
}

// fenceLocked reports whether a transaction holds a lock on resource's fence
// row, probing with FOR UPDATE NOWAIT, which conflicts with both the share
// lock and the upsert's, and fails at once (SQLSTATE 55P03) instead of
// waiting.
func fenceLocked(t *testing.T, ctx context.Context, pool *pgxpool.Pool, resource string) bool {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	_, err = tx.Exec(ctx, `SELECT 1 FROM baton_fence WHERE resource = $1 FOR UPDATE NOWAIT`, resource)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

// WithTx through every DB and every query exec mode, which send a batch
// differently (the simple protocol as one multi-statement query): the
// check's lock is taken inside the transaction and held while fn runs, on
// both paths; a stale token calls no fn and leaves nothing, not even a
// lock; a check that fails ends the transaction and frees the connection.
func TestStore_WithTx_ExecModes(t *testing.T) {
	dsn, admin, ctx := freshDatabase(t)
	modes := []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	}
	for _, db := range txDBs {
		for _, mode := range modes {
			t.Run(db.name+"/"+mode.String(), func(t *testing.T) {
				cfg, err := pgx.ParseConfig(dsn)
				if err != nil {
					t.Fatal(err)
				}
				cfg.DefaultQueryExecMode = mode
				// Any wait for a lock fails at once: the transactions
				// below never wait, except the one meant to fail.
				cfg.RuntimeParams["lock_timeout"] = "1ms"
				d := db.open(t, cfg)
				s, err := postgres.New(ctx, d)
				if err != nil {
					t.Fatal(err)
				}
				res := fmt.Sprintf("r_%s_%d", db.name, mode)
				table := "w_" + res
				mustExec(t, admin, `CREATE TABLE `+table+` (id int PRIMARY KEY, token bigint NOT NULL)`)
				released := func(when string) {
					t.Helper()
					if left := leftOver(d); left != "" {
						t.Errorf("%s: %s", when, left)
					}
				}
				write := func(token baton.Token, id int) error {
					return s.WithTx(ctx, res, token, func(ctx context.Context, tx pgx.Tx) error {
						if !fenceLocked(t, ctx, admin, res) {
							t.Errorf("token %d: the fence row is not locked while fn runs", token)
						}
						_, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2)`, id, int64(token))
						return err
					})
				}
				notCalled := func(ctx context.Context, tx pgx.Tx) error {
					t.Error("fn called")
					return nil
				}

				if err := s.Raise(ctx, res, 5); err != nil {
					t.Fatal(err)
				}
				if err := write(5, 1); err != nil { // share path
					t.Fatalf("WithTx(5): %v", err)
				}
				if err := write(6, 2); err != nil { // upsert path
					t.Fatalf("WithTx(6): %v", err)
				}
				released("after two commits")
				if n, err := s.Newest(ctx, res); err != nil || n != 6 {
					t.Fatalf("Newest = %d, %v; want 6", n, err)
				}

				err = s.WithTx(ctx, res, 5, notCalled)
				wantStaleErr(t, err, res, 5, 6)
				if fenceLocked(t, ctx, admin, res) {
					t.Error("the fence row is still locked after a refused check")
				}
				released("after a refused check")

				// A check that fails: the fence row is locked elsewhere,
				// and lock_timeout ends the wait.
				other, err := admin.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Rollback(context.WithoutCancel(ctx))
				if _, err := other.Exec(ctx, `SELECT 1 FROM baton_fence WHERE resource = $1 FOR UPDATE NOWAIT`, res); err != nil {
					t.Fatal(err)
				}
				err = s.WithTx(ctx, res, 6, notCalled)
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || errors.Is(err, baton.ErrStaleToken) || !errors.Is(err, baton.ErrUnavailable) {
					t.Errorf("WithTx(6) with the fence row locked: %v, want the lock timeout (55P03), as ErrUnavailable", err)
				}
				if err := other.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				released("after a failed check")

				// A context ended before BEGIN was sent.
				cctx, cancel := context.WithCancelCause(ctx)
				cause := errors.New("caller gave up")
				cancel(cause)
				if err := s.WithTx(cctx, res, 6, notCalled); !errors.Is(err, cause) {
					t.Errorf("WithTx on an ended context: %v, want its cause", err)
				}
				released("after an ended context")

				// The connection is still good for the next transaction.
				if err := write(6, 3); err != nil {
					t.Fatalf("WithTx(6) after the failures: %v", err)
				}
				if n := count(t, admin, `SELECT count(*) FROM `+table); n != 3 {
					t.Errorf("%d rows, want the 3 written with tokens 5, 6 and 6", n)
				}
			})
		}
	}
}

// wantStaleErr checks that err is a *baton.StaleTokenError for resource,
// got and newest.
func wantStaleErr(t *testing.T, err error, resource string, got, newest baton.Token) {
	t.Helper()
	var stale *baton.StaleTokenError
	if !errors.As(err, &stale) || *stale != (baton.StaleTokenError{Resource: resource, Got: got, Newest: newest}) {
		t.Fatalf("err = %v, want a *StaleTokenError for %q with got %d and newest %d", err, resource, got, newest)
	}
}

// A transaction whose fn runs no statement still raises the fence, and
// still only if it commits.
func TestStore_WithTx_NoStatement(t *testing.T) {
	for _, db := range txDBs {
		t.Run(db.name, func(t *testing.T) {
			dsn := pg.Database(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // fail, not hang
			defer cancel()
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			s, err := postgres.New(ctx, db.open(t, cfg))
			if err != nil {
				t.Fatal(err)
			}
			nothing := func(context.Context, pgx.Tx) error { return nil }
			if err := s.WithTx(ctx, "r", 3, nothing); err != nil { // no fence row yet
				t.Fatal(err)
			}
			if err := s.WithTx(ctx, "r", 4, nothing); err != nil {
				t.Fatal(err)
			}
			boom := errors.New("boom")
			if err := s.WithTx(ctx, "r", 9, func(context.Context, pgx.Tx) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("WithTx(9) = %v, want fn's error", err)
			}
			if n, err := s.Newest(ctx, "r"); err != nil || n != 4 {
				t.Errorf("Newest = %d, %v; want 4: raised by WithTx(4), and not by WithTx(9), which failed", n, err)
			}
			wantStaleErr(t, s.WithTx(ctx, "r", 2, nothing), "r", 2, 4)
		})
	}
}

// fn's first statement may be a query: its rows are read in full, closing
// them leaves the transaction usable, and what fn wrote after them commits.
func TestStore_WithTx_QueryFirst(t *testing.T) {
	for _, db := range txDBs {
		t.Run(db.name, func(t *testing.T) {
			dsn := pg.Database(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // fail, not hang
			defer cancel()
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			d := db.open(t, cfg)
			s, err := postgres.New(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Exec(ctx, invoicesDDL); err != nil {
				t.Fatal(err)
			}
			if err := s.Raise(ctx, "invoices", 2); err != nil {
				t.Fatal(err)
			}
			var got []int
			err = s.WithTx(ctx, "invoices", 2, func(ctx context.Context, tx pgx.Tx) error {
				rows, err := tx.Query(ctx, `SELECT g FROM generate_series(1, 3) g`)
				if err != nil {
					return err
				}
				if got, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
					return err
				}
				for _, c := range got {
					if _, err := postgres.InsertOnce(ctx, tx, invoice(c, 2)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, []int{1, 2, 3}) {
				t.Errorf("rows %v, want [1 2 3]", got)
			}
			var n int
			if err := d.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil || n != 3 {
				t.Errorf("%d invoices, %v; want 3", n, err)
			}
		})
	}
}

// turns counts round trips on the connections it dials: a turn is the
// first read that returns data after a write.
type turns struct {
	mu sync.Mutex
	n  int
}

func (c *turns) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *turns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &turnConn{Conn: conn, turns: c}, nil
}

type turnConn struct {
	net.Conn
	turns *turns
	wrote bool // guarded by turns.mu
}

func (c *turnConn) Write(p []byte) (int, error) {
	c.turns.mu.Lock()
	c.wrote = true
	c.turns.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *turnConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.turns.mu.Lock()
		if c.wrote {
			c.turns.n++
			c.wrote = false
		}
		c.turns.mu.Unlock()
	}
	return n, err
}

// The round trips WithTx and Insert make, counted on the wire: a fenced
// transaction on the fence's current token makes as many as the same
// transaction without the fence.
func TestStore_WithTx_RoundTrips(t *testing.T) {
	for _, tc := range []struct {
		db        string
		checkTrip int // the round trips the check adds on the share path
	}{{"pool", 0}, {"poolconn", 0}, {"conn", 0}, {"other", 1}} {
		t.Run(tc.db, func(t *testing.T) {
			dsn := pg.Database(t)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // fail, not hang
			defer cancel()
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			var wire turns
			cfg.DialFunc = wire.dial
			var d postgres.DB
			switch tc.db {
			case "conn":
				d = openConn(t, cfg)
			default:
				pcfg, err := pgxpool.ParseConfig("")
				if err != nil {
					t.Fatal(err)
				}
				pcfg.ConnConfig = cfg
				pcfg.MaxConns = 1 // one connection, set up once
				pcfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
				pool, err := pgxpool.NewWithConfig(ctx, pcfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { closePool(t, pool) })
				switch d = pool; tc.db {
				case "other":
					d = otherDB{pool}
				case "poolconn":
					c, err := pool.Acquire(ctx)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(c.Release)
					d = c
				}
			}
			s, err := postgres.New(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Exec(ctx, invoicesDDL); err != nil {
				t.Fatal(err)
			}
			client := 0
			insertOne := func(ctx context.Context, tx pgx.Tx) error {
				client++
				_, err := postgres.InsertOnce(ctx, tx, invoice(client, 1))
				return err
			}
			// trips runs op twice, so that its statements are prepared,
			// and returns the round trips of the second run.
			trips := func(name string, op func(i int) error) int {
				t.Helper()
				if err := op(0); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				before := wire.count()
				if err := op(1); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return wire.count() - before
			}
			check := func(name string, got, want int) {
				t.Helper()
				if got != want {
					t.Errorf("%s: %d round trips, want %d", name, got, want)
				}
			}

			plain := trips("plain", func(int) error {
				tx, err := d.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx)
				if err := insertOne(ctx, tx); err != nil {
					return err
				}
				return tx.Commit(ctx)
			})
			check("plain transaction", plain, 3) // BEGIN, INSERT, COMMIT
			if err := s.Raise(ctx, "invoices", 10); err != nil {
				t.Fatal(err)
			}
			check("WithTx, current token", trips("WithTx", func(int) error {
				return s.WithTx(ctx, "invoices", 10, insertOne)
			}), plain+tc.checkTrip)
			check("WithTx, new token", trips("WithTx", func(i int) error {
				return s.WithTx(ctx, "invoices", baton.Token(20+i), insertOne)
			}), plain+tc.checkTrip+1) // + the upsert
			check("WithTx, stale token", trips("WithTx", func(int) error {
				err := s.WithTx(ctx, "invoices", 3, insertOne)
				if errors.Is(err, baton.ErrStaleToken) {
					return nil
				}
				return fmt.Errorf("WithTx(3) = %v, want ErrStaleToken", err)
			}), 4+tc.checkTrip) // BEGIN and SELECT, upsert, newest, ROLLBACK
			check("Insert, current token", trips("Insert", func(i int) error {
				_, err := s.Insert(ctx, "invoices", 21, invoice(100+i, 21))
				return err
			}), 1)
		})
	}
}
