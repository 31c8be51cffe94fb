package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/forcekit"
	"github.com/baton-go/baton/internal/rediskit"
)

var (
	_ baton.Inspector     = (*backend)(nil)
	_ baton.ForceReleaser = (*backend)(nil)
)

// Inspect implements baton.Inspector. Holder is the identity stored in the
// key's value (or the raw value, for a key set by another tool), TTLLeft
// the key's PTTL, Waiters the live entries of its wait queue (not those
// of waiters that died, which the queue drops later). Since is not
// recorded. Without names it lists every key under the prefix, with SCAN
// (on every master of a Cluster). A lock whose keys cannot be read there
// (a key of another type, set by another tool; an ACL that refuses this
// user some keys) is listed with its error (LockInfo.Err), so that one
// stray key under the prefix does not fail the list; named, it is
// Inspect's error, and so is the first one's when no lock could be read.
func (b *backend) Inspect(ctx context.Context, names ...string) ([]baton.LockInfo, error) {
	octx, cancel := b.op(ctx)
	defer cancel()
	listed := len(names) == 0
	if listed {
		var err error
		if names, err = b.scan(octx); err != nil {
			return nil, b.fail(ctx, "list locks", err)
		}
	}
	for _, n := range names {
		if err := baton.ValidateName(n); err != nil {
			return nil, err
		}
	}
	type cmds struct {
		get  *goredis.StringCmd
		pttl *goredis.DurationCmd
		wait *goredis.StringSliceCmd
	}
	cs := make([]cmds, len(names))
	var now *goredis.TimeCmd
	_, err := b.client.Pipelined(octx, func(p goredis.Pipeliner) error {
		now = p.Time(octx)
		for i, n := range names {
			k := b.keys(n)
			cs[i] = cmds{p.Get(octx, k.lock), p.PTTL(octx, k.lock), p.HVals(octx, k.w)}
		}
		return nil
	})
	// Pipelined's error is only the first failed command's: a lock that
	// is free (GET's Nil) hid another's WRONGTYPE, which showed it free.
	// Each command's is looked at, naming its keys.
	if err := rediskit.CmdErr(now); err != nil {
		return nil, b.fail(ctx, "inspect locks", err)
	}
	unread := make([]error, len(names)) // the errors of the locks that cannot be read
	var firstUnread error               // returned when no lock could be read
	for i, n := range names {
		if cerr := rediskit.CmdErr(cs[i].get, cs[i].pttl, cs[i].wait); cerr != nil {
			k := b.keys(n)
			err := b.fail(ctx, "inspect "+k.lock, cerr, k.lock, k.w)
			if !listed || !rediskit.LockAlone(cerr) || ctx.Err() != nil {
				return nil, err
			}
			unread[i] = err
			if firstUnread == nil {
				firstUnread = err
			}
		}
	}
	if firstUnread != nil && !slices.Contains(unread, nil) {
		// No lock could be read: a list of errors alone would hide that
		// this client can read none.
		return nil, firstUnread
	}
	if err != nil && !errors.Is(err, goredis.Nil) && firstUnread == nil { // not a command's: the pipeline's own
		return nil, b.fail(ctx, "inspect locks", err)
	}
	out := make([]baton.LockInfo, 0, len(names))
	for i, n := range names {
		if unread[i] != nil {
			out = append(out, baton.LockInfo{Name: n, Err: unread[i]})
			continue
		}
		info := baton.LockInfo{Name: n, Waiters: rediskit.LiveWaiters(cs[i].wait.Val(), now.Val().UnixMilli())}
		if v, err := cs[i].get.Result(); err == nil {
			info.Holder = rediskit.HolderOf(v)
			info.Key = b.keys(n).lock
			info.TTLLeft = cs[i].pttl.Val()
			if info.TTLLeft < 0 {
				info.TTLLeft = -1 // no expiry: not set by baton
			}
		}
		if listed && info.Key == "" {
			continue // released since the scan
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b baton.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// scan lists the lock names under the prefix.
func (b *backend) scan(ctx context.Context) ([]string, error) {
	var mu sync.Mutex
	var names []string
	each := func(ctx context.Context, c goredis.UniversalClient) error {
		it := c.Scan(ctx, 0, rediskit.EscapeGlob(b.prefix)+"*", 256).Iterator()
		for it.Next(ctx) {
			n := strings.TrimPrefix(it.Val(), b.prefix)
			if baton.ValidateName(n) == nil {
				mu.Lock()
				names = append(names, n)
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := b.client.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return each(ctx, c) })
	} else {
		err = each(ctx, b.client)
	}
	slices.Sort(names)
	return slices.Compact(names), err
}

// ForceRelease implements baton.ForceReleaser: it deletes the key whoever
// holds it and hands the lock to the first waiter. It reads the holder
// first and deletes the key only while it holds that value (see
// forceScript); when the lock changed hands in between (or was freed), it
// deletes nothing and says so. A delete whose answer was lost is sent again
// (see forcekit.Delete). The holder learns that
// its lease is lost at its next renewal, at most RenewEvery later; until
// then it may still be working, which is why this is for an operator who
// knows the holder is gone.
func (b *backend) ForceRelease(ctx context.Context, name string) (baton.LockInfo, error) {
	if err := baton.ValidateName(name); err != nil {
		return baton.LockInfo{}, err
	}
	k := b.keys(name)
	octx, cancel := b.op(ctx)
	defer cancel()
	// Read the holder, then delete only that holder's key.
	var get *goredis.StringCmd
	var ttl *goredis.DurationCmd
	if _, err := b.client.Pipelined(octx, func(p goredis.Pipeliner) error {
		get = p.Get(octx, k.lock)
		ttl = p.PTTL(octx, k.lock)
		return nil
	}); err != nil && !errors.Is(err, goredis.Nil) {
		return baton.LockInfo{}, b.fail(ctx, "read "+k.lock, err, k.lock)
	}
	v, err := get.Result()
	if errors.Is(err, goredis.Nil) {
		return baton.LockInfo{}, &baton.NotAcquiredError{Name: name, Free: true}
	}
	info := baton.LockInfo{Name: name, Holder: rediskit.HolderOf(v), Key: k.lock, TTLLeft: max(ttl.Val(), time.Duration(-1))}
	gone, err := forcekit.Delete(ctx, b.cfg.RequestTimeout, func(ctx context.Context) (bool, error) {
		n, err := forceScript.Run(ctx, b.client, k.all(), v).Int()
		return n == 1, rediskit.ForceErr(err)
	})
	if err != nil {
		return baton.LockInfo{}, b.fail(ctx, "delete "+k.lock, err, k.all()...)
	}
	if !gone {
		return info, fmt.Errorf("lock %q: %w", name, baton.ErrChangedHands)
	}
	return info, nil
}
