package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
		return nil, b.fail(ctx, "list locks", err)
	}
	return out, nil
}

// ForceRelease implements baton.ForceReleaser: it expires the holder's row
// now, whoever holds it, and hands the lock to the first waiter. The
// holder learns of it at its next renewal, which is refused. It reads the
// holder's token first and expires the row only while it holds that token
// (a statement the client gave up on can still run, late); when the lock
// changed hands in between, it releases nothing and says so.
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
	if errors.Is(err, pgx.ErrNoRows) {
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
			return false, err
		}
		if found {
			info.Holder, info.Since, info.TTLLeft, info.Waiters = got.Holder, got.Since, seconds(left), int(waiters)
		}
		return found, nil
	})
	if err != nil {
		return baton.LockInfo{}, b.fail(ctx, fmt.Sprintf("release %q by force", name), err)
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
