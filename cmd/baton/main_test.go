package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/baton-go/baton/internal/testsvc"
)

// mainEnv makes the test binary act as the baton command, so the tests run
// the real CLI in real processes without a separate build.
const mainEnv = "BATON_TEST_AS_BATON"

func TestMain(m *testing.M) {
	// A command started by baton run or elect (it has BATON_TOKEN) may be
	// this binary in writer mode; otherwise the binary may be baton itself.
	if db := os.Getenv(writerEnv); db != "" && os.Getenv("BATON_TOKEN") != "" {
		os.Exit(fencedWriter(db))
	}
	if os.Getenv(mainEnv) == "1" {
		os.Exit(realMain())
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

// realMain is main without os.Exit, for the re-executed test binary.
func realMain() int {
	goredis.SetLogger(quietRedis{})
	ctx, stop := signalContext()
	defer stop()
	return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

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

// runBaton runs the CLI to completion with a deadline.
func runBaton(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := batonCmd(args...)
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("baton %s: %v", strings.Join(args, " "), err)
		}
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("baton %s did not finish within 60s; stderr: %s", strings.Join(args, " "), errb.String())
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// runInProcess runs the CLI in this process, for fast usage checks.
func runInProcess(args ...string) result {
	var out, errb bytes.Buffer
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
