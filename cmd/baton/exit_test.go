package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/baton-go/baton"
)

// TestExitCode_CobraErrors: every kind of error cobra returns itself is a
// usage error, exit 2, on one line that points to the help of the command
// at fault (it pointed to baton --help for all); it is marked by a hook
// (flags, Args, required flags) or by executed (unknown command,
// __complete), never by its text.
func TestExitCode_CobraErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		help string // whose help the line points to
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "baton"`, "baton"},
		{[]string{"rn", "n", "--", "true"}, `unknown command "rn" for "baton"; did you mean "run"? (see`, "baton"},
		{[]string{"--bogus"}, "unknown flag: --bogus", "baton"},
		{[]string{"run", "-z"}, "unknown shorthand flag: 'z' in -z", "baton run"},
		{[]string{"run", "--ttl"}, "flag needs an argument: --ttl", "baton run"},
		{[]string{"elect", "--ttl", "nope"}, `invalid argument "nope" for "--ttl" flag`, "baton elect"},
		{[]string{"release", "a", "b"}, "accepts 1 arg(s), received 2", "baton release"},
		{[]string{"version", "extra"}, `unknown command "extra" for "baton version"`, "baton version"},
		{[]string{"completion", "bash", "extra"}, `unknown command "extra" for "baton completion bash"`, "baton completion bash"},
		{[]string{"fence", "show"}, `required flag(s) "store" not set`, "baton fence show"},
		{[]string{"__complete"}, "requires at least 1 arg(s), only received 0", "baton"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			r := runInProcess(tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || !strings.HasSuffix(r.stderr, " (see "+tc.help+" --help)\n") {
				t.Errorf("exit %d, stderr %q; want exit 2, %q and the pointer to %s --help", r.code, r.stderr, tc.want, tc.help)
			}
			oneLine(t, r)
		})
	}
}

// TestExitCode_BrokenPipe: only a failed write to baton's own output ends
// quietly with 141; a broken pipe to a server (EPIPE deep in a network
// error) is the server's failure, with its line and its code.
func TestExitCode_BrokenPipe(t *testing.T) {
	netErr := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	var stderr strings.Builder
	if code := exitCode(&stderr, &baton.UnavailableError{Where: "redis://h:6379", Err: netErr}); code != exitUnavailable || stderr.Len() == 0 {
		t.Errorf("a broken pipe to the lock service: exit %d, stderr %q; want 69 with a line", code, stderr.String())
	}
	stderr.Reset()
	_, err := outputWriter{w: brokenPipe{}}.Write([]byte("x\n"))
	if code := exitCode(&stderr, fmt.Errorf("print the leader: %w", err)); code != exitBrokenPipe || stderr.Len() != 0 {
		t.Errorf("a write to baton's own output with no reader: exit %d, stderr %q; want 141 and nothing said", code, stderr.String())
	}
}

// brokenPipe is a writer whose reader is gone.
type brokenPipe struct{}

func (brokenPipe) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.EPIPE}
}

// TestJoinLines: an error of several lines prints as one, without the
// blank lines and indentation that would leave "; ;" and tabs in it.
func TestJoinLines(t *testing.T) {
	for in, want := range map[string]string{
		"one":                     "one",
		"one\n":                   "one",
		"one\n\n\ttwo\n  three  ": "one; two; three",
		"\n\n":                    "",
		"a: b\nc":                 "a: b; c",
	} {
		if got := joinLines(in); got != want {
			t.Errorf("joinLines(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWithHint: an unreachable etcd on this machine is told to start one
// with baton serve; one elsewhere, or any other service, to check that it
// runs and is reachable (a remote cluster was told to run baton serve).
func TestWithHint(t *testing.T) {
	unavailable := &baton.UnavailableError{Where: "x", Err: fmt.Errorf("no answer")}
	for backend, serve := range map[string]bool{
		"etcd://127.0.0.1:2379":              true,
		"etcd://localhost:2379,[::1]:2379":   true,
		"etcd://127.0.0.1:2379/app":          true,
		"etcd://10.0.0.5:2379":               false,
		"etcd://db1:2379,127.0.0.1:2379":     false,
		"etcd://app:pw@etcd.internal:2379":   false,
		"redis://127.0.0.1:6379":             false,
		"postgres://app@127.0.0.1:5432/jobs": false,
	} {
		err := withHint(backend, unavailable)
		if got := strings.Contains(err.Error(), "baton serve"); got != serve || !strings.Contains(err.Error(), "pass --backend") {
			t.Errorf("withHint(%s) = %q; want baton serve named: %v", backend, err, serve)
		}
	}
}
