package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/baton-go/baton/internal/syncbuf"
	"github.com/baton-go/baton/internal/testsvc"
)

// mainEnv makes the test binary act as the baton command, so the tests run
// the real CLI in real processes without a separate build.
const mainEnv = "BATON_TEST_AS_BATON"

func TestMain(m *testing.M) {
	// The guard of a command's group (startGuard) is this binary too.
	if isGuard() {
		os.Exit(runGuard())
	}
	// A command started by baton run or elect (it has BATON_TOKEN) may be
	// this binary in writer mode; otherwise the binary may be baton itself.
	if db := os.Getenv(writerEnv); db != "" && os.Getenv("BATON_TOKEN") != "" {
		os.Exit(fencedWriter(db))
	}
	if store := os.Getenv(raiseAheadEnv); store != "" && os.Getenv("BATON_LOCK") != "" {
		os.Exit(raiseAhead(store, os.Getenv("BATON_LOCK")))
	}
	if os.Getenv(mainEnv) == "1" {
		os.Exit(mainCode())
	}
	code := m.Run()
	pg.Stop()
	zkSrv.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// pg and zkSrv are the PostgreSQL and ZooKeeper the tests share, each
// started on first use.
var (
	pg    testsvc.Postgres
	zkSrv testsvc.ZooKeeper
)

// batonCmd returns a command running the CLI with args in its own process
// group.
func batonCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	// The race detector waits 1s at exit for late reports; these processes
	// are many and short.
	cmd.Env = append(os.Environ(), mainEnv+"=1", "GORACE=atexit_sleep_ms=20")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// result is a finished baton process.
type result struct {
	code           int
	stdout, stderr string
}

// runBaton runs the CLI to completion in a process of its own, with a
// deadline.
func runBaton(t *testing.T, args ...string) result {
	t.Helper()
	return startBaton(t, args...).wait(t)
}

// runInProcess runs the CLI in this process, for fast usage checks, and
// for the fake backend's tests. Its buffers are safe for the copiers of a
// command's output and the lease's loss, which write from goroutines.
func runInProcess(args ...string) result {
	var out, errb syncbuf.Buffer
	code := run(context.Background(), args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// oneLine checks that stderr is a single "baton: ..." line: no stack trace,
// no cobra usage dump.
func oneLine(t *testing.T, r result) {
	t.Helper()
	s := strings.TrimRight(r.stderr, "\n")
	if strings.Count(s, "\n") != 0 || !strings.HasPrefix(s, "baton: ") || strings.Contains(s, "goroutine ") {
		t.Errorf("stderr is not one baton: line: %q", r.stderr)
	}
}
