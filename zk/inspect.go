package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
)

var (
	_ baton.Inspector     = (*backend)(nil)
	_ baton.ForceReleaser = (*backend)(nil)
)

// nodeValue is what a candidate node holds: who queued and when, as JSON,
// so zkCli's get shows it plainly.
type nodeValue struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
}

func encodeValue(holder string) []byte {
	b, _ := json.Marshal(nodeValue{Holder: holder, Since: time.Now().UTC()})
	return b
}

// decodeValue reads a candidate's data. Curator stores the client's IP
// address there and zk.Lock nothing; both are shown as they are.
func decodeValue(v []byte) nodeValue {
	var nv nodeValue
	if json.Unmarshal(v, &nv) != nil {
		if len(v) == 0 {
			return nodeValue{Holder: "(no holder data)"}
		}
		return nodeValue{Holder: baton.Printable(string(v))}
	}
	return nv
}

// Inspect implements baton.Inspector. TTLLeft is -1: ZooKeeper does not
// tell anyone but the server how long a session has left.
func (b *backend) Inspect(ctx context.Context, names ...string) ([]baton.LockInfo, error) {
	heldOnly := len(names) == 0
	if heldOnly {
		kids, err := retryRead(b, ctx, func() ([]string, error) {
			kids, _, err := b.conn.Children(b.root)
			return kids, err
		})
		if err != nil && !errors.Is(err, zkgo.ErrNoNode) {
			return nil, b.fail(ctx, "list locks under "+b.root, err)
		}
		for _, k := range kids {
			if baton.ValidateName(k) == nil {
				names = append(names, k)
			}
		}
	}
	out := make([]baton.LockInfo, 0, len(names))
	for _, n := range names {
		if err := baton.ValidateName(n); err != nil {
			return nil, err
		}
		info, err := b.inspect(ctx, n)
		if err != nil {
			return nil, err
		}
		if heldOnly && info.Key == "" {
			continue
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b baton.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// inspect describes one lock: its first candidate holds it, the others
// wait.
func (b *backend) inspect(ctx context.Context, name string) (baton.LockInfo, error) {
	dir := b.lockDir(name)
	for range 5 {
		cands, err := b.listCandidates(ctx, dir)
		if err != nil {
			return baton.LockInfo{}, err
		}
		if len(cands) == 0 {
			return baton.LockInfo{Name: name}, nil
		}
		path := dir + "/" + cands[0].name
		got, err := retryRead(b, ctx, func() (watched, error) {
			data, stat, err := b.conn.Get(path)
			return watched{data: data, stat: stat}, err
		})
		if errors.Is(err, zkgo.ErrNoNode) {
			continue // released meanwhile: look again
		}
		if err != nil {
			return baton.LockInfo{}, b.fail(ctx, "read "+path, err)
		}
		v := decodeValue(got.data)
		since := v.Since
		if since.IsZero() {
			since = time.UnixMilli(got.stat.Ctime) // the server's clock
		}
		return baton.LockInfo{
			Name:    name,
			Holder:  v.Holder,
			Key:     path,
			Token:   baton.Token(got.stat.Czxid),
			TTLLeft: -1,
			Since:   since,
			Waiters: len(cands) - 1,
		}, nil
	}
	return baton.LockInfo{}, &baton.UnavailableError{Where: b.place(), Err: fmt.Errorf("lock %q keeps changing hands; look again", name)}
}

// ForceRelease implements baton.ForceReleaser: it deletes the holder's
// node (that very node: its path is unique), so the next waiter gets the
// lock and the holder is told its lease is lost.
func (b *backend) ForceRelease(ctx context.Context, name string) (baton.LockInfo, error) {
	if err := baton.ValidateName(name); err != nil {
		return baton.LockInfo{}, err
	}
	info, err := b.inspect(ctx, name)
	if err != nil {
		return baton.LockInfo{}, err
	}
	if info.Key == "" {
		return info, &baton.NotAcquiredError{Name: name}
	}
	_, err = call(b, ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(info.Key, -1) })
	if errors.Is(err, zkgo.ErrNoNode) {
		return info, fmt.Errorf("lock %q changed hands while being released; look again with baton status: %w", name, err)
	}
	if err != nil {
		return info, b.fail(ctx, "delete "+info.Key, err)
	}
	return info, nil
}
