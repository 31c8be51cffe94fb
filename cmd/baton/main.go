// Command baton runs a job once across many replicas: it runs a command
// under a lease on etcd, ZooKeeper, PostgreSQL or Redis, hands it a fencing
// token, and stops it when the lease is lost. `baton demo` replays the
// guide's frozen-holder night on an embedded etcd.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/asynclog"
)

func main() { os.Exit(mainCode()) }

// mainCode is main without os.Exit: the tests run it in the re-executed
// test binary.
func mainCode() int {
	if isGuard() {
		return runGuard()
	}
	// go-redis logs dial failures through a process-wide logger; baton
	// reports them as errors on one line instead.
	goredis.SetLogger(quietRedis{})
	// A write to a closed stdout or stderr (a log pipe that went away)
	// would kill baton with SIGPIPE: under baton run or elect, before it
	// stopped the command's group or released the lock, and under baton
	// demo before it stopped its runners (the demo, which ignores its
	// failed writes, then runs to its end). Caught, the signal only fails
	// the write (EPIPE); a subcommand that fails on a write to its own
	// output (outputWriter) ends quietly with 141, as the signal would
	// have. The command gets the default back (a caught signal is reset
	// on exec; an ignored one would be inherited).
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	ctx, stop := signalContext(handled(passedOn...)...)
	defer stop()
	return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// signalContext is cancelled by sigs (main gives SIGINT, SIGTERM, SIGHUP
// and SIGQUIT, less SIGHUP or SIGINT ignored at start: see handled), with the signal
// as its cause (a signalCause), which ends a wait for a lock (exit 130)
// and leaves its queue. While baton run or elect runs a command, supervise
// passes the same signals on to the command's process group instead. As
// with signal.NotifyContext, the signals stay caught until stop.
func signalContext(sigs ...os.Signal) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	if len(sigs) == 0 { // Notify with none would catch every signal
		return ctx, func() { cancel(nil) }
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() { // ends with stop
		select {
		case s := <-ch:
			cancel(signalCause{s})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// signalCause is the cause of signalContext's cancellation: the signal.
type signalCause struct{ sig os.Signal }

func (c signalCause) Error() string { return c.sig.String() + " signal received" }

// Is reports whether target is context.Canceled, as for the cause that
// signal.NotifyContext gives: code that asks whether its context was
// cancelled (interrupted, the backends) reads a signal as that.
func (c signalCause) Is(target error) bool { return target == context.Canceled }

// newMessageWriter returns the writer of baton's own lines (its log lines
// and reports) onto stderr: they go through a queue, so that a stderr
// nobody reads (a stuck log pipe, a terminal paused with Ctrl-S) never
// holds up what must not wait: the renewal timer that declares a lease
// lost, and supervise's loop, which stops the command on the loss. run
// owns it and closes it; a supervised command writes to the stderr under
// it (commandOutput).
func newMessageWriter(stderr io.Writer) *asynclog.Writer {
	return asynclog.NewWriter(stderr, func(n int) string {
		return fmt.Sprintf("baton: %d of baton's own lines dropped here: stderr was not read\n", n)
	})
}

// quietRedis drops go-redis's own log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// run is the whole command, testable: it parses args, runs the subcommand
// and returns the exit code. baton's own lines go to stderr through a
// message writer (newMessageWriter), which run closes before it writes the
// last one.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	msgs := newMessageWriter(stderr)
	defer msgs.Close() // on a panic too
	root := newRoot(outputWriter{stdout}, msgs)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	// The last line once the queue is out: written straight through, never
	// dropped, and after everything else.
	msgs.Close()
	return exitCode(msgs, executed(cmd, err))
}
