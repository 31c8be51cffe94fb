package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/asynclog"
)

// Exit codes, as the CLI contract fixes them (sysexits where one fits, the
// shell's where the shell has one). baton run and elect otherwise exit with
// the command's own code; the help of run and the README list them all.
const (
	exitOK          = 0
	exitUsage       = 2   // bad flags or arguments
	exitUnavailable = 69  // EX_UNAVAILABLE: the lock service or store is unreachable
	exitNotAcquired = 75  // EX_TEMPFAIL: not acquired within --wait
	exitLeaseLost   = 76  // the lease was lost while the command ran
	exitStale       = 77  // the fence refused our token
	exitCannotRun   = 127 // the command could not be started (as sh says "not found")
	exitInterrupted = 130 // SIGINT, SIGTERM, SIGHUP or SIGQUIT while waiting for the lock (128+SIGINT, as sh)
	exitBrokenPipe  = 141 // baton's own output has no reader left (128+SIGPIPE, as sh)
	exitFailure     = 1   // anything else
)

// exitError carries an exit code and an already-printed or printable
// message through cobra.
type exitError struct {
	code int
	msg  string // printed as "baton: msg" unless empty
}

func (e *exitError) Error() string { return e.msg }

// usageError marks a usage problem: exit 2.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

// cobraUsage marks an error of cobra's own (a flag it cannot parse,
// arguments a command does not take, an unknown command, a required flag
// not given) as a usage error, pointing to cmd's help (the root's when cmd
// is nil); nil stays nil, and an error already marked is left as it is.
func cobraUsage(cmd *cobra.Command, err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	path := "baton"
	if cmd != nil && cmd.Name() != cobra.ShellCompRequestCmd {
		path = cmd.CommandPath()
	}
	return &exitError{code: exitUsage, msg: suggested(err.Error()) + " (see " + path + " --help)"}
}

// suggested turns the suggestions cobra appends to an unknown command's
// error, a line of their own after a blank one and one name per line
// after that, into the end of its first line: unknown command "rn" for
// "baton"; did you mean "run"?
func suggested(msg string) string {
	head, names, ok := strings.Cut(msg, "\n\nDid you mean this?\n")
	if !ok {
		return msg
	}
	quoted := strings.Fields(names)
	for i, n := range quoted {
		quoted[i] = strconv.Quote(n)
	}
	return head + "; did you mean " + strings.Join(quoted, " or ") + "?"
}

// joinLines joins msg's lines with "; ", leaving out blank ones and the
// space around each, so that an error prints as one line.
func joinLines(msg string) string {
	lines := strings.Split(msg, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "; ")
}

// executed marks the errors cobra returns before any hook of ours can see
// them: an unknown command (cobra found no command to call, so cmd, the
// root, was never called) and the argument check of the hidden __complete
// command, which cobra makes while it executes, after markArgErrors. cmd
// and err are what ExecuteC returned.
func executed(cmd *cobra.Command, err error) error {
	if err != nil && (cmd.CalledAs() == "" || cmd.Name() == cobra.ShellCompRequestCmd) {
		return cobraUsage(cmd, err)
	}
	return err
}

// errOutputGone marks a write to baton's own standard output that failed
// because its reader is gone (EPIPE).
var errOutputGone = errors.New("standard output has no reader")

// outputWriter is baton's standard output: a write that fails with EPIPE
// fails with errOutputGone too, which exitCode maps to 141.
type outputWriter struct{ w io.Writer }

func (o outputWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		err = fmt.Errorf("%w: %w", errOutputGone, err)
	}
	return n, err
}

// commandOutput is w as a supervised command's standard output or error:
// the file under an outputWriter or an asynclog.Writer (newMessageWriter). Handed a wrapper, exec
// would copy the command's output through a pipe, and Wait would wait for
// every process that holds that pipe, the command's leftover group
// included.
func commandOutput(w io.Writer) io.Writer {
	switch o := w.(type) {
	case outputWriter:
		return o.w
	case *asynclog.Writer:
		return o.Unwrap()
	}
	return w
}

// codeOf is the error that makes baton exit with a command's code.
func codeOf(code int) error {
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

// exitCode prints err as one line and maps it to an exit code.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errOutputGone) {
		// Whoever read baton's output has gone (baton elect --observe |
		// head -1): end as SIGPIPE would have, without a line nobody
		// reads. A broken pipe to a server is not this: it fails as the
		// server's error.
		return exitBrokenPipe
	}
	var ee *exitError
	code := exitFailure
	msg := err.Error()
	switch {
	case errors.As(err, &ee):
		code, msg = ee.code, ee.msg
	case errors.Is(err, baton.ErrInvalidOption):
		code = exitUsage
	case errors.Is(err, baton.ErrStaleToken):
		code = exitStale
	case errors.Is(err, baton.ErrLeaseLost):
		code = exitLeaseLost
	case errors.Is(err, baton.ErrNotAcquired):
		code = exitNotAcquired
	case errors.Is(err, baton.ErrUnavailable):
		code = exitUnavailable
	}
	if msg != "" {
		fmt.Fprintf(stderr, "baton: %s\n", joinLines(msg))
	}
	return code
}
