package etcd

import (
	"context"
	"weak"

	"github.com/baton-go/baton"
)

// OnWatchEvent calls fn, with the watcher's context, in each of l's holds'
// watchers before it looks at a watch response's events.
func OnWatchEvent(l *baton.Locker, fn func(ctx context.Context)) {
	setHook(l, func(h *hooks) { h.watchEvent = fn })
}

// OnWatchExit calls fn in each of the watchers of l's holds made from now
// on, as it exits.
func OnWatchExit(l *baton.Locker, fn func()) {
	setHook(l, func(h *hooks) { h.watchExit = fn })
}

// OnGrantSent calls fn each time l's backend sends a lease grant.
func OnGrantSent(l *baton.Locker, fn func()) {
	setHook(l, func(h *hooks) { h.grantSent = fn })
}

// OnObserved calls fn with each term one of l's observations decides,
// before it hands it to its reader.
func OnObserved(l *baton.Locker, fn func(baton.Term)) {
	setHook(l, func(h *hooks) { h.observed = fn })
}

// OnHoldTracked calls fn, with the key of each new hold of l and its
// session's Done, once the hold is tracked and before it follows its
// session's end.
func OnHoldTracked(l *baton.Locker, fn func(key string, sessionDone <-chan struct{})) {
	setHook(l, func(h *hooks) { h.tracked = fn })
}

// OnHoldCollectable calls fn for each new hold of l with a function that
// reports whether the garbage collector has freed the hold.
func OnHoldCollectable(l *baton.Locker, fn func(collected func() bool)) {
	setHook(l, func(hk *hooks) {
		hk.made = func(h *hold) {
			w := weak.Make(h)
			fn(func() bool { return w.Value() == nil })
		}
	})
}

// setHook sets one of l's hooks, keeping the others.
func setHook(l *baton.Locker, set func(*hooks)) {
	b := l.Backend().(*backend)
	var h hooks
	if old := b.hooks.Load(); old != nil {
		h = *old
	}
	set(&h)
	b.hooks.Store(&h)
}

// Watchers returns, for each of l's holds, a channel closed when its
// watcher has exited.
func Watchers(l *baton.Locker) []<-chan struct{} {
	b := l.Backend().(*backend)
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []<-chan struct{}
	for h := range b.holds {
		out = append(out, h.exited)
	}
	return out
}

// Sessions returns how many sessions l's backend keeps.
func Sessions(l *baton.Locker) int {
	b := l.Backend().(*backend)
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions)
}
