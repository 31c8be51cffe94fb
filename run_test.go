package baton_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/fence/sqlite"
	"github.com/baton-go/baton/internal/testsvc"
)

// etcdEndpoint is the embedded etcd the examples and tests of this package
// share, started by TestMain.
var etcdEndpoint string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-test-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := testsvc.NewEtcd(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded etcd:", err)
		os.Exit(1)
	}
	etcdEndpoint = srv.Endpoint
	code := m.Run()
	srv.Stop()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func setup(t *testing.T) (*baton.FencedLocker, *sqlite.Store, *clientv3.Client) {
	t.Helper()
	c := testsvc.Client(t, etcdEndpoint)
	locker, err := etcd.New(c, baton.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return locker, store, c
}

func TestFencedLocker_Run_RaisesFenceFirst(t *testing.T) {
	locker, store, _ := setup(t)
	name := "run-fence-" + t.Name()[len(t.Name())-5:]
	ran := false
	err := locker.Run(context.Background(), name, store, func(ctx context.Context, lease *baton.FencedLease) error {
		ran = true
		n, err := store.Newest(ctx, name)
		if n != lease.Token() {
			t.Errorf("inside fn the fence is at %d, want the lease's token %d", n, lease.Token())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("Run returned nil without running fn")
	}
}

func TestFencedLocker_Run_StaleTokenSkipsFn(t *testing.T) {
	locker, store, _ := setup(t)
	name := "run-stale"
	// A newer holder has already raised the fence far ahead.
	if err := store.Raise(context.Background(), name, 1<<40); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := locker.Run(context.Background(), name, store, func(context.Context, *baton.FencedLease) error {
		ran = true
		return nil
	})
	var st *baton.StaleTokenError
	if !errors.As(err, &st) || st.Newest != 1<<40 {
		t.Fatalf("Run with a stale token = %v, want *StaleTokenError naming the newest token", err)
	}
	if ran {
		t.Fatal("fn ran although the fence refused the token")
	}
	// The lock was released: another holder gets it at once.
	l2, err := locker.TryAcquire(context.Background(), name)
	if err != nil {
		t.Fatalf("lock not released after the stale fence: %v", err)
	}
	_ = l2.Release(context.Background())
}

// TestLocker_Run_LossCancelsFnAndIsReported: a loss cancels fn's ctx with
// the *LostError as its cause; Run still waits for fn (which may be
// finishing a write) and then reports the loss although fn returned nil.
func TestLocker_Run_LossCancelsFnAndIsReported(t *testing.T) {
	locker, _, admin := setup(t)
	name := "run-lost"
	sawLoss := make(chan struct{}) // fn's ctx was cancelled by the loss
	finish := make(chan struct{})  // the test lets fn return
	var once sync.Once
	letFnReturn := func() { once.Do(func() { close(finish) }) }
	t.Cleanup(letFnReturn)
	runErr := make(chan error, 1)
	go func() {
		runErr <- locker.Locker().Run(context.Background(), name, func(ctx context.Context, lease *baton.Lease) error {
			// An operator deletes the lock key: the lease is lost. Not on
			// ctx: the loss may cancel it before the delete's answer comes.
			if _, err := admin.Delete(context.Background(), lease.Key()); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				return errors.New("fn's ctx not cancelled within 10s of the loss")
			}
			var lost *baton.LostError
			if !errors.As(context.Cause(ctx), &lost) {
				t.Errorf("fn's ctx cause = %v, want *LostError", context.Cause(ctx))
			}
			close(sawLoss)
			<-finish
			return nil // fn itself says it finished
		})
	}()
	select {
	case <-sawLoss:
	case err := <-runErr:
		t.Fatalf("Run returned %v before fn saw the loss", err)
	case <-time.After(15 * time.Second):
		t.Fatal("fn did not see the loss within 15s")
	}
	// fn is still running after the loss: Run must not return before it.
	select {
	case err := <-runErr:
		t.Fatalf("Run returned (%v) while fn was still running", err)
	case <-time.After(200 * time.Millisecond):
	}
	letFnReturn()
	var err error
	select {
	case err = <-runErr:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of fn returning")
	}
	if !errors.Is(err, baton.ErrLeaseLost) {
		t.Fatalf("Run after a loss = %v, want ErrLeaseLost even though fn returned nil", err)
	}
}

func TestLocker_Run_CallerCancelled(t *testing.T) {
	locker, _, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	err := locker.Locker().Run(ctx, "run-cancel", func(ctx context.Context, _ *baton.Lease) error {
		cancel()
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, baton.ErrLeaseLost) {
		t.Fatalf("Run cancelled by the caller = %v, want context.Canceled and not a loss", err)
	}
}

// TestLocker_Run_FnPanics_Releases: a panicking fn does not keep the lock:
// Run releases the lease and lets the panic go on to a caller that
// recovers, as net/http does.
func TestLocker_Run_FnPanics_Releases(t *testing.T) {
	released := false
	h := newFakeHold(func(h *fakeHold) error { released = true; h.end(baton.ErrReleased); return nil })
	var lease *baton.Lease
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want fn's panic", r)
			}
		}()
		_ = fakeLocker(t, h).Run(context.Background(), "job", func(_ context.Context, l *baton.Lease) error {
			lease = l
			panic("boom")
		})
	}()
	if !released {
		t.Fatal("fn panicked and the hold was not released: the lock stays held while the process lives")
	}
	if err := lease.Err(); !errors.Is(err, baton.ErrReleased) {
		t.Errorf("Err after the panic = %v, want ErrReleased", err)
	}
}

// fencedFakeBackend is a fakeBackend that declares fencing tokens, so that
// its Locker converts to a FencedLocker.
type fencedFakeBackend struct{ fakeBackend }

func (*fencedFakeBackend) TokenSource() string { return "the test" }

// blockedFence is a Fence whose Raise waits for its ctx to end, as a
// PostgreSQL fence waits on a frozen old holder's transaction.
type blockedFence struct {
	raising chan struct{} // closed when Raise is called
	unblock chan struct{} // closed by the test's cleanup
}

func (f *blockedFence) Raise(ctx context.Context, resource string, token baton.Token) error {
	close(f.raising)
	select {
	case <-ctx.Done():
		return fmt.Errorf("raise fence %q to %d: %w", resource, token, context.Cause(ctx))
	case <-f.unblock:
		return errors.New("raise fence: the test ended")
	}
}

// TestFencedLocker_Run_RaiseBlocked_CallerCancels: a Raise that is held up
// ends when the caller cancels Run's ctx, and the lease is released; the
// lease's own renewal would otherwise keep it going for ever.
func TestFencedLocker_Run_RaiseBlocked_CallerCancels(t *testing.T) {
	released := make(chan struct{})
	h := newFakeHold(func(h *fakeHold) error { close(released); h.end(baton.ErrReleased); return nil })
	cfg, err := baton.NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	fl, ok := baton.NewLocker(&fencedFakeBackend{fakeBackend{hold: h}}, cfg).Fenced()
	if !ok {
		t.Fatal("the fenced fake backend's Locker does not convert")
	}
	fence := &blockedFence{raising: make(chan struct{}), unblock: make(chan struct{})}
	t.Cleanup(func() { close(fence.unblock) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() {
		runErr <- fl.Run(ctx, "job", fence, func(context.Context, *baton.FencedLease) error {
			t.Error("fn ran although the fence was not raised")
			return nil
		})
	}()
	<-fence.raising
	cancel()
	select {
	case err := <-runErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run cancelled during Raise = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its ctx being cancelled while the fence was raised")
	}
	select {
	case <-released:
	default:
		t.Error("Run returned without releasing the lease")
	}
}
