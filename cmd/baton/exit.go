package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/baton-go/baton"
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
	exitInterrupted = 130 // SIGINT, SIGTERM or SIGHUP while waiting for the lock (128+SIGINT, as sh)
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

// exitCode prints err as one line and maps it to an exit code.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
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
	case isCobraUsage(msg):
		code = exitUsage
		msg += " (see baton --help)"
	}
	if msg != "" {
		fmt.Fprintf(stderr, "baton: %s\n", strings.ReplaceAll(msg, "\n", "; "))
	}
	return code
}

// isCobraUsage recognises cobra's own argument and flag errors, which it
// returns as plain errors.
func isCobraUsage(msg string) bool {
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument", "invalid argument", "accepts ", "requires at least", "requires at most", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
