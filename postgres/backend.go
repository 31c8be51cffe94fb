package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/failkit"
	"github.com/baton-go/baton/internal/holdset"
	"github.com/baton-go/baton/internal/keeper"
	"github.com/baton-go/baton/internal/parallel"
	"github.com/baton-go/baton/internal/pgkit"
)

// MinTTL is the shortest lease TTL accepted. A lease must outlive a
// renewal's round trip, a commit and a scheduling delay on a loaded client
// several times over, since it is renewed every TTL/3 by default; below a
// second, a busy client or a slow commit loses leases it still holds.
const MinTTL = time.Second

// backend implements baton.FencedBackend on a pgx pool.
type backend struct {
	pool    *pgxpool.Pool
	owned   bool // close the pool on Close
	cfg     baton.Config
	n       names
	sql     statements
	where   string            // host:port/database, for messages; never a password
	channel string            // this Locker's NOTIFY channel
	sched   *keeper.Scheduler // renews the holds

	// now is the client's wall clock. It is used only for holder_clock, a
	// record of what the holder believed the time was; expiry is never
	// computed from it. Tests replace it to play a client with a wrong
	// clock.
	now func() time.Time

	waiterSeq   atomic.Uint64 // numbers this Locker's waiters
	slots       slots         // this Locker's rows in the waiters table
	kept        keptRows      // the locks this Locker has waited on, which keep its rows
	attempts    atomic.Int64  // acquisition statements sent, for tests
	failures    atomic.Int64  // acquisition statements that failed, for tests
	deaf        atomic.Bool   // drop every NOTIFY, for tests of lost ones
	listenCheck time.Duration // see listener; tests shorten it

	// schemaReady is set once the first call that writes has made the
	// tables ready (see prepare); schemaRun is the attempt under way, if
	// any, guarded by mu; schemaWG counts its goroutine, which Close
	// waits for.
	schemaReady atomic.Bool
	schemaRun   *schemaAttempt
	schemaWG    sync.WaitGroup

	lisMu       sync.Mutex
	lis         *listener     // started by the first wait; guarded by lisMu
	lisStarting chan struct{} // closed when the start under way ends; nil when none is; guarded by lisMu

	// abandoned counts the acquisitions whose callers returned at the end
	// of their ctx (see Acquire) while they finish on their own; Close
	// waits for them. Added to under mu, only while not closed.
	abandoned sync.WaitGroup

	holds holdset.Set[*hold] // ended by Close

	mu        sync.Mutex
	observers map[*observer]context.CancelCauseFunc // stopped by Close
	closed    bool

	obsQueue   int          // maxQueued, but in tests
	obsDecided atomic.Int64 // terms this Locker's observers decided, for tests
}

var _ baton.FencedBackend = (*backend)(nil)

// New returns a FencedLocker on pool. It reads from the database and
// writes nothing: the Locker's first Acquire, TryAcquire or Observe
// creates the lock tables if they are missing (see Init), so that a
// Locker that only looks (Inspect and ForceRelease, for baton status and
// baton release --force; Leader) changes nothing in a database without
// them. The pool stays the caller's: closing the Locker does not close it. Waiters listen for wake-ups on one extra connection per
// Locker, made with the pool's connection settings and its BeforeConnect
// and AfterConnect hooks (so is each observer's), opened by the first
// Acquire that has to wait and closed by Close. The pool's transactions
// must run READ COMMITTED, PostgreSQL's default: New refuses a pool whose
// default_transaction_isolation says otherwise.
//
// Set statement_timeout on the pool's connections to at most half the
// request timeout (SET in the pool's AfterConnect, or ?statement_timeout=2500
// in its DSN), as Dial does: the client gives up on a statement after the
// request timeout, and without it a statement held up on the server (a
// lock row behind a long transaction) would commit later what nobody waits
// for: a lease for an Acquire that already failed, which then stays taken
// until its TTL runs out. (A renewal, given up at the lease's local
// deadline, can still commit up to statement_timeout after it began: see
// the package documentation.)
//
// Options: baton.WithTTL (at least MinTTL; default 15s), baton.WithPrefix
// (the lease table, default DefaultTable, optionally schema-qualified), and
// the rest of baton's. An unreachable server is an error wrapping
// baton.ErrUnavailable; a bad option a *baton.OptionError, and so is a
// user the server refuses a privilege the lock needs (at any call: the
// first Acquire's creation of missing tables included), with the GRANT
// statements to run.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...baton.Option) (*baton.FencedLocker, error) {
	b, err := newBackend(ctx, pool, opts)
	if err != nil {
		return nil, err
	}
	return baton.NewFencedLocker(b, b.cfg), nil
}

func newBackend(ctx context.Context, pool *pgxpool.Pool, opts []baton.Option) (*backend, error) {
	if pool == nil {
		return nil, &baton.OptionError{Option: "pgx pool", Value: "nil", Reason: "pass a *pgxpool.Pool, or use Dial"}
	}
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(MinTTL); err != nil {
		return nil, err
	}
	if err := checkHolder(cfg.Holder); err != nil {
		return nil, err
	}
	n, err := newNames(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	cfg.Prefix = n.table
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails on Linux; a zero id is still a valid channel
	b := &backend{
		pool:    pool,
		cfg:     cfg,
		n:       n,
		sql:     newStatements(n),
		where:   where(&pool.Config().ConnConfig.Config),
		channel: "baton." + hex.EncodeToString(id[:]),
		sched:   keeper.NewScheduler(),
		now:     time.Now,

		observers:   map[*observer]context.CancelCauseFunc{},
		obsQueue:    maxQueued,
		listenCheck: listenCheck,
	}
	// Only reads: the tables are made ready by the first call that
	// writes (prepare), not by a Locker that may only look.
	if err := b.checkIsolation(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// checkIsolation refuses a pool whose transactions do not run READ
// COMMITTED (the database's, the role's, the DSN's or an AfterConnect's
// default_transaction_isolation): each lock statement waits for the
// lock's row and must then read it as committed, where REPEATABLE READ
// or SERIALIZABLE fail it with a serialization error (a release rolled
// back, the lock left taken for a TTL; a waiter failing).
func (b *backend) checkIsolation(ctx context.Context) error {
	octx, cancel := b.op(ctx)
	defer cancel()
	var level string
	if err := b.pool.QueryRow(octx, "SHOW transaction_isolation").Scan(&level); err != nil {
		return b.fail(ctx, "read the transaction isolation", err)
	}
	// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED.
	if !strings.EqualFold(level, "read committed") && !strings.EqualFold(level, "read uncommitted") {
		return &baton.OptionError{Option: "transaction isolation", Value: level,
			Reason: "the lock's statements need READ COMMITTED; give baton a pool whose connections run it (SET default_transaction_isolation = 'read committed' in the pool's AfterConnect; Dial does)"}
	}
	return nil
}

// connect opens a connection of its own (a listener's, an observer's)
// with the pool's settings, its BeforeConnect and AfterConnect included
// (credentials, search_path, Dial's statement_timeout), adjusted by
// adjust. The pool's BeforeClose is not called when it closes: it never
// was the pool's.
func (b *backend) connect(ctx context.Context, adjust func(*pgx.ConnConfig)) (*pgx.Conn, error) {
	pc := b.pool.Config()
	cfg := pc.ConnConfig.Copy()
	if pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(ctx, cfg); err != nil {
			return nil, err
		}
	}
	adjust(cfg) // last: what baton needs of it (no notification handler) wins
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if pc.AfterConnect != nil {
		if err := pc.AfterConnect(ctx, conn); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return conn, nil
}

// where names a server and database for messages: postgres://host:port/database.
func where(c *pgconn.Config) string { return "postgres://" + pgkit.Where(c) }

// TokenSource implements baton.FencedBackend.
func (b *backend) TokenSource() string {
	return "PostgreSQL sequence " + b.n.tokenSeq + ", drawn under the lease row's lock"
}

// op bounds one request by the request timeout. The request is detached
// from ctx's cancellation: a statement is never cut off half way by the
// caller (the server could still commit it, leaving a lease nobody knows
// of); the caller's cancellation is looked at once it returns.
func (b *backend) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), b.cfg.RequestTimeout)
}

// detached bounds cleanup (a release, a waiter leaving the queue) by the
// release timeout, whatever became of ctx.
func (b *backend) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), b.cfg.ReleaseTimeout)
}

// fail classifies err from a request made for a caller whose context is
// ctx: the caller's cancellation, or the lock service failing.
func (b *backend) fail(ctx context.Context, what string, err error) error {
	return b.failWithin(ctx, what, err, b.cfg.RequestTimeout)
}

// failWithin is fail for a request bounded by bound (a release's, by the
// release timeout), which a message about a missing answer names. A
// statement the server refused, which trying again cannot mend, is not the
// service failing: see refused.
func (b *backend) failWithin(ctx context.Context, what string, err error, bound time.Duration) error {
	if ctx.Err() == nil {
		if rerr := b.refused(what, err); rerr != nil {
			return rerr
		}
	}
	return failkit.Unavailable(ctx, b.where, what, err, errors.Is(err, context.DeadlineExceeded), bound)
}

// refused returns the error for err when the server refused the statement
// for good, and nil when err is the lock service failing (see failing).
// A privilege the user lacks is a *baton.OptionError naming the grants the
// lock needs; any other refusal (a lock table dropped, a column missing)
// an error saying what the server refused, which matches neither
// baton.ErrUnavailable nor baton.ErrInvalidOption.
func (b *backend) refused(what string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || failing(err) {
		return nil
	}
	switch pgErr.Code {
	case "42501": // insufficient_privilege
		return &baton.OptionError{Option: "PostgreSQL user at", Value: b.where,
			Reason: fmt.Sprintf("%s: %v; grant it what the lock needs: %s", what, err, b.n.grants(b.pool.Config().ConnConfig.User))}
	case "42P01": // undefined_table
		return fmt.Errorf("%s: %s: %w; some of the lock tables %s are missing, dropped after they were made: create them again with postgres.Init", b.where, what, err, b.n.table)
	}
	return fmt.Errorf("%s: %s: %w (refused by the server; trying again will not mend it)", b.where, what, err)
}

// failing reports whether err is the lock service failing, which may mend
// itself, rather than the server refusing a statement for good: a
// connection that failed or an answer that did not come
// (pgkit.ConnFailure), a statement PostgreSQL gave up on because it waited
// or conflicted (pgkit.GaveUp, class 40), a server short of resources
// (53), shutting down or restarting (57), failing in itself (58, XX), or
// read-only, as a primary turned standby is until its clients reach the
// new one (25006). Acquire's errors (refused) and Init's are classified by
// it alike.
func failing(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgkit.ConnFailure(err) || pgkit.GaveUp(err) {
		return true
	}
	switch code := pgErr.Code; {
	case code == "25006", // read_only_sql_transaction
		strings.HasPrefix(code, "40"), strings.HasPrefix(code, "53"), strings.HasPrefix(code, "57"),
		strings.HasPrefix(code, "58"), strings.HasPrefix(code, "XX"):
		return true
	}
	return false
}

// unavailable classifies err as the service failing, whatever it says:
// for a renewal, whose failures are retried until the local deadline and
// whose last one the loss wraps, never a refusal of another kind.
func (b *backend) unavailable(ctx context.Context, what string, err error) error {
	return failkit.Unavailable(ctx, b.where, what, err, errors.Is(err, context.DeadlineExceeded), b.cfg.RequestTimeout)
}

// Close ends every hold (freeing its lease row, so the next waiter gets the
// lock at once), then waits for the acquisitions whose callers returned at
// the end of their ctx (see Acquire) to finish, stops the listener and
// every observer (closing their channels) and closes the pool if Dial made
// it. A lost hold is not among them (dropped at its loss), as Close would
// not free its row anyway. Against a server that stopped answering, Close
// takes a release timeout for the holds, another for this Locker's rows in
// the waiters table when it waited, and, for a pool Dial made, up to 15s
// more: pgx closes a connection cut off mid-statement by sending the
// server a cancel request, and its pool's Close waits up to 15s for that.
// Bound it with a timeout of your own where that matters (baton's CLI
// does).
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	holds, _ := b.holds.Close() // with b.closed: from now on, acquisitions get ErrClosed
	observers := make([]*observer, 0, len(b.observers))
	for o, stop := range b.observers {
		stop(baton.ErrClosed)
		observers = append(observers, o)
	}
	b.mu.Unlock()
	// The holds end first: the Locker has marked their leases lost, and
	// other processes wait for their rows. The abandoned acquisitions
	// finish meanwhile; they still use the pool and the listener, which
	// stay open until they have, and one granted a lease now ends it
	// itself (track refuses it).
	err := parallel.Join(holds, func(h *hold) error { return h.end(context.Background(), baton.ErrClosed, false) })
	for _, o := range observers {
		<-o.done
	}
	b.abandoned.Wait()
	b.schemaWG.Wait()
	lis := b.stopListening()
	if lis != nil {
		lis.stop()
		// This Locker waited: its rows in the waiters table go with it,
		// and so do rows whose place ended over an hour ago (a crashed
		// Locker's), which a Locker's first call that writes also sweeps.
		ctx, cancel := b.detached(context.Background())
		_, err := b.pool.Exec(ctx, b.sql.forget, b.channel)
		cancel()
		if err != nil {
			b.cfg.Logger.Warn("could not delete this Locker's rows in the waiters table; rows whose place ended an hour ago are deleted by a Locker's first acquisition or observer, and when one that waited closes", "channel", b.channel, "err", err)
		}
	}
	if b.owned {
		b.pool.Close()
	}
	return err
}

// track adds h to the holds Close ends, unless it is closed (see
// holdset.Set.Track).
func (b *backend) track(h *hold) bool {
	return b.holds.Track(h, func() bool { return h.kp.Err() != nil })
}

// trackObserver registers o, stopped by Close with stop.
func (b *backend) trackObserver(o *observer, stop context.CancelCauseFunc) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.observers[o] = stop
	return true
}

func (b *backend) untrackObserver(o *observer) {
	b.mu.Lock()
	delete(b.observers, o)
	b.mu.Unlock()
}

func (b *backend) untrack(h *hold) { b.holds.Drop(h) }

// slots hands out a Locker's rows in the waiters table (see createSQL): a
// waiting acquisition takes one, and gives it back when it returns, for
// the next to reuse. Slots are numbered from 1; 0 is "no row".
type slots struct {
	mu   sync.Mutex
	free []int32
	n    int32 // slots made so far
}

// take returns a slot no other acquisition of this Locker is using.
func (s *slots) take() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := len(s.free); k > 0 {
		slot := s.free[k-1]
		s.free = s.free[:k-1]
		return slot
	}
	s.n++
	return s.n
}

// give returns slot for reuse.
func (s *slots) give(slot int32) {
	s.mu.Lock()
	s.free = append(s.free, slot)
	s.mu.Unlock()
}

// maxKeptLocks is how many locks a Locker keeps its ended rows in the waiters
// table on, for its next wait there to reuse. Past that, the rows on the
// lock it waited on least recently are deleted, so a Locker that waits on
// ever new names (a lock per job ID) does not grow the table without end.
const maxKeptLocks = 64

// keptRows tracks the locks a Locker keeps rows on, in the order of its
// last wait on each.
type keptRows struct {
	mu   sync.Mutex
	last map[string]uint64 // lock name -> number of the last wait on it
	n    uint64
}

// ended records that a wait on name ended. It returns the name to delete
// the Locker's rows on, when that makes more than maxKeptLocks.
func (k *keptRows) ended(name string) (evict string, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last == nil {
		k.last = map[string]uint64{}
	}
	k.n++
	k.last[name] = k.n
	if len(k.last) <= maxKeptLocks {
		return "", false
	}
	for nm, at := range k.last {
		if !ok || at < k.last[evict] {
			evict, ok = nm, true
		}
	}
	delete(k.last, evict)
	return evict, true
}

// checkHolder refuses a holder PostgreSQL cannot store in text (or send as
// application_name): invalid UTF-8 or a NUL byte.
func checkHolder(h string) error {
	if !utf8.ValidString(h) || strings.IndexByte(h, 0) >= 0 {
		return &baton.OptionError{Option: "holder", Value: strconv.Quote(h), Reason: "must be UTF-8 without NUL bytes to be stored in PostgreSQL"}
	}
	return nil
}
