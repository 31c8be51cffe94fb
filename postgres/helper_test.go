package postgres_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/postgres"
)

// The test binary doubles as a helper process: a holder to freeze with
// SIGSTOP, or a clock reader to run under faketime.
const (
	helperEnv     = "BATON_PG_HELPER" // the mode
	helperDSNEnv  = "BATON_PG_DSN"
	helperNameEnv = "BATON_PG_NAME"
	helperTTLEnv  = "BATON_PG_TTL"
)

// helperMain runs the helper process. Holders print "held TOKEN" once they
// hold the lock, then wait for stdin to close (or for SIGKILL).
func helperMain(mode string) int {
	ctx := context.Background()
	dsn, name := os.Getenv(helperDSNEnv), os.Getenv(helperNameEnv)
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	switch mode {
	case "now": // what this process's clocks say: Go's, and libc's through date(1)
		out, err := exec.Command("date", "+%s%N").Output()
		if err != nil {
			return fail(err)
		}
		fmt.Printf("go %d\ndate %s\n", time.Now().UnixNano(), strings.TrimSpace(string(out)))
		return 0
	case "hold-baton":
		ttl, err := time.ParseDuration(os.Getenv(helperTTLEnv))
		if err != nil {
			return fail(err)
		}
		fl, err := postgres.Dial(ctx, dsn, baton.WithTTL(ttl), baton.WithHolder("frozen-"+strconv.Itoa(os.Getpid())))
		if err != nil {
			return fail(err)
		}
		defer fl.Close()
		lease, err := fl.Acquire(ctx, name)
		if err != nil {
			return fail(err)
		}
		fmt.Printf("held %d\n", lease.Token())
	case "hold-advisory":
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return fail(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
			return fail(err)
		}
		fmt.Println("held 0")
	default:
		return fail(fmt.Errorf("unknown helper mode %q", mode))
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// holder is a helper process holding a lock.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	token baton.Token
}

// startHolder runs a helper process in mode on dsn and waits until it holds
// name. It is killed when tb ends.
func startHolder(tb testing.TB, mode, dsn, name string, ttl time.Duration) *holder {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperDSNEnv+"="+dsn, helperNameEnv+"="+name, helperTTLEnv+"="+ttl.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: stdin}
	tb.Cleanup(h.kill)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("helper %s did not report holding %q: %v", mode, name, err)
	}
	tok, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "held "), 10, 64)
	if err != nil {
		tb.Fatalf("helper said %q", line)
	}
	h.token = baton.Token(tok)
	return h
}

func (h *holder) freeze() error { return h.cmd.Process.Signal(syscall.SIGSTOP) }

// kill ends the helper (a stopped process dies of SIGKILL too) and reaps it.
func (h *holder) kill() {
	if h.cmd.ProcessState != nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.stdin.Close()
	_ = h.cmd.Wait()
}
