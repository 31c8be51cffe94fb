package zk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/forcekit"
	"github.com/baton-go/baton/internal/holderval"
)

var (
	_ baton.Inspector     = (*backend)(nil)
	_ baton.ForceReleaser = (*backend)(nil)
)

// Inspect implements baton.Inspector. TTLLeft is -1: ZooKeeper does not
// tell anyone but the server how long a session has left. Without names,
// a lock that cannot be told (its sequence numbers wrapped, an ACL that
// refuses this identity, one that keeps changing hands) is listed with
// its error (LockInfo.Err), so that one odd election node under the root
// does not fail the list; named, it is Inspect's error, and so is the
// first one's when no lock could be told.
func (b *backend) Inspect(ctx context.Context, names ...string) ([]baton.LockInfo, error) {
	for _, n := range names {
		if err := baton.ValidateName(n); err != nil {
			return nil, err // before any request: a bad name is the caller's
		}
	}
	if err := b.catchUp(ctx); err != nil {
		return nil, err
	}
	heldOnly := len(names) == 0
	if heldOnly {
		kids, err := retryRead(b, ctx, nil, func() ([]string, error) {
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
	var unread error // the first lock's that cannot be read, returned when none could be
	told := 0
	for _, n := range names {
		info, err := b.inspect(ctx, n)
		if err != nil && heldOnly && ctx.Err() == nil && lockAlone(err) {
			if unread == nil {
				unread = err
			}
			out = append(out, baton.LockInfo{Name: n, Err: err})
			continue
		}
		if err != nil {
			return nil, err
		}
		told++
		if heldOnly && info.Key == "" {
			continue
		}
		out = append(out, info)
	}
	if unread != nil && told == 0 {
		// No lock could be read (credentials the election nodes' ACLs all
		// refuse): a list of errors alone would hide that this identity
		// can read none.
		return nil, unread
	}
	slices.SortFunc(out, func(a, b baton.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// lockAlone reports whether err, from inspecting one lock, is that lock's
// own: its sequence numbers wrapped, its nodes' ACL refuses this identity
// (the root's did not, or the listing would have failed), or it keeps
// changing hands; not the connection's or the session's.
func lockAlone(err error) bool {
	var oe *baton.OptionError
	return errors.Is(err, ErrSequenceWrap) || errors.As(err, &oe) || errors.Is(err, errChangingHands)
}

// errChangingHands says that a lock changed hands each time Inspect
// looked.
var errChangingHands = errors.New("it keeps changing hands; look again")

// catchUp syncs, as findGUID does, before Inspect and ForceRelease read:
// the server this connection uses may be a follower that has not applied
// the leader's latest changes, and would show a holder already gone, or
// miss one just come (FencedLease.Raise takes the holder Inspect names for
// the current one; a forced release acts on it). A sync brings the server
// up to the leader for every path, not only the one it names.
func (b *backend) catchUp(ctx context.Context) error {
	if _, err := retryRead(b, ctx, nil, func() (string, error) { return b.conn.Sync("/") }); err != nil {
		return b.fail(ctx, "sync", err)
	}
	return nil
}

// inspect describes one lock: its first candidate holds it, the others
// wait. The caller has synced (catchUp).
func (b *backend) inspect(ctx context.Context, name string) (baton.LockInfo, error) {
	dir := b.lockDir(name)
	for range 5 {
		cands, err := b.listCandidates(ctx, dir, nil)
		if err != nil {
			return baton.LockInfo{}, err
		}
		if len(cands) == 0 {
			return baton.LockInfo{Name: name}, nil
		}
		h, ok, err := b.readHead(ctx, dir+"/"+cands[0].name)
		if err != nil {
			return baton.LockInfo{}, err
		}
		if !ok {
			continue // released meanwhile: look again
		}
		return baton.LockInfo{
			Name:    name,
			Holder:  h.holder,
			Key:     h.path,
			Token:   h.token,
			TTLLeft: -1,
			Since:   h.since,
			Waiters: len(cands) - 1,
		}, nil
	}
	return baton.LockInfo{}, &baton.UnavailableError{Where: b.place(), Err: fmt.Errorf("lock %q: %w", name, errChangingHands)}
}

// ForceRelease implements baton.ForceReleaser: it deletes the holder's
// node (that very node: its path is unique), so the next waiter gets the
// lock and the holder is told its lease is lost. A delete whose answer is
// lost (the connection dropped) is sent again (see forcekit.Delete):
// deleting that path twice is harmless.
func (b *backend) ForceRelease(ctx context.Context, name string) (baton.LockInfo, error) {
	if err := baton.ValidateName(name); err != nil {
		return baton.LockInfo{}, err
	}
	if err := b.catchUp(ctx); err != nil {
		return baton.LockInfo{}, err
	}
	info, err := b.inspect(ctx, name)
	if err != nil {
		return baton.LockInfo{}, err
	}
	if info.Key == "" {
		return info, &baton.NotAcquiredError{Name: name, Free: true}
	}
	gone, err := forcekit.Delete(ctx, b.cfg.RequestTimeout, func(ctx context.Context) (bool, error) {
		_, err := call(b, ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(info.Key, -1) })
		switch {
		case errors.Is(err, zkgo.ErrNoNode):
			return false, nil
		case errors.Is(err, zkgo.ErrNoAuth) || errors.Is(err, zkgo.ErrInvalidACL):
			return false, forcekit.Final(err) // the server's refusal: the same again
		}
		return err == nil, err
	})
	if err != nil {
		return info, b.fail(ctx, "delete "+info.Key, err)
	}
	if !gone {
		return info, fmt.Errorf("lock %q: %w", name, baton.ErrChangedHands)
	}
	return info, nil
}

// head is what the first candidate's node says.
type head struct {
	path   string
	holder string
	since  time.Time // by the holder's clock, or the node's creation by the server's
	token  baton.Token
}

// readHead reads the candidate node at path; ok is false when it is gone
// (released meanwhile).
func (b *backend) readHead(ctx context.Context, path string) (h head, ok bool, err error) {
	got, err := retryRead(b, ctx, nil, func() (watched, error) {
		data, stat, err := b.conn.Get(path)
		return watched{data: data, stat: stat}, err
	})
	if errors.Is(err, zkgo.ErrNoNode) {
		return head{}, false, nil
	}
	if err != nil {
		return head{}, false, b.fail(ctx, "read "+path, err)
	}
	return headOf(path, got), true, nil
}

// headOf is what the candidate node at path, read as got, says.
func headOf(path string, got watched) head {
	v := holderval.Decode(got.data)
	h := head{path: path, holder: v.Holder, since: v.Since, token: baton.Token(got.stat.Czxid)}
	if h.since.IsZero() {
		h.since = time.UnixMilli(got.stat.Ctime)
	}
	return h
}
