// Package obsend is how a backend says why an observation of an election
// ended for want of the lock service: a warning on the Locker's logger,
// whose message begins with Prefix. The CLI folds it into its one line.
package obsend

import (
	"context"
	"log/slog"
)

// Prefix begins the message of every such warning; why follows it.
const Prefix = "election observer stopped: "

// Warn logs on l that an observation ended, and why, with args as
// slog.Logger.Warn takes them (an "err" among them, where there is one),
// unless ctx, the observation's, has ended: then the caller ended it, and
// the failure that followed is no news.
func Warn(ctx context.Context, l *slog.Logger, why string, args ...any) {
	if ctx.Err() == nil {
		l.Warn(Prefix+why, args...)
	}
}
