package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/forcekit"
)

var (
	_ baton.Inspector     = (*backend)(nil)
	_ baton.ForceReleaser = (*backend)(nil)
)

// Inspect implements baton.Inspector. TTLLeft is computed by the database
// from its own clock; Since is when the lock was acquired by the
// database's clock (not the holder's); Waiters counts live waiter rows.
// It only reads: where the lease table does not exist (a table nobody has
// locked in yet, or a mistyped ?table=), no lock is held, and it creates
// nothing.
func (b *backend) Inspect(ctx context.Context, names ...string) ([]baton.LockInfo, error) {
	for _, n := range names {
		if err := baton.ValidateName(n); err != nil {
			return nil, err
		}
	}
	octx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	var rows pgx.Rows
	var err error
	if len(names) == 0 {
		rows, err = b.pool.Query(octx, b.sql.inspect)
	} else {
		rows, err = b.pool.Query(octx, b.sql.inspectNames, names)
	}
	if err != nil {
		if b.noLeaseTable(ctx, err) {
			return freeLocks(names), nil
		}
		return nil, b.fail(ctx, "list locks", err)
	}
	var out []baton.LockInfo
	seen := map[string]bool{}
	for rows.Next() {
		var (
			name    string
			holder  *string
			token   *int64
			since   *time.Time
			left    *float64
			waiters int64
		)
		if err := rows.Scan(&name, &holder, &token, &since, &left, &waiters); err != nil {
			rows.Close()
			return nil, b.fail(ctx, "list locks", err)
		}
		if seen[name] { // a name asked for twice
			continue
		}
		seen[name] = true
		info := baton.LockInfo{Name: name, Waiters: int(waiters)}
		if holder != nil {
			info.Holder = *holder
			info.Key = b.n.key(name)
			info.Token = baton.Token(deref(token))
			info.TTLLeft = seconds(deref(left))
			if since != nil {
				info.Since = *since
			}
		}
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		if b.noLeaseTable(ctx, err) {
			return freeLocks(names), nil
		}
		return nil, b.fail(ctx, "list locks", err)
	}
	return out, nil
}

// noLeaseTable reports whether err is PostgreSQL's undefined_table and the
// lease table does not exist: then no lock is held. (Only the waiters
// table missing, beside a lease table that may hold leases, is an error.)
func (b *backend) noLeaseTable(ctx context.Context, err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" { // undefined_table
		return false
	}
	octx, cancel := b.op(ctx)
	defer cancel()
	var missing bool
	return b.pool.QueryRow(octx, `SELECT to_regclass($1) IS NULL`, b.n.lease).Scan(&missing) == nil && missing
}

// freeLocks is what Inspect reports where there is no lease table: the
// named locks, each once, free and sorted by name as the database sorts
// them (COLLATE "C", bytewise); none when no name is given.
func freeLocks(names []string) []baton.LockInfo {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	var out []baton.LockInfo
	for _, n := range names {
		out = append(out, baton.LockInfo{Name: n})
	}
	return out
}

// ForceRelease implements baton.ForceReleaser: it expires the holder's row
// now, whoever holds it, and hands the lock to the first waiter. The
// holder learns of it at its next renewal, which is refused. It reads the
// holder's token first and expires the row only while it holds that token
// (a statement the client gave up on can still run, late); when the lock
// changed hands in between, it releases nothing and says so. Where the
// lease table does not exist, the lock is free, and it creates nothing.
func (b *backend) ForceRelease(ctx context.Context, name string) (baton.LockInfo, error) {
	if err := baton.ValidateName(name); err != nil {
		return baton.LockInfo{}, err
	}
	octx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	var token int64
	var holder string
	var since time.Time
	err := b.pool.QueryRow(octx, b.sql.liveToken, name).Scan(&token, &holder, &since)
	var pgErr *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) && pgErr.Code == "42P01" { // no row, or no lease table
		// liveToken reads the lease table alone: undefined_table says it
		// does not exist, so nobody holds the lock.
		return baton.LockInfo{}, &baton.NotAcquiredError{Name: name, Free: true}
	}
	if err != nil {
		return baton.LockInfo{}, b.fail(ctx, fmt.Sprintf("release %q by force", name), err)
	}
	return b.forceRelease(ctx, name, baton.LockInfo{Holder: holder, Token: baton.Token(token), Since: since})
}

// forceRelease expires name's row if it still holds the token of read (its
// holder, token and start, as read before), and sends that again when its
// answer was lost (see forcekit.Delete). The info it returns is the row's
// as the release found it; after a try whose answer was lost, the one read
// (with no TTL left or waiters).
func (b *backend) forceRelease(ctx context.Context, name string, read baton.LockInfo) (baton.LockInfo, error) {
	info := read
	info.Name, info.Key = name, b.n.key(name)
	token := int64(read.Token)
	gone, err := forcekit.Delete(ctx, b.cfg.RequestTimeout, func(ctx context.Context) (bool, error) {
		var batch pgx.Batch
		var (
			got     baton.LockInfo
			t       int64
			left    float64
			waiters int64
			found   bool
		)
		batch.Queue(b.sql.lockRow, name)
		batch.Queue(b.sql.forceRelease, name, token).QueryRow(func(row pgx.Row) error {
			err := row.Scan(&got.Holder, &t, &got.Since, &left, &waiters)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			found = err == nil
			return err
		})
		batch.Queue(b.sql.handOff, name)
		if err := b.pool.SendBatch(ctx, &batch).Close(); err != nil {
			if !failing(err) {
				// Refused (a privilege, an older baton's waiters
				// table): the batch rolled back, and would be
				// refused again; the tries are for lost answers.
				return false, forcekit.Final(err)
			}
			return false, err
		}
		if found {
			info.Holder, info.Since, info.TTLLeft, info.Waiters = got.Holder, got.Since, seconds(left), int(waiters)
		}
		return found, nil
	})
	if err != nil {
		what := fmt.Sprintf("release %q by force", name)
		if oerr := b.olderWaiters(ctx, what, err); oerr != nil {
			return baton.LockInfo{}, oerr
		}
		return baton.LockInfo{}, b.fail(ctx, what, err)
	}
	if !gone {
		return baton.LockInfo{}, fmt.Errorf("lock %q: %w", name, baton.ErrChangedHands)
	}
	return info, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// seconds turns the database's count of seconds into a Duration, to the
// microsecond PostgreSQL keeps.
func seconds(s float64) time.Duration {
	return time.Duration(s*1e6) * time.Microsecond
}
