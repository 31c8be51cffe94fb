package etcd

import (
	"context"

	"github.com/baton-go/baton"
)

// OnWatchEvent calls fn, with the watcher's context, in each of l's holds'
// watchers before it looks at a watch response's events.
func OnWatchEvent(l *baton.Locker, fn func(ctx context.Context)) {
	l.Backend().(*backend).hooks.Store(&hooks{watchEvent: fn})
}

// OnWatchExit calls fn in each of l's holds' watchers as it exits.
func OnWatchExit(l *baton.Locker, fn func()) {
	l.Backend().(*backend).hooks.Store(&hooks{watchExit: fn})
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
