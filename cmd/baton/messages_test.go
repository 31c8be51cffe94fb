package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/proc"
	"github.com/baton-go/baton/internal/syncbuf"
)

// gate is a writer that blocks every Write until open is closed.
type gate struct {
	open chan struct{}
	buf  syncbuf.Buffer
}

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	return g.buf.Write(p)
}

// TestMessageWriter_StalledStderr: while stderr is not read, Write returns
// at once; lines past the queue are dropped and counted; once stderr is
// read, Close writes the queued lines in order, then the count.
func TestMessageWriter_StalledStderr(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	m := newMessageWriter(g)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range asynclog.Queue + 10 {
			fmt.Fprintf(m, "line %d\n", i)
		}
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked on a stderr that is not read")
	}
	close(g.open)
	m.Close()
	lines := strings.Split(strings.TrimSuffix(g.buf.String(), "\n"), "\n")
	// The drain goroutine may have taken the first line off the queue (and
	// be blocked writing it) before the queue filled: one more fits then.
	kept := len(lines) - 1
	if kept != asynclog.Queue && kept != asynclog.Queue+1 {
		t.Fatalf("%d lines written before the count, want %d or %d", kept, asynclog.Queue, asynclog.Queue+1)
	}
	for i, l := range lines[:kept] {
		if want := fmt.Sprintf("line %d", i); l != want {
			t.Fatalf("line %d is %q, want %q", i, l, want)
		}
	}
	if want := fmt.Sprintf("baton: %d of baton's own lines dropped here: stderr was not read", asynclog.Queue+10-kept); lines[kept] != want {
		t.Errorf("last line %q, want %q", lines[kept], want)
	}
	// After Close, a straggler's line is written directly.
	fmt.Fprintln(m, "late")
	if !strings.HasSuffix(g.buf.String(), "late\n") {
		t.Errorf("a line written after Close is missing: %q", g.buf.String())
	}
}

// TestMessageWriter_CountBeforeNextLine: the count of dropped lines comes
// before the next line that fits, in order.
func TestMessageWriter_CountBeforeNextLine(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	m := newMessageWriter(g)
	for i := range asynclog.Queue + 3 {
		fmt.Fprintf(m, "line %d\n", i)
	}
	close(g.open)
	// Wait for the queued lines to be written (not Flush, which would
	// write the count itself), then write one more.
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(g.buf.String(), "\n") < asynclog.Queue && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintln(m, "after")
	m.Close()
	out := g.buf.String()
	i := strings.Index(out, "lines dropped here")
	if i < 0 || !strings.HasSuffix(out, "stderr was not read\nafter\n") {
		t.Errorf("want the count of dropped lines, then the next line; got the tail %q", out[max(0, len(out)-200):])
	}
}

// TestRun_StalledStderr_RelayedSignalThenLoss: baton's stderr is a pipe
// nobody reads, and baton (--log-level info) has just passed a SIGUSR1 on
// to the command, which it logs. The lease is then lost: the command still
// gets its SIGTERM. Before, supervise's loop stayed in that log line's
// write, and the command ran on without a lease for as long as stderr was
// not read.
func TestRun_StalledStderr_RelayedSignalThenLoss(t *testing.T) {
	backend := etcdBackend(t)
	dir := t.TempDir()
	pidFile, usr1 := filepath.Join(dir, "pid"), filepath.Join(dir, "usr1")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	// The command notes each SIGUSR1; a trapped signal ends the shell's
	// wait at once. Its own stderr is /dev/null: the shell reports the
	// sleep the signal killed, and a write to the full pipe would stop it.
	cmd := batonCmd("--log-level", "info", "run", "--backend", backend, "--grace", "500ms", "invoices", "--", "sh", "-c",
		fmt.Sprintf(`exec 2>/dev/null; trap 'echo usr1 >> %[2]s' USR1; echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; while :; do sleep 600 & wait $!; done`, pidFile, usr1))
	cmd.Stderr = w
	run := startCmd(t, cmd)
	pid := waitPid(t, pidFile, func() string { return "no pid file" })
	fillPipe(t, w)
	// baton passes the signal on, then logs that it did. One that comes
	// before baton listens for it (the command may write its pid first) is
	// dropped: send it again until the command has one.
	waitFor(t, 20*time.Second, func() bool {
		if _, err := os.Stat(usr1); err == nil {
			return true
		}
		_ = run.cmd.Process.Signal(syscall.SIGUSR1)
		return false
	}, func() string { return "the command never got the SIGUSR1 baton was sent" })
	if r := runBaton(t, "release", "--force", "--backend", backend, "invoices"); r.code != 0 {
		t.Fatalf("release --force: %d %s", r.code, r.stderr)
	}
	waitFor(t, 30*time.Second, func() bool {
		_, state, ok := proc.Stat(pid)
		return !ok || state == 'Z'
	}, func() string { return "the command still runs 30s after the loss" })
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if res := run.wait(t); res.code != exitLeaseLost {
		t.Errorf("exit %d, want %d; stderr %q", res.code, exitLeaseLost, res.stderr)
	}
}
