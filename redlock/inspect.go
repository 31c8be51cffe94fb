package redlock

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

// nodeView is one node's view of one lock: err is the error of the
// lock's own commands there (a key of another type, an ACL that refuses
// its keys), its other fields are valid when err is nil.
type nodeView struct {
	value   string
	pttl    time.Duration
	waiters int
	err     error
}

// Inspect implements baton.Inspector. A lock is shown as held when one
// value is set on a majority of the nodes; TTLLeft is the shortest PTTL
// among its nodes, Waiters the most live entries in one node's queue (see
// rediskit.LiveWaiters). Without names it lists the keys under the prefix
// on every node that answers. A lock that no majority can tell because
// its keys cannot be read on them (a key of another type, set by another
// tool; an ACL that refuses this user some keys) is listed with its error
// (LockInfo.Err), so that one stray key under the prefix does not fail
// the list; named, it is Inspect's error, and so is the first one's when
// no lock could be read.
func (b *backend) Inspect(ctx context.Context, names ...string) ([]baton.LockInfo, error) {
	listed := len(names) == 0
	if listed {
		var err error
		if names, err = b.scan(ctx); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		if err := baton.ValidateName(n); err != nil {
			return nil, err
		}
	}
	views, errs := each(ctx, b, b.cfg.RequestTimeout, func(ctx context.Context, n *node) ([]nodeView, error) {
		out := make([]nodeView, len(names))
		gets := make([]*goredis.StringCmd, len(names))
		pttls := make([]*goredis.DurationCmd, len(names))
		ws := make([]*goredis.StringSliceCmd, len(names))
		var now *goredis.TimeCmd
		_, err := n.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			now = p.Time(ctx)
			for i, name := range names {
				k := b.keys(name)
				gets[i], pttls[i], ws[i] = p.Get(ctx, k.lock), p.PTTL(ctx, k.lock), p.HVals(ctx, k.w)
			}
			return nil
		})
		// Pipelined's error is only the first failed command's: a lock
		// that is free (GET's Nil) hid another's WRONGTYPE, which showed
		// it free. Each command's is looked at, naming its keys.
		if err := rediskit.CmdErr(now); err != nil {
			return nil, n.err("inspect", err)
		}
		alone := false // a lock's own error is among the commands'
		for i, name := range names {
			if err := rediskit.CmdErr(gets[i], pttls[i], ws[i]); err != nil {
				if !rediskit.LockAlone(err) {
					return nil, n.err("inspect "+b.keys(name).lock, err)
				}
				out[i].err, alone = n.err("inspect "+b.keys(name).lock, err), true
			}
		}
		if err != nil && !errors.Is(err, goredis.Nil) && !alone { // not a command's: the pipeline's own
			return nil, n.err("inspect", err)
		}
		for i := range names {
			if out[i].err == nil {
				out[i] = nodeView{value: gets[i].Val(), pttl: pttls[i].Val(), waiters: rediskit.LiveWaiters(ws[i].Val(), now.Val().UnixMilli())}
			}
		}
		return out, nil
	}, nil)
	if failedMajority(b, errs) {
		return nil, b.unavailable(ctx, "inspect locks", errs)
	}
	out := make([]baton.LockInfo, 0, len(names))
	var unread error // the first lock's that cannot be read, returned when none could be
	told := 0
	for i, name := range names {
		k := b.keys(name)
		lockErrs := slices.Clone(errs) // the nodes' errors for this lock
		for j, v := range views {
			if lockErrs[j] == nil {
				lockErrs[j] = v[i].err
			}
		}
		if failedMajority(b, lockErrs) {
			err := b.unavailable(ctx, "inspect "+k.lock, lockErrs, k.lock, k.w)
			if !listed || ctx.Err() != nil {
				return nil, err
			}
			if unread == nil {
				unread = err
			}
			out = append(out, baton.LockInfo{Name: name, Err: err})
			continue
		}
		told++
		info := baton.LockInfo{Name: name}
		count := map[string]int{}
		ttl := map[string]time.Duration{}
		for j, v := range views {
			if lockErrs[j] != nil {
				continue
			}
			nv := v[i]
			info.Waiters = max(info.Waiters, nv.waiters)
			if nv.value == "" {
				continue
			}
			count[nv.value]++
			if t, ok := ttl[nv.value]; !ok || nv.pttl < t {
				ttl[nv.value] = nv.pttl
			}
		}
		for v, c := range count {
			if c >= b.quorum {
				info.Holder, info.Key, info.TTLLeft = rediskit.HolderOf(v), k.lock, max(ttl[v], -1)
			}
		}
		if listed && info.Key == "" {
			continue
		}
		out = append(out, info)
	}
	if unread != nil && told == 0 {
		// No lock could be read: a list of errors alone would hide that
		// this client can read none.
		return nil, unread
	}
	slices.SortFunc(out, func(a, b baton.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func failedMajority(b *backend, errs []error) bool {
	_, failed := count(errs)
	return failed > len(b.nodes)-b.quorum
}

// scan lists the lock names under the prefix on every node.
func (b *backend) scan(ctx context.Context) ([]string, error) {
	var mu sync.Mutex
	set := map[string]bool{}
	_, errs := each(ctx, b, b.cfg.RequestTimeout, func(ctx context.Context, n *node) (struct{}, error) {
		it := n.client.Scan(ctx, 0, rediskit.EscapeGlob(b.prefix)+"*", 256).Iterator()
		for it.Next(ctx) {
			name := strings.TrimPrefix(it.Val(), b.prefix)
			if baton.ValidateName(name) == nil {
				mu.Lock()
				set[name] = true
				mu.Unlock()
			}
		}
		if err := it.Err(); err != nil {
			return struct{}{}, n.err("scan", err)
		}
		return struct{}{}, nil
	}, nil)
	if failedMajority(b, errs) {
		return nil, b.unavailable(ctx, "list locks", errs)
	}
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// ForceRelease implements baton.ForceReleaser: it deletes the key on every
// node, whoever holds it, and wakes each node's first waiter. On each node
// it reads the holder first and deletes the key only while it holds that
// value (see forceScript), and sends a delete whose answer was lost again
// (see forcekit.Delete). The holder learns at its next renewal that its
// lease is lost.
func (b *backend) ForceRelease(ctx context.Context, name string) (baton.LockInfo, error) {
	infos, err := b.Inspect(ctx, name)
	if err != nil {
		return baton.LockInfo{}, err
	}
	k := b.keys(name)
	// On each node, read the holder, then delete only that holder's key,
	// so that a copy of the delete that arrives late cannot end a later
	// holder's.
	vals, errs := each(ctx, b, b.cfg.RequestTimeout, func(ctx context.Context, n *node) (string, error) {
		v, err := n.client.Get(ctx, k.lock).Result()
		if errors.Is(err, goredis.Nil) {
			return "", nil
		}
		if err == nil {
			var gone bool
			// Tries of half the node's bound, so that one that times out
			// leaves time for another.
			gone, err = forcekit.Delete(ctx, b.cfg.RequestTimeout/2, func(ctx context.Context) (bool, error) {
				deleted, err := forceScript.Run(ctx, n.client, k.all(), v).Int()
				return deleted == 1, rediskit.ForceErr(err)
			})
			if !gone {
				v = "" // changed hands: not ours to delete
			}
		}
		if err != nil {
			return "", n.err("delete "+k.lock, err)
		}
		return v, nil
	}, nil)
	if failedMajority(b, errs) {
		return baton.LockInfo{}, b.unavailable(ctx, "delete "+k.lock, errs, k.all()...)
	}
	info := infos[0]
	// Report the holder whose keys were deleted, on most nodes: Inspect
	// read the lock before.
	best, n := mostCommon(vals)
	_, failed := count(errs)
	switch {
	case info.Key == "" && n < b.quorum && n+failed >= b.quorum:
		// The nodes that failed may have held the rest of a majority:
		// whether a holder was there is not known.
		return baton.LockInfo{}, b.unavailableWhy(ctx, "delete "+k.lock, fmt.Sprintf("deleted a key of %s on %d of %d nodes, and %d failed: whether it held the lock is not known; look again with Inspect, or force again once they answer", baton.Printable(rediskit.HolderOf(best)), n, len(b.nodes), failed), errs, k.all()...)
	case info.Key == "" && n < b.quorum:
		// Held by no majority, before the deletes or by them: a key they
		// found on a minority (a claim that landed after Inspect read its
		// node, while the acquisition that sent it had gone on with a
		// majority elsewhere, or given up) was no lock.
		return baton.LockInfo{}, &baton.NotAcquiredError{Name: name, Free: true}
	case n == 0:
		return info, fmt.Errorf("lock %q: %w", name, baton.ErrChangedHands)
	}
	// The deletes may have freed a majority that Inspect had not seen (a
	// holder that came in between): name its key too.
	info.Holder, info.Key = rediskit.HolderOf(best), k.lock
	return info, nil
}
