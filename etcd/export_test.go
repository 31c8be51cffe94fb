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
