package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/nilval"
	"github.com/baton-go/baton/internal/pgkit"
)

// Execer runs a statement: *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Init creates the lock tables and sequences for table ("" means
// DefaultTable) if they do not exist: the lease table, its waiters table
// and the token and ticket sequences, and the trigger function and the two
// triggers on the lease table that notify observers of elections, as shown
// in the package documentation. It is safe to run again, and from several
// processes at once. New and Dial create nothing: a Locker's first
// Acquire, TryAcquire or Observe creates the tables and sequences when they
// are missing, and the first Observe the function and triggers; run Init
// yourself (or the SQL) as the owner of the tables where the Locker's
// database user may not create them, or may not add the triggers (only the
// table's owner may) and someone will observe elections. A server that
// cannot be reached, gives up on the statements (a lock wait) or cannot
// write (a standby during a failover) is an error wrapping
// baton.ErrUnavailable, as for the Locker's calls; a refusal (a privilege
// the user lacks) an error that says what to do, which trying again would
// not mend.
func Init(ctx context.Context, db Execer, table string) error {
	n, err := newNames(table)
	if err != nil {
		return err
	}
	if _, isNil := nilval.Of(db); isNil {
		return &baton.OptionError{Option: "db", Value: "nil", Reason: "pass a *pgxpool.Pool or a *pgx.Conn"}
	}
	// No arguments: pgx sends it with the simple protocol, all statements
	// in one implicit transaction, so the advisory lock covers them all.
	r := n.replacer()
	if _, err := db.Exec(ctx, r.Replace(createSQL)+";\n"+strings.ReplaceAll(r.Replace(observersSQL), "{lock_timeout}", "1s")); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("create lock tables %s: %w", n.table, context.Cause(ctx))
		}
		err = fmt.Errorf("create lock tables %s: %w%s", n.table, err, privilegeHint(err))
		if failing(err) { // as Acquire's errors: a read-only standby too
			return &baton.UnavailableError{Where: pgkit.WhereOf(db), Err: err}
		}
		return err // refused: trying again would not mend it
	}
	return nil
}

// schemaAttempt is one run of ensureSchema that prepare's callers share:
// err is its outcome once done is closed.
type schemaAttempt struct {
	done chan struct{}
	err  error
}

// prepare readies the schema for the Locker's first call that writes
// (Acquire, TryAcquire, Observe): ensureSchema, once per Locker. Calls
// that only look (Inspect, ForceRelease; New and Dial) never run it, so
// that looking at a lock service changes nothing in it. Concurrent first
// calls share one attempt, which runs on a goroutine of its own, bounded
// by the request timeout, and each waits for it until its own ctx ends;
// all get its outcome, and a call after a failed attempt tries again.
// Once one has succeeded, prepare costs an atomic load.
func (b *backend) prepare(ctx context.Context) error {
	if b.schemaReady.Load() {
		return nil
	}
	b.mu.Lock()
	if b.schemaReady.Load() {
		b.mu.Unlock()
		return nil
	}
	if b.closed {
		b.mu.Unlock()
		return baton.ErrClosed
	}
	a := b.schemaRun
	if a == nil {
		a = &schemaAttempt{done: make(chan struct{})}
		b.schemaRun = a
		b.schemaWG.Go(func() {
			err := b.ensureSchema(context.WithoutCancel(ctx))
			b.mu.Lock()
			if err == nil {
				b.schemaReady.Store(true)
			}
			b.schemaRun = nil // the next call after a failure tries again
			b.mu.Unlock()
			a.err = err
			close(a.done)
		})
	}
	b.mu.Unlock()
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// ensureSchema creates the tables and sequences unless they exist already,
// so a user without CREATE privilege works once they do, and replaces a
// waiters table of an older baton; when all is there, it sweeps the
// waiters table (sweepWaiters). It does not add the observers' triggers:
// the first Observe does (or Init), so that a lock nobody observes does
// not pay for them. Only prepare calls it.
func (b *backend) ensureSchema(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	var tables, oldWaiters bool
	err := b.pool.QueryRow(octx, b.sql.exists, b.n.lease, b.n.waiters, b.n.tokenSeq, b.n.ticketSeq).Scan(&tables, &oldWaiters)
	if err != nil {
		return b.fail(ctx, "look for the lock tables", fmt.Errorf("%w; check the URL, and that the server is up", err))
	}
	if tables && !oldWaiters {
		b.sweepWaiters(octx)
		return nil
	}
	if _, err := b.pool.Exec(octx, b.sql.create); err != nil {
		if oldWaiters && privilegeHint(err) != "" {
			return b.fail(ctx, "replace the waiters table "+b.n.waiters+" of an older baton (keyed by name and ticket)",
				fmt.Errorf("%w; have its owner run postgres.Init, or DROP TABLE %s (it holds only places in queues; stop the older Lockers first, which fail on the new table)", err, b.n.waiters))
		}
		hint := privilegeHint(err)
		if refusedPrivilege(err) {
			hint = "; create them once as a user who may (postgres.Init, or the SQL in the postgres package documentation)" // fail adds the grants
		}
		return b.fail(ctx, "create the lock tables "+b.n.table, fmt.Errorf("%w%s", err, hint))
	}
	return nil
}

// sweepWaiters deletes the rows of the waiters table, on every lock, whose
// place ended over an hour ago: those of crashed Lockers, and of live ones
// whose last wait there was that long ago. A Locker's first call that
// writes runs it (prepare), and the Close of a Locker that waited does the
// same in its own DELETE; a failure only leaves the rows for the next one.
func (b *backend) sweepWaiters(ctx context.Context) {
	if _, err := b.pool.Exec(ctx, b.sql.sweep); err != nil {
		b.cfg.Logger.Debug("could not sweep the waiters table; the next Locker to write tries again", "table", b.n.waiters, "err", err)
	}
}

// olderWaiters returns, for err from a statement that names a column of
// the waiters table (a hand-off's slot), an error saying what to do when
// that table is an older baton's, keyed (name, ticket) without slots,
// which only the first call that writes (prepare) or Init replaces: a
// call that only looks must not, while that baton's Lockers may still
// use it. It returns nil when err is another failure.
func (b *backend) olderWaiters(ctx context.Context, what string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42703" { // undefined_column
		return nil
	}
	octx, cancel := b.op(ctx)
	defer cancel()
	var tables, old bool
	if b.pool.QueryRow(octx, b.sql.exists, b.n.lease, b.n.waiters, b.n.tokenSeq, b.n.ticketSeq).Scan(&tables, &old) != nil || !old {
		return nil
	}
	return fmt.Errorf("%s: %s: %w; the waiters table %s is an older baton's (keyed by name and ticket): use that baton's own baton release --force while its Lockers run, or stop them and run postgres.Init, which replaces the table", b.where, what, err, b.n.waiters)
}

// privilegeHint says what to do when the user may not create the tables.
func privilegeHint(err error) string {
	var pgErr *pgconn.PgError
	if refusedPrivilege(err) || errors.As(err, &pgErr) && pgErr.Code == "3F000" { // invalid_schema_name
		return "; create them once as a user who may (postgres.Init, or the SQL in the postgres package documentation), and grant this user SELECT, INSERT, UPDATE, DELETE on the tables and USAGE on the sequences"
	}
	return ""
}

// refusedPrivilege reports whether err is PostgreSQL's insufficient_privilege.
func refusedPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}
