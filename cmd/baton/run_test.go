package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/internal/rounds"
	"github.com/baton-go/baton/internal/syncbuf"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
)

func etcdBackend(t *testing.T) string {
	t.Helper()
	return "etcd://" + strings.TrimPrefix(testsvc.StartEtcd(t).Endpoint, "http://")
}

// TestRun_ThreeTogether starts three `baton run --wait 0` on one name, 50
// rounds: exactly one runs the command, two exit 75. The winner's command
// holds the lock until the test has seen both others give up, so the three
// attempts always overlap.
func TestRun_ThreeTogether(t *testing.T) {
	backend := etcdBackend(t)
	dir := t.TempDir()
	const rounds = 50
	for round := range rounds {
		gate := filepath.Join(dir, fmt.Sprintf("go-%d", round))
		script := fmt.Sprintf(`echo "$BATON_TOKEN"; while [ ! -e %s ]; do sleep 0.01; done`, gate)
		var procs []*execResult
		for range 3 {
			procs = append(procs, startBaton(t, "run", "--backend", backend, "--ttl", "5s", "--wait", "0", "invoices", "--", "sh", "-c", script))
		}
		// Two must give up with 75 while the third holds the lock.
		waitFor(t, 30*time.Second, func() bool { return countExited(procs, 75) == 2 }, func() string {
			return fmt.Sprintf("round %d: exits %v", round, exits(procs))
		})
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		winners := 0
		for _, p := range procs {
			r := p.wait(t)
			switch r.code {
			case 0:
				winners++
				if _, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64); err != nil {
					t.Errorf("round %d: winner printed %q, want its token", round, r.stdout)
				}
			case exitNotAcquired:
				if !strings.Contains(r.stderr, "is held by") {
					t.Errorf("round %d: exit 75 without saying who holds it: %q", round, r.stderr)
				}
			default:
				t.Fatalf("round %d: exit %d, stderr %q", round, r.code, r.stderr)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, winners)
		}
	}
}

// TestRun_TokensIncrease runs 20 commands in a row and checks BATON_TOKEN
// strictly increases and ETCD_LOCK_REV matches it, as etcdctl lock sets it.
func TestRun_TokensIncrease(t *testing.T) {
	backend := etcdBackend(t)
	var prev int64
	for i := range 20 {
		r := runBaton(t, "run", "--backend", backend, "invoices", "--", "sh", "-c", `echo "$BATON_TOKEN $ETCD_LOCK_REV $BATON_LOCK $ETCD_LOCK_KEY"`)
		if r.code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, r.code, r.stderr)
		}
		f := strings.Fields(r.stdout)
		if len(f) != 4 {
			t.Fatalf("run %d printed %q", i, r.stdout)
		}
		tok, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || f[1] != f[0] || f[2] != "invoices" || !strings.HasPrefix(f[3], "/baton/lock/invoices/") {
			t.Fatalf("run %d: env %q: want token = ETCD_LOCK_REV, BATON_LOCK=invoices and the lock key", i, r.stdout)
		}
		if tok <= prev {
			t.Fatalf("run %d: token %d after %d", i, tok, prev)
		}
		prev = tok
	}
}

// TestRun_LeaseLost freezes the etcd server (a `baton serve` process) with
// SIGSTOP while a command runs: renewals stop, the lease is lost, the
// command gets SIGTERM, and baton exits 76 saying which lock and token.
func TestRun_LeaseLost(t *testing.T) {
	// It serves on its own ports: the server frozen below is the one that
	// answers.
	member := startServeMembers(t, 1)[0]
	serve := member.proc
	backend := "etcd://" + member.client
	waitFor(t, 30*time.Second, func() bool { return runInProcess("status", "--backend", backend).code == 0 }, func() string { return "baton serve not answering" })

	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	script := fmt.Sprintf(`trap 'echo got SIGTERM; exit 0' TERM; touch %s; sleep 60 & wait`, started)
	// The request timeout is 30s: a renewal that hangs on the frozen
	// server and is only given up at that timeout (the default, 5s, is
	// within the bound below) shows as 30s, where the lease's 2s local
	// deadline stops the command.
	run := startBaton(t, "run", "--backend", backend+"?request-timeout=30s", "--ttl", "2s", "--grace", "5s", "invoices", "--", "sh", "-c", script)
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, func() string { return "command did not start: " + run.stderr.String() })

	if err := syscall.Kill(serve.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	defer syscall.Kill(serve.cmd.Process.Pid, syscall.SIGCONT)
	r := run.wait(t)
	took := time.Since(frozen)
	if r.code != exitLeaseLost {
		t.Fatalf("exit %d, want 76; stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "got SIGTERM") {
		t.Errorf("the command did not get SIGTERM; stdout %q", r.stdout)
	}
	for _, want := range []string{`lease on "invoices"`, "token", "last renewal sent at", "SIGTERM"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %q", want, r.stderr)
		}
	}
	t.Logf("baton exited 76 %v after the server froze (TTL 2s)", took.Round(time.Millisecond))
	// About one TTL (2-2.5s) is expected; a loss noticed only when the
	// renewal's request gives up shows as 30s, one never noticed as
	// run.wait's 60s. 10s leaves a loaded machine room for the
	// SIGTERM, the command's exit and baton's, and keeps the bound within
	// a few TTLs.
	if took > 10*time.Second {
		t.Errorf("took %v to stop the command after the freeze; want about one TTL", took)
	}
}

// TestRun_Fence: a stale token at the fence exits 77 without running the
// command; --once skips a run already done and marks a successful one.
func TestRun_Fence(t *testing.T) {
	backend := etcdBackend(t)
	store := initStore(t)
	marker := filepath.Join(t.TempDir(), "ran")
	touch := []string{"sh", "-c", "echo ran >> " + marker}

	r := runBaton(t, append([]string{"run", "--backend", backend, "--fence", store, "--once", "2026-10-31", "invoices", "--"}, touch...)...)
	if r.code != 0 {
		t.Fatalf("first run: exit %d %s", r.code, r.stderr)
	}
	r = runBaton(t, append([]string{"run", "--backend", backend, "--fence", store, "--once", "2026-10-31", "invoices", "--"}, touch...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "already done") {
		t.Fatalf("second run of a done run id: exit %d, stderr %q; want 0 and a line saying so", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(marker); strings.Count(string(b), "ran") != 1 {
		t.Fatalf("command ran %d times, want once", strings.Count(string(b), "ran"))
	}

	// The fence is far ahead of etcd's revisions (it was raised with
	// another lock service's tokens): our token is refused, and since etcd
	// still names us the holder, the message says no later holder raised
	// it.
	s, err := fence.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Raise(context.Background(), "invoices", 1<<40); err != nil {
		t.Fatal(err)
	}
	r = runBaton(t, append([]string{"run", "--backend", backend, "--fence", store, "invoices", "--"}, touch...)...)
	if r.code != exitStale || !strings.Contains(r.stderr, "still names this lease the holder") {
		t.Fatalf("token behind the fence: exit %d, stderr %q; want 77, saying the fence is ahead of the lock service", r.code, r.stderr)
	}
	oneLine(t, r)
	if b, _ := os.ReadFile(marker); strings.Count(string(b), "ran") != 1 {
		t.Fatal("the command ran despite the stale token")
	}
}

// TestRun_SignalPassedOn: each signal baton passes on (SIGINT, SIGTERM,
// SIGHUP, SIGQUIT) reaches the command, baton exits with the command's code
// and frees the lock.
func TestRun_SignalPassedOn(t *testing.T) {
	backend := etcdBackend(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} { // as run --help says
		name := unix.SignalName(sig)
		t.Run(name, func(t *testing.T) {
			started := filepath.Join(t.TempDir(), "started")
			// sh starts the sleep with SIGINT ignored, so the trap ends it.
			script := fmt.Sprintf(`sleep 60 & trap 'kill $!; exit 42' %s; touch %s; wait`, strings.TrimPrefix(name, "SIG"), started)
			p := startBaton(t, "run", "--backend", backend, "invoices", "--", "sh", "-c", script)
			waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, func() string { return p.stderr.String() })
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if r := p.wait(t); r.code != 42 {
				t.Fatalf("exit %d after %s, want the command's 42; stderr %q", r.code, name, r.stderr)
			}
			if r := runBaton(t, "run", "--backend", backend, "invoices", "--", "true"); r.code != 0 {
				t.Fatalf("lock not free after the interrupted run: %d %s", r.code, r.stderr)
			}
		})
	}
}

// TestRun_CommandNotFound: a COMMAND that is not there, or not
// executable, or a script whose #! interpreter is not there (which exec
// reports as the script not found), or a text file with no #! line (exec
// format error), is exit 127 on one line before the
// lock service is touched: here it does not answer, which would be exit
// 69; run found the command missing only once the lock was taken and the
// fence raised.
func TestRun_CommandNotFound(t *testing.T) {
	backend := fmt.Sprintf("etcd://127.0.0.1:%d?request-timeout=1s", testsvc.ClosedPort(t))
	dir := t.TempDir()
	script := func(name, text string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	notExec := script("job.sh", "#!/bin/sh\necho ran\n", 0o644)
	noInterp := script("nointerp.sh", "#!/no/such/interpreter -e\necho ran\n", 0o755)
	crlf := script("crlf.sh", "#!/bin/sh\r\necho ran\r\n", 0o755)
	empty := script("empty.sh", "#! \necho ran\n", 0o755)
	noLine := script("noline.sh", "echo ran\n", 0o755)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"run", "--backend", backend, "job", "--", "no-such-command-here"}, "executable file not found"},
		{[]string{"run", "--backend", backend, "job", "--", notExec}, "permission denied"},
		{[]string{"elect", "--backend", backend, "job", "--", "./no-such-script.sh"}, "no such file"},
		{[]string{"run", "--backend", backend, "job", "--", noInterp}, `its #! line names "/no/such/interpreter", which is not there`},
		{[]string{"elect", "--backend", backend, "job", "--", crlf}, `its #! line names "/bin/sh\r", which is not there: the file has Windows line ends`},
		{[]string{"run", "--backend", backend, "job", "--", empty}, "its #! line names no interpreter"},
		{[]string{"elect", "--backend", backend, "job", "--", noLine}, "it has no #! line, so the kernel will not run it"},
	} {
		r := runInProcess(tc.args...)
		if r.code != exitCannotRun || !strings.Contains(r.stderr, "cannot start") || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("baton %s: exit %d, stderr %q; want %d, cannot start: %s", strings.Join(tc.args, " "), r.code, r.stderr, exitCannotRun, tc.says)
			continue
		}
		oneLine(t, r)
	}
}

// TestSaidLost: the exit line after a loss names the lease and points back
// to the cause told as the command was stopped; an error that names no
// lease is told whole.
func TestSaidLost(t *testing.T) {
	cause := fmt.Errorf("%w: lock key deleted", baton.ErrLeaseLost)
	for _, tc := range []struct {
		lost error
		want string
	}{
		{&baton.LostError{Name: "x", Token: 5, Cause: cause}, `lease on "x" (token 5) lost, as said above`},
		{&baton.LostError{Name: "x", Cause: cause}, `lease on "x" lost, as said above`},
		{fmt.Errorf("renewal: %w", &baton.LostError{Name: "x", Cause: cause}), `lease on "x" lost, as said above`},
		{cause, "lease lost: lock key deleted"},
	} {
		if got := saidLost(tc.lost); got != tc.want {
			t.Errorf("saidLost(%v) = %q, want %q", tc.lost, got, tc.want)
		}
	}
}

// TestCheckInterpreter: scripts whose interpreter is there, and files
// that are not text (binaries), pass; text with no #! line does not; the interpreter is checked as the kernel
// reads the line (split at spaces and tabs, after "#!" with or without a
// space).
func TestCheckInterpreter(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{"#!/bin/sh\necho\n", true},
		{"#! /bin/sh -e\necho\n", true},
		{"#!/bin/sh\t-e\n", true},
		{"#!/bin/sh", true},                      // no newline: the whole file is the line
		{"echo no line\n", false},                // text with no #! line: ENOEXEC
		{"echo 'no line, café'\r\n\tx\n", false}, // UTF-8, Windows line ends, a tab
		{"\x7fELF\x02\x01", true},
		{"MZ\x90\x00\x03", true},                                     // a binary of a format binfmt_misc may know
		{"echo " + strings.Repeat("x", 247) + "é and more\n", false}, // a character at bytes 252 and 253
		{"echo " + strings.Repeat("x", 250) + "é and more\n", false}, // a character across the 256 bytes read
		{"", true},
		{"#!/bin\n", false},          // a directory
		{"#!" + plain + "\n", false}, // not executable
		{"#!/bin/sh\r\n", false},
		{"#!\n", false},
	} {
		path := filepath.Join(dir, "s")
		if err := os.WriteFile(path, []byte(tc.text), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := checkInterpreter(path); (err == nil) != tc.ok {
			t.Errorf("%q: err = %v, want ok %v", tc.text, err, tc.ok)
		}
	}
}

// TestRun_BadInput: every usage problem is one line and the right code, and
// no line shows the password of a URL it names: the URLs that can carry one
// here (lock service and fence store, parseable or not, reachable or not)
// carry one.
func TestRun_BadInput(t *testing.T) {
	backend := etcdBackend(t)
	closed := testsvc.ClosedPort(t) // refuses connections until the test ends
	store := "sqlite:" + filepath.Join(t.TempDir(), "empty.db")
	const secret = "s3cret-pw"
	redisNode := testsvc.StartRedis(t).Addr
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--backend", "mysql://app:" + secret + "@db/x", "n", "--", "true"}, exitUsage, "unknown scheme"},
		{[]string{"run", "--backend", "etcd://app:" + secret + "@h:1%zz", "n", "--", "true"}, exitUsage, "invalid"},
		{[]string{"run", "--backend", fmt.Sprintf("etcd://app:%s@127.0.0.1:%d?request-timeout=1s", secret, closed), "n", "--", "true"}, exitUnavailable, "127.0.0.1"},
		{[]string{"run", "--backend", fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/db?connect_timeout=1", secret, closed), "n", "--", "true"}, exitUnavailable, "127.0.0.1"},
		{[]string{"run", "--backend", fmt.Sprintf("redis://app:%s@127.0.0.1:%d", secret, closed), "n", "--", "true"}, exitUnavailable, "127.0.0.1"},
		{[]string{"run", "--backend", "redis://:" + secret + "@" + redisNode, "--fence", store, "n", "--", "true"}, exitUsage, "redis://:xxxxx@"},
		// Refused before connecting, not after a dial that fails (exit 69).
		{[]string{"run", "--backend", fmt.Sprintf("redis://127.0.0.1:%d", closed), "--fence", store, "n", "--", "true"}, exitUsage, "gives none"},
		{[]string{"elect", "--backend", fmt.Sprintf("redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", closed, closed+1, closed+2), "--fence", store, "n", "--", "true"}, exitUsage, "gives none"},
		{[]string{"run", "--backend", backend, "--fence", fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/db?connect_timeout=1", secret, closed), "n", "--", "true"}, exitUnavailable, "127.0.0.1"},
		{[]string{"run", "--backend", backend, "--fence", "mysql://app:" + secret + "@db/x", "n", "--", "true"}, exitUsage, "unknown scheme"},
		{[]string{"run", "--backend", fmt.Sprintf("etcd://127.0.0.1:%d", closed), "--fence", "mysql://x", "n", "--", "true"}, exitUsage, `unknown scheme "mysql"`},
		// A flag given no value takes the next one for it.
		{[]string{"run", "--fence", "--backend", backend, "--", "true"}, exitUsage, "--fence took --backend as its value"},
		{[]string{"elect", "--backend", "--fence", store, "n", "--", "true"}, exitUsage, "--backend took --fence as its value"},
		{[]string{"elect", "--observe", "--backend", "--json", "n"}, exitUsage, "--backend took --json as its value"},
		{[]string{"status", "--backend", "--json"}, exitUsage, "--backend took --json as its value"},
		{[]string{"fence", "show", "--store", "--json"}, exitUsage, "--store took --json as its value"},
		{[]string{"elect", "--backend", backend, "--id", "--observe", "n"}, exitUsage, "--id took --observe as its value"},
		{[]string{"elect", "--backend", backend, "--id", "--", "n", "--", "true"}, exitUsage, "--id took -- as its value"},
		{[]string{"run", "--backend", backend, "--once", "--fence", store, "n", "--", "true"}, exitUsage, "--once took --fence as its value"},
		{[]string{"run", "--backend", backend, "--fence", "/tmp/f.db", "n", "--", "true"}, exitUsage, "write sqlite:/tmp/f.db for a SQLite file, or postgres://"},
		{[]string{"elect", "--backend", backend, "--fence", "f.db", "n", "--", "true"}, exitUsage, "write sqlite:f.db"},
		{[]string{"fence", "init", "--store", "/tmp/f.db"}, exitUsage, "write sqlite:/tmp/f.db"},
		{[]string{"fence", "show", "--store", ""}, exitUsage, "--store is empty: pass sqlite:PATH or postgres://"},
		// Given empty (--fence "$FENCE", FENCE unset): refused, not run
		// unfenced, nor run again on every retry.
		{[]string{"run", "--backend", backend, "--fence", "", "n", "--", "true"}, exitUsage, "--fence is empty"},
		{[]string{"elect", "--backend", backend, "--fence", "", "n", "--", "true"}, exitUsage, "--fence is empty"},
		{[]string{"run", "--backend", backend, "--id", "", "n", "--", "true"}, exitUsage, "--id \"\" names no holder"},
		{[]string{"elect", "--backend", backend, "--id", " ", "n", "--", "true"}, exitUsage, "--id \" \" names no holder"},
		{[]string{"run", "--backend", backend, "--fence", store, "--once", "", "n", "--", "true"}, exitUsage, "--once is empty"},
		// Flags that the other mode of elect takes.
		{[]string{"elect", "--backend", backend, "--json", "n", "--", "true"}, exitUsage, "--json is for elect --observe"},
		{[]string{"elect", "--backend", backend, "--observe", "--fence", store, "n"}, exitUsage, "--fence is for campaigning"},
		{[]string{"elect", "--backend", backend, "--observe", "--grace", "-1s", "n"}, exitUsage, "--grace is for campaigning"},
		// A store or backend URL without a scheme, password and all.
		{[]string{"run", "--backend", backend, "--fence", "host=db password=" + secret, "n", "--", "true"}, exitUsage, "password=xxxxx has no scheme"},
		{[]string{"fence", "show", "--store", "postgres//app:" + secret + "@db/x"}, exitUsage, "postgres//app:xxxxx@db/x has no scheme"},
		{[]string{"run", "--backend", "etcd//app:" + secret + "@h:2379", "n", "--", "true"}, exitUsage, "no scheme"},
		{[]string{"run", "--backend", backend, "--ttl", "1s", "n", "--", "true"}, exitUsage, "at least 2s"},
		{[]string{"run", "--backend", backend, "--ttl", "1500ms", "n", "--", "true"}, exitUsage, "whole seconds"},
		{[]string{"run", "--backend", backend, "n", "true"}, exitUsage, "put -- between"},
		{[]string{"run", "--backend", backend, "n", "--"}, exitUsage, "no command"},
		{[]string{"run", "--backend", backend}, exitUsage, "needs a lock name"},
		{[]string{"run", "--backend", backend, "--", "true"}, exitUsage, "give the lock name before --: baton run NAME -- true"},
		{[]string{"run", "--backend", backend, "a", "b", "--", "true"}, exitUsage, `give exactly one lock name before --, got 2: ["a" "b"]`},
		{[]string{"run", "--backend", backend, "a/b", "--", "true"}, exitUsage, "lock name"},
		{[]string{"run", "--backend", backend, "--once", "x", "n", "--", "true"}, exitUsage, "--once needs --fence"},
		{[]string{"run", "--backend", backend, "--fence", store, "n", "--", "true"}, exitFailure, "baton fence init"},
		{[]string{"run", "--backend", fmt.Sprintf("etcd://127.0.0.1:%d?request-timeout=1s", closed), "n", "--", "true"}, exitUnavailable, "baton serve"},
		{[]string{"run", "--bogus"}, exitUsage, "unknown flag"},
		{[]string{"help", "nosuch"}, exitUsage, `no help topic "nosuch"`},
		{[]string{"help", "fence", "nosuch"}, exitUsage, `no help topic "fence nosuch"`},
		{[]string{"release", "n"}, exitUsage, "--force"},
		{[]string{"fence", "show"}, exitUsage, "required flag"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			r := runInProcess(tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tc.code, tc.want)
			}
			oneLine(t, r)
			if strings.Contains(r.stdout, secret) || strings.Contains(r.stderr, secret) {
				t.Errorf("password shown: stdout %q, stderr %q", r.stdout, r.stderr)
			}
		})
	}
}

// TestHelp_BackendFromEnv: --help shows BATON_BACKEND as the default of
// --backend, with its password hidden.
func TestHelp_BackendFromEnv(t *testing.T) {
	t.Setenv("BATON_BACKEND", "postgres://app:s3cret-pw@db/billing")
	for _, cmd := range []string{"run", "elect", "status", "release"} {
		r := runInProcess(cmd, "--help")
		if r.code != 0 || !strings.Contains(r.stdout, `(default "postgres://app:xxxxx@db/billing")`) || strings.Contains(r.stdout+r.stderr, "s3cret") {
			t.Errorf("baton %s --help: exit %d, stdout %q, stderr %q; want the default shown with its password hidden", cmd, r.code, r.stdout, r.stderr)
		}
	}
}

func TestStatusAndForceRelease(t *testing.T) {
	backend := etcdBackend(t)
	started := filepath.Join(t.TempDir(), "started")
	holder := startBaton(t, "run", "--backend", backend, "--id", "server-1", "invoices", "--", "sh", "-c", fmt.Sprintf(`trap 'exit 0' TERM; touch %s; sleep 60 & wait`, started))
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, func() string { return holder.stderr.String() })

	r := runInProcess("status", "--backend", backend)
	if r.code != 0 || !strings.Contains(r.stdout, "invoices") || !strings.Contains(r.stdout, "server-1") {
		t.Fatalf("status: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runInProcess("status", "--backend", backend, "--json", "invoices", "stock", "invoices")
	if r.code != 0 || !strings.Contains(r.stdout, `"holder": "server-1"`) || !strings.Contains(r.stdout, `"name": "stock"`) {
		t.Fatalf("status --json: %d %q", r.code, r.stdout)
	}
	if n := strings.Count(r.stdout, `"name": "invoices"`); n != 1 || strings.Contains(r.stdout, `"waiters": 1`) {
		t.Errorf("status of a name given twice: %d rows for it, or a waiter that is not there: %q", n, r.stdout)
	}
	r = runInProcess("release", "--force", "--backend", backend, "invoices")
	if r.code != 0 || !strings.Contains(r.stdout, "server-1") {
		t.Fatalf("release --force: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := holder.wait(t); got.code != exitLeaseLost || !strings.Contains(got.stderr, "(lock service "+backend+")") {
		t.Fatalf("holder after a forced release: exit %d, want 76 naming the lock service; %q", got.code, got.stderr)
	} else if n := strings.Count(got.stderr, "was deleted"); n != 1 || !regexp.MustCompile(`lease on "invoices" \(token \d+\) lost, as said above \(lock service`).MatchString(got.stderr) {
		// The cause is told once, as the command is stopped; the exit
		// line names the lease and points back to it.
		t.Errorf("holder after a forced release: the cause told %d times, want once, then the lease lost \"as said above\"; %q", n, got.stderr)
	}
}

// TestRun_Etcd34 uses Debian's etcd 3.4 server as the backend.
func TestRun_Etcd34(t *testing.T) {
	srv := testsvc.StartEtcdBinary(t)
	backend := "etcd://" + strings.TrimPrefix(srv.Endpoint, "http://")
	r := runBaton(t, "run", "--backend", backend, "invoices", "--", "sh", "-c", `echo "$BATON_TOKEN $ETCD_LOCK_REV"`)
	f := strings.Fields(r.stdout)
	if r.code != 0 || len(f) != 2 || f[0] != f[1] {
		t.Fatalf("etcd %s: exit %d, stdout %q, stderr %q", srv.Version, r.code, r.stdout, r.stderr)
	}
}

// execResult is a baton process started in the background.
type execResult struct {
	cmd            *exec.Cmd
	stdout, stderr *syncbuf.Buffer
	done           chan struct{}
	code           int
}

func startBaton(t *testing.T, args ...string) *execResult {
	t.Helper()
	return startCmd(t, batonCmd(args...))
}

func startCmd(t *testing.T, cmd *exec.Cmd) *execResult {
	t.Helper()
	p := &execResult{cmd: cmd, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	if p.cmd.Stdout == nil { // else the test's own (a pipe it closes, say)
		p.cmd.Stdout = p.stdout
	}
	if p.cmd.Stderr == nil {
		p.cmd.Stderr = p.stderr
	}
	// A command baton started in its own process group may outlive a
	// killed baton for a moment and hold the output pipes open.
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

func (p *execResult) exited() (int, bool) {
	select {
	case <-p.done:
		return p.code, true
	default:
		return 0, false
	}
}

func (p *execResult) wait(t *testing.T) result {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("baton %s did not exit within 60s; stderr %q", strings.Join(p.cmd.Args[1:], " "), p.stderr.String())
	}
	return result{code: p.code, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

func countExited(ps []*execResult, code int) int {
	n := 0
	for _, p := range ps {
		if c, ok := p.exited(); ok && c == code {
			n++
		}
	}
	return n
}

func exits(ps []*execResult) []string {
	var out []string
	for _, p := range ps {
		if c, ok := p.exited(); ok {
			out = append(out, fmt.Sprintf("%d (%s)", c, strings.TrimSpace(p.stderr.String())))
		} else {
			out = append(out, "running")
		}
	}
	return out
}

// waitFor polls cond, which reads state another process changes (a file, an
// exit status), until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool, say func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", d, say())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRun_Redis: the Redis backends work from the CLI, give no token, and
// refuse --fence with a message that names the fenced backends.
func TestRun_Redis(t *testing.T) {
	single := testsvc.StartRedis(t)
	nodes := testsvc.StartRedisNodes(t, 3)
	for _, backend := range []string{"redis://" + single.Addr, "redlock://" + strings.Join(testsvc.RedisAddrs(nodes), ",")} {
		r := runBaton(t, "run", "--backend", backend, "--ttl", "2s", "stock", "--", "sh", "-c", `echo "lock=$BATON_LOCK token=${BATON_TOKEN:-none}"`)
		if r.code != 0 || strings.TrimSpace(r.stdout) != "lock=stock token=none" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", backend, r.code, r.stdout, r.stderr)
		}
		// A forced release says whose lock it freed, with no token.
		held := startBaton(t, "run", "--backend", backend, "--id", "holder", "held", "--", "sleep", "30")
		waitFor(t, 30*time.Second, func() bool {
			return strings.Contains(runInProcess("status", "--backend", backend, "held").stdout, "holder")
		}, func() string { return held.stderr.String() })
		if r := runInProcess("release", "--backend", backend, "--force", "held"); r.code != 0 || !strings.HasPrefix(r.stdout, "released held: it was held by holder (key ") {
			t.Errorf("%s release --force: exit %d, stdout %q, stderr %q; want who held it, with no token", backend, r.code, r.stdout, r.stderr)
		}
		if r := held.wait(t); r.code != exitLeaseLost {
			t.Errorf("%s: the forced-out holder exited %d, want %d; stderr %q", backend, r.code, exitLeaseLost, r.stderr)
		}
		store := "sqlite:" + filepath.Join(t.TempDir(), "f.db")
		r = runInProcess("run", "--backend", backend, "--fence", store, "stock", "--", "true")
		if r.code != exitUsage || !strings.Contains(r.stderr, "etcd://, zk:// or postgres://") {
			t.Errorf("%s --fence: exit %d, stderr %q; want 2 naming the fenced backends", backend, r.code, r.stderr)
		}
		oneLine(t, r)
	}
}

// TestRun_Postgres: PostgreSQL as the lock service and the fence store, in
// one database: tokens from its sequence, the fence raised before the
// command runs.
func TestRun_Postgres(t *testing.T) {
	dsn := pg.Database(t) + "&ttl=2s" // one URL for both: the fence ignores the lock's parameters
	if r := runInProcess("fence", "init", "--store", dsn); r.code != 0 {
		t.Fatalf("fence init: %s", r.stderr)
	}
	var prev int64
	for i := range 3 {
		r := runBaton(t, "run", "--backend", dsn, "--fence", dsn, "invoices", "--", "sh", "-c", `echo "$BATON_TOKEN"`)
		tok, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
		if r.code != 0 || err != nil || tok <= prev {
			t.Fatalf("run %d: exit %d, token %q after %d, stderr %q", i, r.code, r.stdout, prev, r.stderr)
		}
		prev = tok
	}
	r := runInProcess("fence", "show", "--store", dsn, "invoices")
	if r.code != 0 || !strings.Contains(r.stdout, strconv.FormatInt(prev, 10)) {
		t.Fatalf("fence show: %q %q; want the newest token %d", r.stdout, r.stderr, prev)
	}
}

// TestRun_ZooKeeper: a zk:// backend runs the command with a czxid token,
// works with --fence, and baton status shows its holder and waiters.
func TestRun_ZooKeeper(t *testing.T) {
	backend := "zk://" + zkSrv.Addr(t) + "/baton-cli"
	store := initStore(t)
	started := filepath.Join(t.TempDir(), "started")
	holder := startBaton(t, "run", "--backend", backend, "--fence", store, "--ttl", "4s", "--id", "zk-holder", "invoices", "--",
		"sh", "-c", fmt.Sprintf(`echo "$BATON_TOKEN" > %s; trap 'exit 0' TERM; sleep 60 & wait`, started))
	waitFor(t, 30*time.Second, func() bool { b, _ := os.ReadFile(started); return len(b) > 0 }, func() string { return holder.stderr.String() })
	waiter := startBaton(t, "run", "--backend", backend, "--ttl", "4s", "--wait", "30s", "invoices", "--", "true")
	waitFor(t, 30*time.Second, func() bool {
		r := runInProcess("status", "--backend", backend, "--json", "invoices")
		return strings.Contains(r.stdout, `"holder": "zk-holder"`) && strings.Contains(r.stdout, `"waiters": 1`)
	}, func() string { return runInProcess("status", "--backend", backend, "invoices").stdout })
	b, _ := os.ReadFile(started)
	tok, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || tok <= 0 {
		t.Fatalf("BATON_TOKEN %q", b)
	}
	r := runInProcess("fence", "show", "--store", store, "invoices")
	if !strings.Contains(r.stdout, strconv.FormatInt(tok, 10)) {
		t.Errorf("fence not raised to the czxid %d: %q", tok, r.stdout)
	}
	_ = holder.cmd.Process.Signal(syscall.SIGTERM)
	if got := holder.wait(t); got.code != 0 {
		t.Fatalf("holder exit %d: %s", got.code, got.stderr)
	}
	if got := waiter.wait(t); got.code != 0 {
		t.Fatalf("waiter exit %d: %s", got.code, got.stderr)
	}
}

// TestRun_InterruptedWhileWaiting: SIGINT, SIGTERM, SIGHUP or SIGQUIT sent to a baton
// that still waits for the lock ends the wait with exit 130 and takes it off
// the queue; the holder runs on undisturbed.
func TestRun_InterruptedWhileWaiting(t *testing.T) {
	backend := etcdBackend(t)
	holder := startHolder(t, backend, "held")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} { // as run --help says
		name := unix.SignalName(sig)
		t.Run(name, func(t *testing.T) {
			waiter := startBaton(t, "run", "--backend", backend, "--wait", "60s", "held", "--", "true")
			waitFor(t, 30*time.Second, func() bool { return waiters(t, backend, "held") == 1 },
				func() string { return "the waiter never queued: " + waiter.stderr.String() })
			if err := waiter.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			r := waiter.wait(t)
			if r.code != exitInterrupted || !strings.Contains(r.stderr, "interrupted while waiting") {
				t.Fatalf("exit %d after %s while waiting, want %d; stderr %q", r.code, name, exitInterrupted, r.stderr)
			}
			if n := waiters(t, backend, "held"); n != 0 {
				t.Fatalf("%d waiters after the interrupted one left, want 0", n)
			}
		})
	}
	if _, done := holder.exited(); done {
		t.Fatalf("the holder exited: %q", holder.stderr.String())
	}
}

// startHolder starts baton run holding name on backend, with flags before
// the name (such as --id), its command sleeping a minute, and waits until
// the command runs: the lock is held.
func startHolder(t *testing.T, backend, name string, flags ...string) *execResult {
	t.Helper()
	started := filepath.Join(t.TempDir(), "started")
	args := append(append([]string{"run", "--backend", backend}, flags...), name, "--", "sh", "-c", "touch "+started+"; exec sleep 60")
	p := startBaton(t, args...)
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, func() string { return p.stderr.String() })
	return p
}

// waiters reads the number of acquisitions queued for name from
// baton status --json, run in this process: tests poll it while a
// deadline of another process runs, and starting a process for each look
// (a race-detector binary, on a loaded machine) can take most of it.
func waiters(t *testing.T, backend, name string) int {
	t.Helper()
	r := runInProcess("status", "--backend", backend, "--json", name)
	var st []struct{ Waiters int }
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st) != 1 {
		t.Fatalf("baton status --json %s: %v; exit %d, stdout %q, stderr %q", name, err, r.code, r.stdout, r.stderr)
	}
	return st[0].Waiters
}

// TestRun_IgnoredSIGHUPStaysIgnored: started with SIGHUP ignored (as under
// nohup), baton leaves it ignored while it waits, rather than catching it
// and giving up the wait; started normally, it catches SIGHUP. Read from
// the kernel's view of the waiting process (/proc/PID/status).
func TestRun_IgnoredSIGHUPStaysIgnored(t *testing.T) {
	backend := etcdBackend(t)
	startHolder(t, backend, "hup")
	for _, nohup := range []bool{false, true} {
		c := batonCmd("run", "--backend", backend, "--wait", "60s", "hup", "--", "true")
		if nohup {
			sh := exec.Command("sh", append([]string{"-c", `trap '' HUP; exec "$0" "$@"`}, c.Args...)...)
			sh.Env, sh.SysProcAttr = c.Env, c.SysProcAttr
			c = sh
		}
		waiter := startCmd(t, c)
		waitFor(t, 30*time.Second, func() bool { return waiters(t, backend, "hup") == 1 },
			func() string { return "the waiter never queued: " + waiter.stderr.String() })
		ignored, caught := sigMasks(t, waiter.cmd.Process.Pid)
		const hup = 1 << (syscall.SIGHUP - 1)
		if got := ignored&hup != 0; got != nohup {
			t.Errorf("started with SIGHUP ignored %v: ignored while waiting %v", nohup, got)
		}
		if got := caught&hup != 0; got == nohup {
			t.Errorf("started with SIGHUP ignored %v: caught while waiting %v", nohup, got)
		}
		_ = waiter.cmd.Process.Signal(syscall.SIGTERM)
		if r := waiter.wait(t); r.code != exitInterrupted {
			t.Errorf("exit %d after SIGTERM while waiting, want %d; %q", r.code, exitInterrupted, r.stderr)
		}
	}
}

// sigMasks reads the ignored and caught signal masks of process pid.
func sigMasks(t *testing.T, pid int) (ignored, caught uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		switch k {
		case "SigIgn":
			ignored = n
		case "SigCgt":
			caught = n
		}
	}
	return ignored, caught
}

// TestRun_LossGraceIdle: after a loss baton waits out --grace for a command
// that ignores SIGTERM before it sends SIGKILL, and it waits idle: the CPU
// time of its whole life stays far below the grace period (a select on the
// lease's closed Done channel once spun through all of it).
func TestRun_LossGraceIdle(t *testing.T) {
	backend := etcdBackend(t)
	started := filepath.Join(t.TempDir(), "started")
	const grace = 3 * time.Second
	run := startBaton(t, "run", "--backend", backend, "--grace", grace.String(), "graceful", "--", "sh", "-c", "trap '' TERM; touch "+started+"; sleep 60")
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, func() string { return run.stderr.String() })
	if r := runBaton(t, "release", "--force", "--backend", backend, "graceful"); r.code != 0 {
		t.Fatalf("release --force: %d %s", r.code, r.stderr)
	}
	r := run.wait(t)
	if r.code != exitLeaseLost {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, exitLeaseLost, r.stderr)
	}
	cpu := run.cmd.ProcessState.UserTime() + run.cmd.ProcessState.SystemTime()
	t.Logf("baton used %v of CPU, %v of it waiting out the grace period", cpu.Round(time.Millisecond), grace)
	if cpu > grace/2 {
		t.Errorf("baton used %v of CPU over its life, with a %v grace period in it: it spins while it waits", cpu, grace)
	}
}

// TestStatus_NameTwice: a name given twice is shown once (here on Redis,
// whose Inspect answers for each name given).
func TestStatus_NameTwice(t *testing.T) {
	srv := testsvc.StartRedis(t)
	r := runInProcess("status", "--backend", "redis://"+srv.Addr, "--json", "invoices", "stock", "invoices")
	if r.code != 0 {
		t.Fatalf("status: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := strings.Count(r.stdout, `"name": "invoices"`); n != 1 || !strings.Contains(r.stdout, `"name": "stock"`) {
		t.Fatalf("status invoices stock invoices: %d rows for invoices; %q", n, r.stdout)
	}
}

// TestStatus_UnreadableLock: a key of another type under the prefix
// (written by another tool) shows as (unreadable) in the list of every
// lock, with an "error" in JSON, beside the held locks; its error follows
// on stderr, one line, and status exits 1. It failed the whole list, and
// on ZooKeeper such a lock was left out with a warning the default log
// level hid.
func TestStatus_UnreadableLock(t *testing.T) {
	srv := testsvc.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := c.HSet(t.Context(), redis.DefaultPrefix+"cfg", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	backend := srv.URL()
	p := startHolder(t, backend, "job", "--id", "server-1")
	defer p.wait(t)
	defer runInProcess("release", "--force", "--backend", backend, "job")

	r := runInProcess("status", "--backend", backend)
	rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != exitFailure || len(rows) != 3 || !strings.HasPrefix(rows[1], "cfg ") || !strings.Contains(rows[1], "(unreadable)") ||
		!strings.HasPrefix(rows[2], "job ") || !strings.Contains(rows[2], "server-1") {
		t.Errorf("status: exit %d, stdout:\n%s\nwant %d, a header, cfg unreadable and job held by server-1", r.code, r.stdout, exitFailure)
	}
	if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "baton: lock cfg could not be read: ") || !strings.Contains(r.stderr, "WRONGTYPE") {
		t.Errorf("status: stderr %q; want one line saying why cfg could not be read", r.stderr)
	}

	r = runInProcess("status", "--backend", backend, "--json")
	var st []struct{ Name, Holder, Error string }
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != exitFailure || len(st) != 2 ||
		st[0].Name != "cfg" || !strings.Contains(st[0].Error, "WRONGTYPE") || st[1].Holder != "server-1" || st[1].Error != "" {
		t.Errorf("status --json: exit %d, %v, %+v; want %d, cfg with its error and job held by server-1", r.code, err, st, exitFailure)
	}
}

// TestStatus_URLTimings: a URL that sets renew-every= or drift= for its
// own TTL, which baton run takes, does for the commands that only look
// too; they checked it against their own 5s TTL and refused it (exit 2).
func TestStatus_URLTimings(t *testing.T) {
	srv := testsvc.StartRedis(t)
	for _, q := range []string{"renew-every=6s", "drift=4s"} {
		backend := srv.URL() + "?" + q
		if r := runInProcess("status", "--backend", backend, "job"); r.code != 0 {
			t.Errorf("status --backend %s: exit %d, stderr %q; want 0", backend, r.code, r.stderr)
		}
		if r := runInProcess("release", "--force", "--backend", backend, "job"); r.code != 0 {
			t.Errorf("release --force --backend %s: exit %d, stderr %q; want 0", backend, r.code, r.stderr)
		}
	}
}

// TestRelease_FreeLock: release --force of a lock no one holds says so and
// exits 0; it said the lock was "held by another holder" (exit 75).
func TestRelease_FreeLock(t *testing.T) {
	r := runInProcess("release", "--force", "--backend", etcdBackend(t), "nobody-holds-this")
	if r.code != 0 || !strings.Contains(r.stdout, "not held") {
		t.Fatalf("release --force of a free lock: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestCompletion_UnknownShell: a shell completion does not know is a usage
// error (exit 2); cobra printed the help and exited 0.
func TestCompletion_UnknownShell(t *testing.T) {
	if r := runInProcess("completion", "bogus"); r.code != exitUsage || !strings.Contains(r.stderr, "bogus") {
		t.Fatalf("baton completion bogus: exit %d, stderr %q; want %d naming it", r.code, r.stderr, exitUsage)
	}
	if r := runInProcess("completion", "bash"); r.code != 0 || !strings.Contains(r.stdout, "bash completion") {
		t.Fatalf("baton completion bash: exit %d, stdout %.80q", r.code, r.stdout)
	}
}

// TestFence_UnknownSubcommand: a mistyped subcommand of fence is a usage
// error (exit 2), not help and exit 0, which let `baton fence inti && ...`
// go on.
func TestFence_UnknownSubcommand(t *testing.T) {
	if r := runInProcess("fence", "inti"); r.code != exitUsage {
		t.Fatalf("baton fence inti: exit %d, want %d; stderr %q", r.code, exitUsage, r.stderr)
	}
	if r := runInProcess("fence"); r.code != 0 || !strings.Contains(r.stdout, "init") {
		t.Fatalf("baton fence: exit %d, stdout %q; want its help", r.code, r.stdout)
	}
}

// TestFence_ShowInvalidName: fence show of a resource no fence can have
// (a resource is a lock name) is a usage error, said before the store is
// opened, as status says it of a lock name; it showed "never".
func TestFence_ShowInvalidName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	r := runInProcess("fence", "show", "--store", "sqlite:"+path, "bad/name")
	if r.code != exitUsage || !strings.Contains(r.stderr, "bad/name") || strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("fence show bad/name: exit %d, stderr %q; want %d, naming it, before the store is opened", r.code, r.stderr, exitUsage)
	}
	oneLine(t, r)
}

// TestFence_ShowMissingFile: fence show of a SQLite file that does not
// exist says so and creates nothing.
func TestFence_ShowMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	r := runInProcess("fence", "show", "--store", "sqlite:"+path)
	if r.code != exitFailure || !strings.Contains(r.stderr, "does not exist") || !strings.Contains(r.stderr, "fence init") {
		t.Fatalf("fence show of a missing file: exit %d, stderr %q; want 1, and to run fence init", r.code, r.stderr)
	}
	oneLine(t, r)
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("fence show left %s behind: %v", path, err)
	}
}

// TestLook_ZooKeeperSessionTimeout: the commands that only look (status,
// release, elect --observe) hold with a short TTL of their own unless the
// URL sets one. A ZooKeeper whose minimum session timeout is above it
// (here 6s; a tickTime of 3s has the same) refused that TTL, exit 2, with
// advice (a TTL of 6s or more) that these commands take no flag for: they
// now take the timeout the server grants. The URL's session-timeout wins.
func TestLook_ZooKeeperSessionTimeout(t *testing.T) {
	srv := testsvc.StartZooKeeperWith(t, "minSessionTimeout=6000\nmaxSessionTimeout=20000\n")
	for _, backend := range []string{
		"zk://" + srv.Addr + "/baton-look",
		"zk://" + srv.Addr + "/baton-look?session-timeout=8s",
	} {
		r := runInProcess("status", "--backend", backend)
		if r.code != 0 {
			t.Errorf("status --backend %s: exit %d, %q", backend, r.code, r.stderr)
		}
		r = runInProcess("release", "--force", "--backend", backend, "free")
		if r.code != 0 || !strings.Contains(r.stdout, "not held") {
			t.Errorf("release --force --backend %s of a free lock: exit %d, stdout %q, stderr %q; want 0, not held", backend, r.code, r.stdout, r.stderr)
		}
	}
	obs := startBaton(t, "elect", "--observe", "--backend", "zk://"+srv.Addr+"/baton-look", "mailer")
	waitFor(t, 30*time.Second, func() bool {
		_, exited := obs.exited()
		return exited || strings.Contains(obs.stdout.String(), "no leader")
	}, func() string { return obs.stderr.String() })
	_ = obs.cmd.Process.Signal(syscall.SIGTERM)
	if got := obs.wait(t); got.code != 0 || !strings.Contains(got.stdout, "no leader") {
		t.Errorf("elect --observe: exit %d, stdout %q, stderr %q; want the first term, then 0 after SIGTERM", got.code, got.stdout, got.stderr)
	}

	// A TTL the URL sets is the user's: refused, not replaced.
	r := runInProcess("status", "--backend", "zk://"+srv.Addr+"/baton-look?session-timeout=4s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "6s or more") {
		t.Errorf("status with session-timeout=4s in the URL: exit %d, %q; want 2, naming the server's minimum", r.code, r.stderr)
	}
}

// TestRun_LostWithStderrGone: a lease lost while baton's stderr is a pipe
// nobody reads any more (a log pipe that went away) still stops the
// command's whole group and exits 76: the message baton cannot write must
// not kill it (SIGPIPE) and leave the group running without the lock.
func TestRun_LostWithStderrGone(t *testing.T) {
	backend := etcdBackend(t)
	pgidFile := filepath.Join(t.TempDir(), "pgid")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := batonCmd("run", "--backend", backend, "--grace", "1s", "gone", "--", "sh", "-c", "sleep 60 & echo $$ > "+pgidFile+"; wait")
	cmd.Stderr = w
	p := startCmd(t, cmd)
	_ = w.Close()
	_ = r.Close() // from now on, a write to baton's stderr finds no reader
	var pgid int
	waitFor(t, 30*time.Second, func() bool {
		b, err := os.ReadFile(pgidFile)
		pgid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pgid > 0
	}, func() string { return "the command never started" })
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }) // the command's group; startCmd's cleanup ends baton
	if rr := runInProcess("release", "--force", "--backend", backend, "gone"); rr.code != 0 {
		t.Fatalf("release --force: %d %q", rr.code, rr.stderr)
	}
	p.wait(t)
	if st := cmd.ProcessState; st.ExitCode() != exitLeaseLost {
		t.Errorf("baton ended %v, want exit 76", st)
	}
	if n := liveInGroup(pgid); n != 0 {
		t.Errorf("%d processes of the command's group alive after baton exited", n)
	}
}

// TestRun_InterruptedWhileConnecting: a stop signal while baton still
// connects to a lock service that does not answer is exit 130, as while it
// waits for the lock.
func TestRun_InterruptedWhileConnecting(t *testing.T) {
	connected := make(chan struct{}, 1)
	addr := testsvc.Listen(t, func(c net.Conn) {
		select {
		case connected <- struct{}{}:
		default:
		}
		_, _ = io.Copy(io.Discard, c) // held open, never answered
	})
	p := startBaton(t, "run", "--backend", "redis://"+addr+"?request-timeout=30s", "x", "--", "true")
	select {
	case <-connected:
	case <-time.After(30 * time.Second):
		t.Fatalf("baton never connected: %q", p.stderr.String())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := p.wait(t); r.code != exitInterrupted || !strings.Contains(r.stderr, "interrupted while connecting to redis://") {
		t.Fatalf("exit %d, stderr %q; want 130, interrupted while connecting", r.code, r.stderr)
	}
}

// TestRun_WaitOutcome: when --wait runs out, baton says why: another holder
// has the lock (exit 75, naming it), or the lock service stopped answering
// during the wait (exit 69), which a wait blocked in a queue cannot tell
// apart by itself.
func TestRun_WaitOutcome(t *testing.T) {
	srv := testsvc.StartRedis(t)
	backend := srv.URL() + "?request-timeout=1s"
	startHolder(t, backend, "w", "--id", "holder-1")

	r := runInProcess("run", "--backend", backend, "--wait", "1s", "w", "--", "true")
	if r.code != exitNotAcquired || !strings.Contains(r.stderr, "holder-1") || !strings.Contains(r.stderr, "(lock service "+baton.Redact(backend)+")") {
		t.Errorf("--wait ran out behind a holder: exit %d, stderr %q; want 75 naming holder-1 and the lock service", r.code, r.stderr)
	}
	oneLine(t, r)

	// The server must be frozen before the wait runs out: waiters looks
	// at the queue from this process, within milliseconds of the entry.
	waitRunsOut(t, backend, "w", "freeze the server", func() { srv.Pause(); t.Cleanup(srv.Resume) }, time.Second, "check that it runs")
}

// waitRunsOut starts baton run --wait 4s on name at backend, whose
// request-timeout= is 1s, behind a holder; once it queued, it calls cut to
// stop the lock service answering (what says how). baton must exit 69 on
// one line saying what to do (hint), within the bound run's help gives:
// the wait, a last attempt (the request timeout), leaving the queue (the
// release timeout, 5s) and closing (2s), and slack for starting and
// stopping the process.
//
// A waiter that queued too late to be cut off within its --wait (a loaded
// machine slow to start it) is interrupted, which takes it out of the
// queue, and started again (rounds.Run).
func waitRunsOut(t *testing.T, backend, name, what string, cut func(), slack time.Duration, hint string) {
	t.Helper()
	var start time.Time
	var waiter *execResult
	rounds.Run(t, 3, func(int) error {
		start = time.Now()
		waiter = startBaton(t, "run", "--backend", backend, "--wait", "4s", name, "--", "true")
		waitFor(t, 30*time.Second, func() bool { return waiters(t, backend, name) == 1 },
			func() string { return "the waiter never queued: " + waiter.stderr.String() })
		q := time.Since(start)
		if q <= 3*time.Second {
			return nil
		}
		if err := waiter.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if r := waiter.wait(t); r.code != exitInterrupted {
			t.Fatalf("the waiter, interrupted: exit %d, stderr %q; want %d", r.code, r.stderr, exitInterrupted)
		}
		waitFor(t, 30*time.Second, func() bool { return waiters(t, backend, name) == 0 },
			func() string { return "the interrupted waiter stayed queued" })
		return fmt.Errorf("the waiter queued %v after it started: too late to %s within its --wait 4s", q.Round(time.Millisecond), what)
	})
	cut()
	r := waiter.wait(t)
	if took, bound := time.Since(start), 4*time.Second+time.Second+5*time.Second+closeTimeout+slack; took > bound || took < 4*time.Second {
		t.Errorf("--wait 4s after the test's %s took %v to exit; want 4s (the wait) to %v", what, took.Round(time.Millisecond), bound)
	} else {
		t.Logf("--wait 4s after the test's %s: exit after %v", what, took.Round(time.Millisecond))
	}
	if r.code != exitUnavailable || !strings.Contains(r.stderr, hint) {
		t.Errorf("--wait ran out after the test's %s: exit %d, stderr %q; want 69 saying %q", what, r.code, r.stderr, hint)
	}
	oneLine(t, r)
}

// TestRun_WaitOutcome_EtcdCutOff: with --wait running out while etcd
// stopped answering (a proxy holds everything), baton exits within the
// bound run's help gives (see waitRunsOut; 1.5s of slack). It took 15s
// for --wait 4s when closing waited the release timeout again for the
// session's revoke.
func TestRun_WaitOutcome_EtcdCutOff(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	proxy := testsvc.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	startHolder(t, "etcd://"+strings.TrimPrefix(srv.Endpoint, "http://"), "w")
	waitRunsOut(t, "etcd://"+proxy.Addr()+"?request-timeout=1s", "w", "cut etcd off", func() { proxy.Block(); t.Cleanup(proxy.Unblock) }, 1500*time.Millisecond, "baton serve")
}

// TestRun_WaitGoesOnAfterSessionLost: a wait whose session the lock
// service lost (a pause longer than the TTL), or that got no answer, held
// nothing: baton waits on within --wait and runs the command, instead of
// exiting 76 (a lease lost, though none was held) or 69 at the first
// failure.
func TestRun_WaitGoesOnAfterSessionLost(t *testing.T) {
	backend := useFake(t, &fakeBackend{script: []error{
		fmt.Errorf("%w: session ended while acquiring", baton.ErrLeaseLost),
		&baton.UnavailableError{Where: "fake", Err: errors.New("no answer")},
	}})
	r := runInProcess("run", "--backend", backend, "--wait", "30s", "x", "--", "true")
	if r.code != 0 || strings.Count(r.stderr, "waiting on for the lock") != 2 {
		t.Fatalf("exit %d, stderr %q; want 0 after waiting on twice", r.code, r.stderr)
	}
}

// TestFence_ShowOrder: the resources named are shown in the order given,
// once each, raised or not, and no others: those without a row came from
// a map before, those with one came first, sorted, and once every name
// had been found the rest of the table was shown too.
func TestFence_ShowOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	store := "sqlite:" + path
	if r := runInProcess("fence", "init", "--store", store); r.code != 0 {
		t.Fatalf("fence init: %d %q", r.code, r.stderr)
	}
	s, err := fence.Open(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"b", "x"} {
		if err := s.Raise(t.Context(), r, 3); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	for _, tc := range []struct{ args, want string }{
		{"c a b a", "c a b"},
		{"b", "b"},
		{"x b", "x b"},
		{"", "b x"},
	} {
		for range 3 {
			r := runInProcess(append([]string{"fence", "show", "--store", store}, strings.Fields(tc.args)...)...)
			var names []string
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
				names = append(names, strings.Fields(line)[0])
			}
			if r.code != 0 || strings.Join(names, " ") != tc.want {
				t.Fatalf("fence show %s: %d, rows %q; want %s", tc.args, r.code, names, tc.want)
			}
		}
	}
}

// TestRun_TryOnce_SessionLost: one attempt (--wait 0) whose session the
// lock service lost held nothing: exit 69, not 76 (a lease lost while the
// command ran).
func TestRun_TryOnce_SessionLost(t *testing.T) {
	backend := useFake(t, &fakeBackend{script: []error{fmt.Errorf("%w: session ended while acquiring", baton.ErrLeaseLost)}})
	r := runInProcess("run", "--backend", backend, "--wait", "0", "x", "--", "true")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "nothing was held") {
		t.Fatalf("exit %d, stderr %q; want 69 saying nothing was held", r.code, r.stderr)
	}
	oneLine(t, r)
}

// TestObserve_StdoutGone: baton catches SIGPIPE (so that run and elect
// outlive a log pipe that went away), and a subcommand whose output has
// no reader left (baton elect --observe | head -1) ends as the signal
// would have: 141, without a line; not exit 1 with "broken pipe".
func TestObserve_StdoutGone(t *testing.T) {
	backend := etcdBackend(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	cmd := batonCmd("elect", "--observe", "--backend", backend, "mailer")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	err = cmd.Run()
	_ = w.Close()
	if code := cmd.ProcessState.ExitCode(); code != exitBrokenPipe || stderr.Len() != 0 {
		t.Fatalf("elect --observe with its stdout gone: %v, exit %d, stderr %q; want 141 and nothing said", err, code, stderr.String())
	}
}

// TestObserve_ReaderGoneAfterFirstTerm: baton elect --observe | head -1
// ends, 141 without a line, as soon as head has read the first term and
// gone; it ran on until the next change of leader, which may be days away,
// since only a write could find the reader gone.
func TestObserve_ReaderGoneAfterFirstTerm(t *testing.T) {
	backend := etcdBackend(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := batonCmd("elect", "--observe", "--backend", backend, "mailer")
	cmd.Stdout = w
	p := startCmd(t, cmd)
	_ = w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.Contains(line, "no leader") {
		t.Fatalf("first line %q, %v; want no leader", line, err)
	}
	_ = r.Close() // as head -1 exits
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("elect --observe went on for 10s after its reader had gone")
	}
	if got := p.wait(t); got.code != exitBrokenPipe || got.stderr != "" {
		t.Fatalf("elect --observe with its reader gone: exit %d, stderr %q; want 141 and nothing said", got.code, got.stderr)
	}
}

// TestRun_ReleaseFailed: a release the lock service does not answer is
// said on one line at any log level (the lock stays taken for up to a
// TTL: the next run may find it held), and baton still exits with the
// command's code.
func TestRun_ReleaseFailed(t *testing.T) {
	backend := useFake(t, &fakeBackend{releaseErr: &baton.UnavailableError{Where: "fake", Err: errors.New("no answer")}})
	r := runInProcess("run", "--backend", backend, "invoices", "--", "sh", "-c", "exit 3")
	if r.code != 3 || !strings.Contains(r.stderr, `could not release the lock, which stays taken until its TTL runs out at the latest: release "invoices": fake: no answer`) {
		t.Fatalf("exit %d, stderr %q; want 3, saying the release failed", r.code, r.stderr)
	}
	oneLine(t, r)
}

// blockedInspect is the fake backend with an Inspect, which a stale raise
// asks who holds the lock (FencedLease.Raise), that answers only when its
// ctx ends.
type blockedInspect struct{ *fakeBackend }

func (blockedInspect) Inspect(ctx context.Context, _ ...string) ([]baton.LockInfo, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestRun_StaleWhileServiceSilent: the fence refuses the token at once;
// the look at the lock service that follows gets no answer within the
// fence store's 10s. The refusal stands (77), where run blamed the fence
// store for not answering (69). Takes the store's 10s.
func TestRun_StaleWhileServiceSilent(t *testing.T) {
	openers["fakeblocked"] = func(_ context.Context, _ *url.URL, opts ...baton.Option) (*baton.Locker, error) {
		cfg, err := baton.NewConfig(opts...)
		if err != nil {
			return nil, err
		}
		return baton.NewLocker(blockedInspect{&fakeBackend{}}, cfg), nil
	}
	t.Cleanup(func() { delete(openers, "fakeblocked") })
	store := storeAhead(t, "invoices")
	r := runInProcess("run", "--backend", "fakeblocked://test", "--fence", store, "invoices", "--", "true")
	if r.code != exitStale || !strings.Contains(r.stderr, "refused token") {
		t.Fatalf("exit %d, stderr %q; want 77, the fence's refusal", r.code, r.stderr)
	}
}

// raiseAheadEnv names the fence store that a command started by baton run
// (this binary, with BATON_LOCK set) raises its lock's fence in, ahead of
// the lock service: see raiseAhead.
const raiseAheadEnv = "BATON_TEST_RAISE_AHEAD"

// raiseAhead raises the fence of resource in store to 1<<40, as a writer
// with another lock service's tokens would, and exits 0.
func raiseAhead(store, resource string) int {
	s, err := fence.Open(context.Background(), store)
	if err == nil {
		err = s.Raise(context.Background(), resource, 1<<40)
		s.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestRun_Once_FenceMovedWhileRunning: the fence moves past the token
// while the command runs (here the command itself raises it, as a writer
// with another lock service's tokens). The command ran to its end, but
// the run is not marked done: exit 77, saying so, and why as a raise
// finds it: the lock service still names this lease, so the fence is
// ahead of it, not taken by a later holder.
func TestRun_Once_FenceMovedWhileRunning(t *testing.T) {
	backend := etcdBackend(t)
	store := initStore(t)
	b := batonCmd("run", "--backend", backend, "--fence", store, "--once", "night-1", "moved", "--", os.Args[0])
	b.Env = append(b.Env, raiseAheadEnv+"="+store)
	r := startCmd(t, b).wait(t)
	if r.code != exitStale || !strings.Contains(r.stderr, `ran to its end (exit 0), but run "night-1" of moved was not marked done`) || !strings.Contains(r.stderr, "still names this lease the holder") {
		t.Fatalf("exit %d, stderr %q; want 77, saying the run was not marked done and that the fence is ahead of the lock service", r.code, r.stderr)
	}
	oneLine(t, r)
	s, err := fence.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if done, err := s.Done(context.Background(), "moved", "night-1"); err != nil || done {
		t.Fatalf("run marked done: %v, %v", done, err)
	}
}

// initStore returns the URL of a SQLite fence store made for t, its
// tables created by baton fence init.
func initStore(t *testing.T) string {
	t.Helper()
	store := "sqlite:" + filepath.Join(t.TempDir(), "fence.db")
	if r := runInProcess("fence", "init", "--store", store); r.code != 0 {
		t.Fatalf("fence init: %d %s", r.code, r.stderr)
	}
	return store
}

// storeAhead returns the URL of a SQLite fence store, made for t, whose
// fence for resource is at 1<<40: ahead of any token a test's lock service
// gives, as if raised with another service's tokens.
func storeAhead(t *testing.T, resource string) string {
	t.Helper()
	store := initStore(t)
	s, err := fence.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Raise(context.Background(), resource, 1<<40); err != nil {
		t.Fatal(err)
	}
	return store
}

// TestWriteTable_TTLRounded: TTL LEFT reads alike on every backend, to a
// tenth of a second (PostgreSQL's came to the microsecond).
func TestWriteTable_TTLRounded(t *testing.T) {
	var b strings.Builder
	if err := writeTable(&b, []baton.LockInfo{{Name: "job", Holder: "vm1", TTLLeft: 13996178 * time.Microsecond}, {Name: "two", Holder: "vm2", TTLLeft: 2340 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), " 14s ") || !strings.Contains(b.String(), " 2.3s ") {
		t.Fatalf("table:\n%s\nwant TTL LEFT 14s and 2.3s", b.String())
	}
}

// TestWriteTable_WriteFails: a table that could not be written is an
// error (exit 141 for a reader gone), as the JSON is: status exited 0.
func TestWriteTable_WriteFails(t *testing.T) {
	if err := writeTable(brokenPipe{}, []baton.LockInfo{{Name: "job", Holder: "vm1"}}); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("writeTable on a broken pipe = %v, want its error", err)
	}
}

// TestStatus_HolderNotPrintable: a holder with a newline (--id from a
// variable gone wrong) is shown escaped in the table, where it would
// make a row of its own, and as it is in JSON (whose strings escape it),
// on etcd as on Redis: etcd's was quoted twice in JSON, Redis's raw in the
// table.
func TestStatus_HolderNotPrintable(t *testing.T) {
	const holder = "evil\nj9  fake  99"
	for _, backend := range []string{etcdBackend(t), testsvc.StartRedis(t).URL()} {
		p := startHolder(t, backend, "j9", "--id", holder)
		r := runInProcess("status", "--backend", backend, "--json", "j9")
		var st []struct{ Holder string }
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st) != 1 || st[0].Holder != holder {
			t.Errorf("%s: status --json: %v, %+v; want the holder as it was given, %q", backend, err, st, holder)
		}
		r = runInProcess("status", "--backend", backend, "j9")
		if lines := strings.Count(r.stdout, "\n"); lines != 2 || !strings.Contains(r.stdout, strconv.Quote(holder)) {
			t.Errorf("%s: status table:\n%s\nwant a header and one row, the holder quoted", backend, r.stdout)
		}
		// The run refused for it, and the forced release, name it quoted too.
		r = runInProcess("run", "--backend", backend, "j9", "--", "true")
		if r.code != exitNotAcquired || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, strconv.Quote(holder)) {
			t.Errorf("%s: run while held: exit %d, stderr %q; want %d on one line, the holder quoted", backend, r.code, r.stderr, exitNotAcquired)
		}
		r = runInProcess("release", "--backend", backend, "--force", "j9")
		if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, strconv.Quote(holder)) {
			t.Errorf("%s: release --force: exit %d, stdout %q; want one line, the holder quoted", backend, r.code, r.stdout)
		}
		p.wait(t)
	}
}

// TestFenceCall_Stale: a fence's refusal names the store and what was
// asked of it, and, for a newer holder's token, that nothing is to be
// done; it stays a stale token (exit 77).
func TestFenceCall_Stale(t *testing.T) {
	s := &leaseSession{storeAt: "fence store sqlite:/tmp/f.db"}
	for _, tc := range []struct {
		ahead bool
		want  string
	}{
		{false, `fence store sqlite:/tmp/f.db, asked to raise the fence of invoices to 41: fence "invoices" refused token 41: it has seen token 42; another holder took the lock since: nothing to do here (the newer holder does the job)`},
		{true, `fence store sqlite:/tmp/f.db, asked to raise the fence of invoices to 41: fence "invoices" refused token 41: it has seen token 42, though`},
	} {
		err := s.fenceCall(t.Context(), "raise the fence of invoices to 41", slowRaise, func(context.Context) error {
			return &baton.StaleTokenError{Resource: "invoices", Got: 41, Newest: 42, Ahead: tc.ahead}
		})
		if !errors.Is(err, baton.ErrStaleToken) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ahead=%v: %v; want an error matching ErrStaleToken, beginning %q", tc.ahead, err, tc.want)
		}
	}
}

// TestWriteTable_KeyWithoutHolder: a held lock whose key names no holder
// (a client of another kind wrote it) is held, in the table as in the
// JSON, which keep its key, token and TTL: the table showed it (free).
func TestWriteTable_KeyWithoutHolder(t *testing.T) {
	infos := []baton.LockInfo{{Name: "job", Key: "/baton/lock/job/694d", Token: 5, TTLLeft: 3 * time.Second}, {Name: "idle"}}
	var b strings.Builder
	if err := writeTable(&b, infos); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(rows) != 3 || strings.Contains(rows[1], "(free)") || !strings.Contains(rows[1], "(unnamed)") || !strings.Contains(rows[1], " 5 ") || !strings.Contains(rows[1], " 3s ") || !strings.Contains(rows[2], "(free)") {
		t.Errorf("table:\n%s\nwant job held by (unnamed) with token 5 and 3s left, idle free", b.String())
	}
	b.Reset()
	if err := writeJSON(&b, infos); err != nil {
		t.Fatal(err)
	}
	var st []statusJSON
	if err := json.Unmarshal([]byte(b.String()), &st); err != nil || len(st) != 2 || st[0].TTLLeftSec == nil || *st[0].TTLLeftSec != 3 || st[1].TTLLeftSec != nil {
		t.Errorf("JSON %s: want job's TTL left, 3s, and none for idle", b.String())
	}
}
