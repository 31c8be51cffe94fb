package baton_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/asynclog"
)

// fakeHold is a Hold for the Lease's own logic: what its Release does is
// the test's. Backends are tested against real servers; this tests how a
// Lease reads what a Hold reports.
type fakeHold struct {
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	err     error
	release func(h *fakeHold) error

	deadline time.Time // zero: an hour from now, whenever asked
	// deadlines, when set, answers Deadline instead, with the count of
	// earlier calls.
	deadlines func(n int) time.Time
	asked     int
}

func newFakeHold(release func(h *fakeHold) error) *fakeHold {
	ctx, cancel := context.WithCancel(context.Background())
	return &fakeHold{ctx: ctx, cancel: cancel, release: release}
}

// end ends the hold with cause, as a backend does on a loss or a release.
func (h *fakeHold) end(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = cause
		h.cancel()
	}
}

func (h *fakeHold) Key() string                       { return "fake/key" }
func (h *fakeHold) Token() baton.Token                { return 7 }
func (h *fakeHold) Context() context.Context          { return h.ctx }
func (h *fakeHold) Release(ctx context.Context) error { return h.release(h) }
func (h *fakeHold) Deadline() time.Time {
	if h.deadlines != nil {
		h.asked++
		return h.deadlines(h.asked - 1)
	}
	if h.deadline.IsZero() {
		return time.Now().Add(time.Hour)
	}
	return h.deadline
}
func (h *fakeHold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

type fakeBackend struct{ hold *fakeHold }

func (b *fakeBackend) Acquire(context.Context, baton.Request) (baton.Hold, error) { return b.hold, nil }
func (b *fakeBackend) Close() error                                               { return nil }

func fakeLocker(t *testing.T, h *fakeHold) *baton.Locker {
	t.Helper()
	cfg, err := baton.NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	return baton.NewLocker(&fakeBackend{hold: h}, cfg)
}

var errGone = fmt.Errorf("%w: the key was gone when released", baton.ErrLeaseLost)

// TestLease_ReleaseFindsLoss: a loss only the release finds (the Hold's
// Release returns an error matching ErrLeaseLost) is the lease's loss:
// Release returns nil, Err reports it, and Run returns it although fn
// returned nil.
func TestLease_ReleaseFindsLoss(t *testing.T) {
	h := newFakeHold(func(h *fakeHold) error { h.end(baton.ErrReleased); return errGone })
	err := fakeLocker(t, h).Run(context.Background(), "job", func(context.Context, *baton.Lease) error { return nil })
	var lost *baton.LostError
	if !errors.As(err, &lost) || !errors.Is(err, errGone) {
		t.Fatalf("Run whose release found the lease lost = %v; want a *LostError with the release's cause", err)
	}

	h = newFakeHold(func(h *fakeHold) error { h.end(baton.ErrReleased); return errGone })
	lease, err := fakeLocker(t, h).Acquire(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Errorf("Release that found the lease lost = %v, want nil", err)
	}
	if !errors.As(lease.Err(), &lost) {
		t.Errorf("Err after a release that found the lease lost = %v, want a *LostError", lease.Err())
	}
}

// TestLease_CleanReleaseNoFalseLoss: a hold whose Err turns to a loss only
// after its Release freed the lock (a renewal in flight, refused because
// the release deleted the key first) was released, not lost.
func TestLease_CleanReleaseNoFalseLoss(t *testing.T) {
	h := newFakeHold(func(h *fakeHold) error {
		h.end(fmt.Errorf("%w: renewal refused", baton.ErrLeaseLost)) // the renewal, after the delete
		return nil
	})
	err := fakeLocker(t, h).Run(context.Background(), "job", func(context.Context, *baton.Lease) error { return nil })
	if err != nil {
		t.Fatalf("Run with a clean release = %v, want nil", err)
	}
}

// TestLease_LossNotYetRelayed: a loss the hold saw just before fn returned,
// which the Lease had not yet heard of (its AfterFunc not yet run), is
// reported by Run all the same: the release looks first.
func TestLease_LossNotYetRelayed(t *testing.T) {
	for range 100 {
		h := newFakeHold(func(h *fakeHold) error { h.end(baton.ErrReleased); return nil })
		err := fakeLocker(t, h).Run(context.Background(), "job", func(context.Context, *baton.Lease) error {
			h.end(fmt.Errorf("%w: the key was deleted", baton.ErrLeaseLost))
			return nil
		})
		if !errors.Is(err, baton.ErrLeaseLost) {
			t.Fatalf("Run whose hold was lost as fn returned = %v, want ErrLeaseLost", err)
		}
	}
}

// TestLease_DeadlinePassedBeforeRelease: a hold whose local deadline has
// passed but whose timer has not fired yet (its Context still live) was
// lost, not released: fn may have run past the deadline. Run reports it,
// and so does Err afterwards.
func TestLease_DeadlinePassedBeforeRelease(t *testing.T) {
	released := false
	h := newFakeHold(func(h *fakeHold) error { released = true; h.end(baton.ErrReleased); return nil })
	start := time.Now()
	h.deadlines = func(n int) time.Time {
		if n == 0 { // the grant's look: still ahead (see TestLease_GrantedPastDeadline)
			return start.Add(time.Hour)
		}
		return start.Add(-time.Millisecond) // passed while fn ran
	}
	var lease *baton.Lease
	err := fakeLocker(t, h).Run(context.Background(), "job", func(_ context.Context, l *baton.Lease) error {
		lease = l
		return nil
	})
	if !errors.Is(err, baton.ErrLeaseLost) {
		t.Fatalf("Run released after the local deadline = %v, want ErrLeaseLost", err)
	}
	var lost *baton.LostError
	if !errors.As(lease.Err(), &lost) || !errors.Is(lost, baton.ErrLeaseLost) {
		t.Errorf("Err after a release past the local deadline = %v, want a *LostError", lease.Err())
	}
	if !released {
		t.Error("the hold was not released; the lock stays until its TTL runs out")
	}
}

// TestLease_DeadlinePassesDuringRelease: a deadline that passes between
// the release's first look at it and the work's stop is a loss too: the
// work ran up to the stop, past the deadline.
func TestLease_DeadlinePassesDuringRelease(t *testing.T) {
	h := newFakeHold(func(h *fakeHold) error { h.end(baton.ErrReleased); return nil })
	start := time.Now()
	h.deadlines = func(n int) time.Time {
		if n == 0 { // the first look: still ahead
			return start.Add(time.Hour)
		}
		return start.Add(-time.Millisecond) // from then on: passed
	}
	lease, err := fakeLocker(t, h).Acquire(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
		t.Fatalf("Err after a release during which the deadline passed = %v, want the loss", lease.Err())
	}
}

var errCut = fmt.Errorf("%w: cut off", baton.ErrLeaseLost)

// TestLease_LossReportedInOneStep: the moment a lease's Err reports a loss,
// Run's fn finds its context cancelled, with the loss as its cause: the
// lease, its Err and fn's context change together (doc.go: "reported three
// ways at once"). Before, each followed the other through context.AfterFunc,
// a goroutine hop later, and fn could see the loss in Err with its context
// still live. Many rounds: the hop was lost only now and then.
func TestLease_LossReportedInOneStep(t *testing.T) {
	for i := range 500 {
		h := newFakeHold(func(h *fakeHold) error { h.end(baton.ErrReleased); return nil })
		err := fakeLocker(t, h).Run(context.Background(), "job", func(ctx context.Context, lease *baton.Lease) error {
			h.end(errCut)
			if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
				return fmt.Errorf("fn: Err right after the hold ended = %v, want the loss", lease.Err())
			}
			if ctx.Err() == nil {
				return errors.New("fn: lease.Err reports the loss while fn's context is live")
			}
			if !errors.Is(context.Cause(ctx), baton.ErrLeaseLost) {
				return fmt.Errorf("fn: its context's cause = %v, want the loss", context.Cause(ctx))
			}
			return nil
		})
		// Run joins fn's error to the loss: fn returned nil when all held.
		if !errors.Is(err, baton.ErrLeaseLost) || strings.Contains(err.Error(), "fn: ") {
			t.Fatalf("round %d: Run = %v", i, err)
		}
	}
}

// TestLease_HoldEndedBeforeLease: a hold that ends as Acquire builds the
// Lease (a loss just after the backend granted it) makes a Lease that is
// lost from the start: Err, Done and the work context say so when Acquire
// returns, not a goroutine hop later.
func TestLease_HoldEndedBeforeLease(t *testing.T) {
	for i := range 500 {
		h := newFakeHold(func(h *fakeHold) error { return nil })
		h.end(errCut)
		lease, err := fakeLocker(t, h).Acquire(context.Background(), "job")
		if err != nil {
			t.Fatal(err)
		}
		// The context and Done first: Err relays a loss itself.
		if lease.Context().Err() == nil {
			t.Fatalf("round %d: a lease on an ended hold has a live work context", i)
		}
		select {
		case <-lease.Done():
		default:
			t.Fatalf("round %d: Done not closed", i)
		}
		if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
			t.Fatalf("round %d: a lease on an ended hold: Err %v, want the loss", i, lease.Err())
		}
		_ = lease.Release(context.Background())
	}
}

// TestRun_FnKeepsCallerDeadline: fn's context is the caller's, with its
// deadline and values, and ends with context.DeadlineExceeded when the
// deadline passes (libraries read ctx.Deadline for their own timeouts).
func TestRun_FnKeepsCallerDeadline(t *testing.T) {
	h := newFakeHold(func(h *fakeHold) error { h.end(baton.ErrReleased); return nil })
	type key struct{}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), 50*time.Millisecond)
	defer cancel()
	want, _ := ctx.Deadline()
	err := fakeLocker(t, h).Run(ctx, "job", func(ctx context.Context, lease *baton.Lease) error {
		if d, ok := ctx.Deadline(); !ok || !d.Equal(want) {
			return fmt.Errorf("fn's deadline %v (%v), want the caller's %v", d, ok, want)
		}
		if ctx.Value(key{}) != "v" {
			return errors.New("fn's context lacks the caller's values")
		}
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("fn's context ended with %v, want context.DeadlineExceeded", ctx.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLease_GrantedPastDeadline: a hold whose local deadline passed by the
// time the Lease is made (a pause after the backend's look) is a lost
// lease from the start, its hold released at once (a caller that sees
// the loss may drop the lease without Release), and Run neither raises
// its fence nor calls fn on it.
func TestLease_GrantedPastDeadline(t *testing.T) {
	releases := 0
	hold := newFakeHold(func(h *fakeHold) error { releases++; h.end(baton.ErrReleased); return nil })
	hold.deadline = time.Now().Add(-time.Millisecond)
	l := fakeLocker(t, hold)
	defer l.Close()
	lease, err := l.Acquire(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lease.Err(), baton.ErrLeaseLost) || lease.Context().Err() == nil || releases != 1 {
		t.Errorf("lease granted past its deadline: Err %v, work context %v, hold released %d times; want lost, cancelled and released once", lease.Err(), lease.Context().Err(), releases)
	}
	if err := lease.Release(t.Context()); err != nil || releases != 1 || !errors.Is(lease.Err(), baton.ErrLeaseLost) {
		t.Errorf("Release of a lease lost as granted: %v, hold released %d times, Err %v; want nil, once, still lost", err, releases, lease.Err())
	}

	released := false
	hold = newFakeHold(func(h *fakeHold) error { released = true; h.end(baton.ErrReleased); return nil })
	hold.deadline = time.Now().Add(-time.Millisecond)
	cfg, err := baton.NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	fl, ok := baton.NewLocker(&fencedFakeBackend{fakeBackend{hold: hold}}, cfg).Fenced()
	if !ok {
		t.Fatal("not fenced")
	}
	ran := false
	err = fl.Run(t.Context(), "job", raiseFails{}, func(context.Context, *baton.FencedLease) error { ran = true; return nil })
	if ran || !errors.Is(err, baton.ErrLeaseLost) || errors.Is(err, errRaised) || !released {
		t.Errorf("Run on a lease lost as granted: fn ran %v, err %v, hold released %v; want neither the fence nor fn, the loss, and the hold released (a ZooKeeper node would stay for the session's life)", ran, err, released)
	}
}

var errRaised = errors.New("fence raised")

// raiseFails is a fence whose Raise fails with errRaised: a Run that
// raises it reports that.
type raiseFails struct{}

func (raiseFails) Raise(context.Context, string, baton.Token) error { return errRaised }

// TestNewLocker_ConfigByHand: a Config built by hand, with no Logger, makes
// a Locker that acquires, logs a loss and releases without a nil logger's
// panic.
func TestNewLocker_ConfigByHand(t *testing.T) {
	hold := newFakeHold(func(h *fakeHold) error { h.end(baton.ErrReleased); return nil })
	hold.deadline = time.Now().Add(time.Minute)
	cfg := baton.Config{TTL: 3 * time.Second, RenewEvery: time.Second, Drift: 100 * time.Millisecond, ReleaseTimeout: time.Second, RequestTimeout: time.Second}
	if err := cfg.Validate(0); err != nil {
		t.Fatal(err)
	}
	l := baton.NewLocker(&fakeBackend{hold: hold}, cfg)
	defer l.Close()
	lease, err := l.Acquire(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	hold.end(errGone) // logged as the lease's loss
	<-lease.Done()
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

var errServerDown = errors.New("server down")

// closingFakeBackend is a fakeBackend whose Close ends its hold, as the
// backends do: with ErrClosed, through the end that the hold's Release
// also goes through, once (as redis/hold.go's end), so that a Release
// after Close returns what Close's end returned.
type closingFakeBackend struct {
	fakeBackend
	once   sync.Once
	endErr error
	fail   error // what ending the hold returns: the server's failure
	// closing, when not nil, is closed as Close begins, which then waits
	// for proceed.
	closing, proceed chan struct{}
}

func newClosingFakeBackend(fail error) *closingFakeBackend {
	b := &closingFakeBackend{fail: fail}
	b.hold = newFakeHold(func(h *fakeHold) error { return b.end(baton.ErrReleased) })
	return b
}

func (b *closingFakeBackend) end(cause error) error {
	b.once.Do(func() {
		b.hold.end(cause)
		b.endErr = b.fail
	})
	return b.endErr
}

func (b *closingFakeBackend) Close() error {
	if b.closing != nil {
		close(b.closing)
		<-b.proceed
	}
	return b.end(baton.ErrClosed)
}

// TestLease_ReleaseAfterClose_CloseFailed: a lease that Locker.Close ended
// is lost, and releasing a lost lease returns nil: when Close's end of the
// hold failed (the server down), a later Release (the caller's deferred
// one) does not return that failure again, nor log "release failed" a
// second time; Close returned it. Before, Release returned it as its own.
func TestLease_ReleaseAfterClose_CloseFailed(t *testing.T) {
	b := newClosingFakeBackend(errServerDown)
	var logs strings.Builder
	var logMu sync.Mutex
	cfg, err := baton.NewConfig(baton.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	l := baton.NewLocker(b, cfg)
	lease, err := l.Acquire(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, errServerDown) {
		t.Fatalf("Close whose end of the hold failed = %v, want that failure", err)
	}
	if err := lease.Err(); !errors.Is(err, baton.ErrLeaseLost) || !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("Err after Close = %v, want a loss with ErrClosed", err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Errorf("Release of a lease Close ended = %v, want nil: releasing a lost lease returns nil", err)
	}
	if err := asynclog.Flush(t.Context(), l.Config().Logger); err != nil { // the logger's records come from a goroutine of their own
		t.Fatal(err)
	}
	logMu.Lock()
	logged := logs.String()
	logMu.Unlock()
	if strings.Contains(logged, "release failed") {
		t.Errorf("Release of a lease Close ended logged a failed release:\n%s", logged)
	}

	// A lease that Locker.Close marked lost, released before the
	// backend's Close came to its hold, fails on its own: the failure is
	// the release's to return (a backend such as Redis forgets a hold
	// its release ended, and its Close would not report it).
	b = newClosingFakeBackend(errServerDown)
	b.closing = make(chan struct{})
	b.proceed = make(chan struct{})
	l = baton.NewLocker(b, cfg)
	lease, err = l.Acquire(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	<-b.closing // the lease is marked lost; the backend's Close waits
	if err := lease.Release(t.Context()); !errors.Is(err, errServerDown) {
		t.Errorf("Release that ended the hold itself, as Close began = %v, want its failure", err)
	}
	close(b.proceed)
	<-closed

	// A failure of the lease's own release, before Close, is still its
	// error: the fix is for leases Close ended, not for every failure.
	b = newClosingFakeBackend(errServerDown)
	l = baton.NewLocker(b, cfg)
	defer l.Close()
	lease, err = l.Acquire(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(t.Context()); !errors.Is(err, errServerDown) {
		t.Errorf("Release whose request failed = %v, want the failure", err)
	}
}

// lockedWriter serializes writes to w with mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// nilHoldBackend is a backend with a bug: its Acquire returns neither a
// hold nor an error.
type nilHoldBackend struct{}

func (nilHoldBackend) Acquire(context.Context, baton.Request) (baton.Hold, error) { return nil, nil }
func (nilHoldBackend) Close() error                                               { return nil }

// TestLocker_NilHold: a backend's Acquire that returns no hold and no error
// (Redlock's did, after a stall) is an error saying so, not a panic on the
// nil hold.
func TestLocker_NilHold(t *testing.T) {
	cfg, err := baton.NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	l := baton.NewLocker(nilHoldBackend{}, cfg)
	defer l.Close()
	lease, err := l.TryAcquire(context.Background(), "job")
	if err == nil || lease != nil || !strings.Contains(err.Error(), "neither a hold nor an error") {
		t.Fatalf("TryAcquire on a backend that returns nothing = %v, %v; want an error saying so", lease, err)
	}
}
