package asynclog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gated is a slog.Handler that records what it is handed, each Handle
// waiting until open is closed.
type gated struct {
	open  chan struct{}
	mu    *sync.Mutex
	got   *[]string
	attrs string
}

func newGated() *gated {
	return &gated{open: make(chan struct{}), mu: &sync.Mutex{}, got: new([]string)}
}

func (g *gated) Enabled(context.Context, slog.Level) bool { return true }
func (g *gated) Handle(ctx context.Context, r slog.Record) error {
	<-g.open
	line := g.attrs + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	if v, ok := ctx.Value(ctxKey{}).(string); ok {
		line += " ctx=" + v
	}
	if ctx.Err() != nil {
		line += " cancelled"
	}
	g.mu.Lock()
	*g.got = append(*g.got, line)
	g.mu.Unlock()
	return nil
}
func (g *gated) WithAttrs(as []slog.Attr) slog.Handler {
	c := *g
	c.attrs += fmt.Sprint(as) + " "
	return &c
}
func (g *gated) WithGroup(name string) slog.Handler {
	c := *g
	c.attrs += name + "."
	return &c
}
func (g *gated) lines() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), *g.got...)
}

type ctxKey struct{}

// TestHandler_BlockedHandler: while the handler blocks, logging returns at
// once; past the queue records are dropped and counted; once the handler
// takes records again, Flush hands on the queued ones in order, then the
// count.
func TestHandler_BlockedHandler(t *testing.T) {
	g := newGated()
	l := slog.New(New(g))
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range Queue + 10 {
			l.Info(fmt.Sprint("r", i))
		}
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("logging blocked on a handler that does not return")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := Flush(ctx, l); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush with the handler blocked = %v, want the deadline", err)
	}
	close(g.open)
	if err := Flush(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	got := g.lines()
	// drain may have taken the first record off the queue before it
	// filled: one more fits then.
	kept := len(got) - 1
	if kept != Queue && kept != Queue+1 {
		t.Fatalf("%d records handed on before the count, want %d or %d", kept, Queue, Queue+1)
	}
	for i, line := range got[:kept] {
		if want := fmt.Sprint("r", i); line != want {
			t.Fatalf("record %d is %q, want %q", i, line, want)
		}
	}
	if want := fmt.Sprintf("log records dropped: the log handler did not keep up dropped=%d", Queue+10-kept); got[kept] != want {
		t.Errorf("last record %q, want %q", got[kept], want)
	}
}

// TestHandler_CountBeforeNextRecord: the count of dropped records is handed
// on before the next record that fits.
func TestHandler_CountBeforeNextRecord(t *testing.T) {
	g := newGated()
	l := slog.New(New(g))
	for i := range Queue + 3 {
		l.Info(fmt.Sprint("r", i))
	}
	close(g.open)
	if err := Flush(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	l.Info("after")
	if err := Flush(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	got := g.lines()
	if n := len(got); n < 2 || got[n-1] != "after" || got[n-2] != "log records dropped: the log handler did not keep up dropped=3" &&
		got[n-2] != "log records dropped: the log handler did not keep up dropped=2" {
		t.Errorf("want the count of dropped records, then the next record; got the tail %q", got[max(0, len(got)-3):])
	}
}

// TestHandler_SharedQueue: handlers made by With and WithGroup keep the
// order records were logged in across them, and hand on to the wrapped
// handler's own With and WithGroup; the context keeps its values, not its
// cancellation.
func TestHandler_SharedQueue(t *testing.T) {
	g := newGated()
	close(g.open)
	base := slog.New(New(g))
	a, b := base.With("client", "A"), base.WithGroup("b")
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "trace-1"))
	cancel()
	for i := range 3 {
		a.InfoContext(ctx, fmt.Sprint("a", i))
		b.Info(fmt.Sprint("b", i), "k", i)
	}
	if err := Flush(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"[client=A] a0 ctx=trace-1", "b.b0 k=0",
		"[client=A] a1 ctx=trace-1", "b.b1 k=1",
		"[client=A] a2 ctx=trace-1", "b.b2 k=2",
	}
	got := g.lines()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("handed on\n%q\nwant\n%q", got, want)
	}
}

// TestNew_Idempotent: a Handler is not wrapped twice, and Flush of a
// logger on another handler returns at once.
func TestNew_Idempotent(t *testing.T) {
	h := New(slog.DiscardHandler)
	if New(h) != h {
		t.Error("New wrapped a Handler again")
	}
	if err := Flush(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
		t.Error(err)
	}
	if err := Flush(context.Background(), nil); err != nil {
		t.Error(err)
	}
}
