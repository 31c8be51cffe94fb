package etcd

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/forcekit"
	"github.com/baton-go/baton/internal/holderval"
)

var (
	_ baton.Inspector     = (*backend)(nil)
	_ baton.ForceReleaser = (*backend)(nil)
)

// decodeValue reads a lock key's value. A key without data is etcdctl
// lock's, which stores nothing: status, observers and errors name it so.
func decodeValue(v []byte) holderval.Value {
	hv := holderval.Decode(v)
	if hv.Holder == holderval.NoData {
		hv.Holder = "(etcdctl lock)"
	}
	return hv
}

// Inspect implements baton.Inspector.
func (b *backend) Inspect(ctx context.Context, names ...string) ([]baton.LockInfo, error) {
	octx, cancel := b.op(ctx)
	defer cancel()
	var kvs []*mvccpb.KeyValue
	if len(names) == 0 {
		resp, err := b.client.Get(octx, b.prefix, clientv3.WithPrefix())
		if err != nil {
			return nil, b.fail(ctx, "list locks", err)
		}
		kvs = resp.Kvs
	} else {
		seen := map[string]bool{}
		for _, n := range names {
			if err := baton.ValidateName(n); err != nil {
				return nil, err
			}
			if seen[n] { // once: its keys would count twice
				continue
			}
			seen[n] = true
			resp, err := b.client.Get(octx, b.lockPrefix(n), clientv3.WithPrefix())
			if err != nil {
				return nil, b.fail(ctx, "list locks", err)
			}
			kvs = append(kvs, resp.Kvs...)
		}
	}
	byName := map[string][]*mvccpb.KeyValue{}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(string(kv.Key), b.prefix)
		i := strings.LastIndex(rest, "/")
		if i <= 0 {
			continue // not a lock key
		}
		byName[rest[:i]] = append(byName[rest[:i]], kv)
	}
	out := make([]baton.LockInfo, 0, len(byName)+len(names))
	for _, n := range names {
		if _, ok := byName[n]; !ok {
			out = append(out, baton.LockInfo{Name: n})
		}
	}
	for name, keys := range byName {
		slices.SortFunc(keys, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
		h := keys[0]
		v := decodeValue(h.Value)
		info := baton.LockInfo{Name: name, Holder: v.Holder, Key: string(h.Key), Token: baton.Token(h.CreateRevision), Since: v.Since, Waiters: len(keys) - 1, TTLLeft: -1}
		if h.Lease != 0 {
			if ttl, err := b.client.TimeToLive(octx, clientv3.LeaseID(h.Lease)); err == nil && ttl.TTL >= 0 {
				info.TTLLeft = time.Duration(ttl.TTL) * time.Second
			}
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b baton.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ForceRelease implements baton.ForceReleaser: it deletes the holder's key
// (only if it is still the same key), so the next waiter gets the lock and
// the holder is told its lease is lost. A delete whose answer was lost is
// sent again (see forcekit.Delete).
func (b *backend) ForceRelease(ctx context.Context, name string) (baton.LockInfo, error) {
	infos, err := b.Inspect(ctx, name)
	if err != nil {
		return baton.LockInfo{}, err
	}
	if len(infos) != 1 || infos[0].Key == "" {
		return baton.LockInfo{}, &baton.NotAcquiredError{Name: name, Free: true}
	}
	info := infos[0]
	gone, err := forcekit.Delete(ctx, b.cfg.RequestTimeout, func(ctx context.Context) (bool, error) {
		resp, err := b.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(info.Key), "=", int64(info.Token))).
			Then(clientv3.OpDelete(info.Key)).
			Commit()
		if err != nil && b.refusal("", err) != nil {
			return false, forcekit.Final(err) // the same again: no try more
		}
		return err == nil && resp.Succeeded, err
	})
	if err != nil {
		return info, b.fail(ctx, "delete lock key", err)
	}
	if !gone {
		return info, fmt.Errorf("lock %q: %w", name, baton.ErrChangedHands)
	}
	return info, nil
}
