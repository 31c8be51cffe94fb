package baton_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestRunScheduler_OutageThenLeadsAgain: the README's election loop leads
// again after an outage of the lock service that outlasts its lease and a
// campaign's request timeout. Before, the campaign that found etcd
// unreachable (ErrUnavailable) ended the loop, and the replica never led
// again.
func TestRunScheduler_OutageThenLeadsAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("short: waits out a lease and a request timeout")
	}
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(etcdEndpoint, "http://"))
	locker, err := etcd.New(testsvc.Client(t, "http://"+proxy.Addr()), baton.WithTTL(2*time.Second), baton.WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	terms := make(chan baton.Token)
	ended := make(chan struct{}, 1) // a term's end
	done := make(chan error, 1)
	go func() {
		done <- runScheduler(ctx, locker, func(ctx context.Context, token baton.Token) error {
			select {
			case terms <- token:
			case <-ctx.Done():
			}
			<-ctx.Done()
			select {
			case ended <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	lead := func() baton.Token {
		t.Helper()
		select {
		case tok := <-terms:
			return tok
		case err := <-done:
			t.Fatalf("runScheduler returned: %v", err)
		case <-ctx.Done():
			t.Fatal("no term within 60s")
		}
		return 0
	}
	first := lead()
	// Cut off until the term ends (the lease's 2s), and then for three
	// request timeouts: the campaigns after the term get no answer within
	// their 500ms, so at least one fails with ErrUnavailable.
	proxy.Block()
	proxy.Cut()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the term outlived a cut-off of 20s, ten times its lease")
	}
	time.Sleep(3 * 500 * time.Millisecond)
	proxy.Unblock()
	if again := lead(); again <= first {
		t.Fatalf("token %d after the outage, %d before", again, first)
	}
	cancel()
	<-done
}

// TestREADME_GoSnippetsAreExamples: every Go block of the README is, line
// for line, in example_test.go, where it is compiled and run (comment
// lines aside: the README's blocks leave some out).
func TestREADME_GoSnippetsAreExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	trim := func(s string) string {
		var out []string
		sc := bufio.NewScanner(strings.NewReader(s))
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "//") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	examples := trim(string(ex))
	blocks := strings.Split(string(readme), "```go\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go block")
	}
	for _, b := range blocks {
		code, _, _ := strings.Cut(b, "```")
		if !strings.Contains(examples, trim(code)) {
			t.Errorf("README's Go block is not in example_test.go:\n%s", code)
		}
	}
}

// TestLocker_Leader_Unsupported: a backend that cannot look up holders or
// report changes of leader makes Leader and Observe fail with an error
// matching errors.ErrUnsupported, which callers test for (before: a plain
// message nothing could match).
func TestLocker_Leader_Unsupported(t *testing.T) {
	l := fakeLocker(t, newFakeHold(func(h *fakeHold) error { return nil }))
	defer l.Close()
	if _, err := l.Leader(t.Context(), "job"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Leader on a backend without Inspect = %v, want errors.ErrUnsupported", err)
	}
	if _, err := l.Observe(t.Context(), "job"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Observe on a backend without Observe = %v, want errors.ErrUnsupported", err)
	}
}

// inspectingFakeBackend is a fakeBackend that can look up holders, and
// counts the looks.
type inspectingFakeBackend struct {
	fakeBackend
	looks atomic.Int32
}

func (b *inspectingFakeBackend) Inspect(_ context.Context, names ...string) ([]baton.LockInfo, error) {
	b.looks.Add(1)
	return []baton.LockInfo{{Name: names[0], Holder: "h", Key: "fake/key", Token: 7}}, nil
}

// TestLocker_Leader_Closed: after Close, Leader returns an error matching
// ErrClosed, as Acquire does, without asking the closed backend. Before,
// it asked the backend, whose client Close may have closed.
func TestLocker_Leader_Closed(t *testing.T) {
	b := &inspectingFakeBackend{}
	cfg, err := baton.NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	l := baton.NewLocker(b, cfg)
	if term, err := l.Leader(t.Context(), "job"); err != nil || term.Key != "fake/key" {
		t.Fatalf("Leader = %+v, %v; want the fake's term", term, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Leader(t.Context(), "job"); !errors.Is(err, baton.ErrClosed) {
		t.Errorf("Leader after Close = %v, want ErrClosed", err)
	}
	if n := b.looks.Load(); n != 1 {
		t.Errorf("the backend was asked %d times, want once: Leader after Close asked it", n)
	}
}

// blockingInspector is a fakeBackend whose Inspect waits for its ctx to
// end, as a look at a lock service that does not answer does.
type blockingInspector struct {
	fakeBackend
	looking chan struct{} // closed when Inspect is called
}

func (b *blockingInspector) Inspect(ctx context.Context, _ ...string) ([]baton.LockInfo, error) {
	close(b.looking)
	<-ctx.Done()
	return nil, fmt.Errorf("inspect: %w", ctx.Err()) // not the cause: the Locker tells ErrClosed
}

// TestLocker_Leader_CloseEndsLook: Close ends a Leader look in flight,
// which returns an error matching ErrClosed, and Close returns once it has.
func TestLocker_Leader_CloseEndsLook(t *testing.T) {
	b := &blockingInspector{looking: make(chan struct{})}
	cfg, err := baton.NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	l := baton.NewLocker(b, cfg)
	done := make(chan error, 1)
	go func() {
		_, err := l.Leader(context.Background(), "job")
		done <- err
	}()
	<-b.looking
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, baton.ErrClosed) {
			t.Errorf("Leader ended by Close = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Leader still looking 10s after Close returned")
	}
}
