package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// fakeBackend is a fenced lock service inside the test process, for losses
// and failures a real one cannot be made to time. Its nth acquisition
// fails with script[n] when that is not nil; its first hold is lost once
// a file exists at loseFirstOn when that is not "" (the command under
// test makes it when it has come to the point the loss must strike), and
// the fake then makes loseFirstOn+".lost"; the others are never lost
// before they are released. Release returns releaseErr. It serves one
// holder at a time.
type fakeBackend struct {
	script      []error
	loseFirstOn string
	releaseErr  error
	deadline    time.Duration // the first hold's local deadline after its grant; an hour when 0, and for the others
	onAcquire   func(n int)   // when not nil, called with n at the start of the nth acquisition (from 0)

	acquired int
	token    baton.Token
}

// useFake makes the URL scheme "fake" open b for the rest of the test.
func useFake(t *testing.T, b baton.Backend) string {
	t.Helper()
	prev, had := openers["fake"]
	openers["fake"] = func(_ context.Context, _ *url.URL, opts ...baton.Option) (*baton.Locker, error) {
		cfg, err := baton.NewConfig(opts...)
		if err != nil {
			return nil, err
		}
		return baton.NewLocker(b, cfg), nil
	}
	t.Cleanup(func() {
		if had {
			openers["fake"] = prev
		} else {
			delete(openers, "fake")
		}
	})
	return "fake://test"
}

func (b *fakeBackend) Acquire(ctx context.Context, req baton.Request) (baton.Hold, error) {
	n := b.acquired
	b.acquired++
	if b.onAcquire != nil {
		b.onAcquire(n)
	}
	if n < len(b.script) && b.script[n] != nil {
		return nil, b.script[n]
	}
	b.token++
	hctx, cancel := context.WithCancelCause(context.Background())
	if b.token == 1 && b.loseFirstOn != "" {
		go loseOn(hctx, cancel, b.loseFirstOn)
	}
	d := time.Hour
	if b.token == 1 && b.deadline != 0 {
		d = b.deadline
	}
	return &fakeHold{b: b, name: req.Name, token: b.token, ctx: hctx, cancel: cancel, deadline: time.Now().Add(d)}, nil
}

// loseOn ends a hold (ctx, cancel) as lost once a file exists at path,
// then makes path+".lost"; it returns early when the hold ends otherwise.
func loseOn(ctx context.Context, cancel context.CancelCauseFunc, path string) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			cancel(fmt.Errorf("%w: the fake's session ended", baton.ErrLeaseLost))
			_ = os.WriteFile(path+".lost", nil, 0o644)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (b *fakeBackend) Close() error        { return nil }
func (b *fakeBackend) TokenSource() string { return "a counter in the test" }

type fakeHold struct {
	b        *fakeBackend
	name     string
	token    baton.Token
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time
}

func (h *fakeHold) Key() string                   { return "fake/" + h.name }
func (h *fakeHold) Token() baton.Token            { return h.token }
func (h *fakeHold) Context() context.Context      { return h.ctx }
func (h *fakeHold) Deadline() time.Time           { return h.deadline }
func (h *fakeHold) Release(context.Context) error { h.cancel(baton.ErrReleased); return h.b.releaseErr }
func (h *fakeHold) Err() error {
	if h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(h.ctx)
}

// forceFake is a fakeBackend that can force a release: ForceRelease
// closes started, then waits for ctx to end, as against a server that does
// not answer, and returns its cause.
type forceFake struct {
	*fakeBackend
	started chan struct{}
}

func (b forceFake) ForceRelease(ctx context.Context, _ string) (baton.LockInfo, error) {
	close(b.started)
	<-ctx.Done()
	return baton.LockInfo{}, context.Cause(ctx)
}
