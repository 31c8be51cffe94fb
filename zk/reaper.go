package zk

import (
	"context"
	"errors"
	"sync"
	"time"

	zkgo "github.com/go-zookeeper/zk"
)

// reaper deletes nodes of ours that must not outlive their purpose but
// could not be deleted when they should have been: the node of a lease lost
// to a disconnection (the session survives, so the node would hold the lock
// forever), a release that got no answer, a create we stopped waiting for.
// It works whenever the connection has a session, and forgets a node once
// it is gone. Paths carry a GUID, so it only ever deletes our own nodes.
type reaper struct {
	b *backend

	mu    sync.Mutex
	paths map[string]struct{}
	guids map[string]lookFor // guid -> where and how long: the path is unknown
	wake  chan struct{}      // cap 1: something was added
}

// lookFor is a GUID the reaper looks for: under election node dir, until
// the time until. A create whose answer was lost may be applied after a
// first look found nothing (a copy held up on its way), so a GUID not
// found is looked for again, every reapRetry, for one TTL.
type lookFor struct {
	dir   string
	until time.Time
}

// reapRetry is how soon the reaper tries again after a failure that did not
// come with a change of connection state.
const reapRetry = time.Second

func newReaper(b *backend) *reaper {
	return &reaper{b: b, paths: map[string]struct{}{}, guids: map[string]lookFor{}, wake: make(chan struct{}, 1)}
}

// add hands the reaper the node at path.
func (r *reaper) add(path string) {
	r.mu.Lock()
	r.paths[path] = struct{}{}
	r.mu.Unlock()
	r.poke()
}

// addGUID hands the reaper the node with our guid under dir, if there is
// one.
func (r *reaper) addGUID(dir, guid string) {
	r.mu.Lock()
	r.guids[guid] = lookFor{dir: dir, until: time.Now().Add(r.b.cfg.TTL)}
	r.mu.Unlock()
	r.poke()
}

func (r *reaper) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *reaper) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.paths) + len(r.guids)
}

// run is the reaper's goroutine, owned by the backend; it ends when the
// backend closes.
func (r *reaper) run() {
	defer r.b.workers.Done()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		v := r.b.observe()
		if v.connected() && r.pending() > 0 {
			if left := r.pass(r.b.life); left > 0 {
				retry.Reset(reapRetry)
			}
		}
		select {
		case <-r.b.life.Done():
			return
		case <-r.wake:
		case <-v.changed:
		case <-retry.C:
		}
	}
}

// pass tries every pending node once and returns how many are left.
func (r *reaper) pass(ctx context.Context) int {
	r.mu.Lock()
	paths := make([]string, 0, len(r.paths))
	for p := range r.paths {
		paths = append(paths, p)
	}
	guids := make(map[string]lookFor, len(r.guids))
	for g, l := range r.guids {
		guids[g] = l
	}
	r.mu.Unlock()

	for guid, l := range guids {
		own, found, err := r.b.findGUID(ctx, l.dir, guid)
		if ctx.Err() != nil {
			return r.pending()
		}
		if err != nil || (!found && time.Now().Before(l.until)) {
			continue
		}
		r.mu.Lock()
		delete(r.guids, guid)
		if found {
			r.paths[own.path] = struct{}{}
			paths = append(paths, own.path)
		}
		r.mu.Unlock()
	}
	for _, p := range paths {
		_, err := call(r.b, ctx, func() (struct{}, error) {
			return struct{}{}, r.b.conn.Delete(p, -1)
		})
		if ctx.Err() != nil {
			break // closing
		}
		if err != nil && isConnErr(err) {
			continue // next time the connection is back
		}
		if err != nil && !errors.Is(err, zkgo.ErrNoNode) && !errors.Is(err, zkgo.ErrSessionExpired) {
			r.b.cfg.Logger.Warn("could not delete a node of ours; it goes with the session", "path", p, "err", err)
		} else if err == nil {
			r.b.cfg.Logger.Debug("deleted a node left behind", "path", p)
		}
		r.mu.Lock()
		delete(r.paths, p)
		r.mu.Unlock()
	}
	return r.pending()
}

// drain makes one pass bounded by ctx, for Close on a connection that
// stays open (see outwaitSession for what is left).
func (r *reaper) drain(ctx context.Context) {
	if r.pending() > 0 && r.b.observe().connected() {
		r.pass(ctx)
	}
}
