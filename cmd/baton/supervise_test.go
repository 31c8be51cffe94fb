package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/proc"
	"github.com/baton-go/baton/internal/testsvc"
)

// straggler is a command whose main process leaves behind a process of its
// group that ignores SIGTERM, after writing its pid and the group's to a
// file; then it runs tail.
func straggler(pidFile, tail string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`(trap '' TERM; exec sleep 30) & echo "$! $$" > %[1]s.tmp; mv %[1]s.tmp %[1]s; %[2]s`, pidFile, tail)}
}

// readStraggler reads the pid and group that straggler wrote, and kills the
// pid when the test ends, whatever happened.
func readStraggler(t *testing.T, pidFile string) (pid, pgid int) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(string(b), &pid, &pgid); err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid, pgid
}

// waitPid waits for the pid file that a command writes (to file.tmp, then
// renamed) and returns the pid in it; say tells what went wrong when it
// never comes. The pid is killed when the test ends, whatever happened.
func waitPid(t *testing.T, file string, say func() string) int {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(file); return err == nil }, say)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q", b)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// checkGroupGone fails if pid, or any process of group pgid, is still alive
// (a zombie is not).
func checkGroupGone(t *testing.T, pid, pgid int) {
	t.Helper()
	if _, state, ok := proc.Stat(pid); ok && state != 'Z' {
		t.Errorf("process %d of the command's group is still alive (state %c) after baton exited", pid, state)
	}
	if n := liveInGroup(pgid); n != 0 {
		t.Errorf("%d processes of the command's group %d still alive after baton exited", n, pgid)
	}
}

// TestRun_GroupOutlivesMainProcess: the command's main process exits 0 and
// leaves a process of its group that ignores SIGTERM. baton sends the group
// SIGTERM and SIGKILL after --grace, exits with the main process's 0, and
// only once nothing of the group is alive; until then it holds the lock.
func TestRun_GroupOutlivesMainProcess(t *testing.T) {
	backend := etcdBackend(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	r := runBaton(t, append([]string{"run", "--backend", backend, "--grace", "1s", "invoices", "--"}, straggler(pidFile, "exit 0")...)...)
	if r.code != 0 {
		t.Fatalf("exit %d, want the command's 0; stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "1 process of sh still running after it exited") {
		t.Errorf("stderr does not say what was left running: %q", r.stderr)
	}
	pid, pgid := readStraggler(t, pidFile)
	checkGroupGone(t, pid, pgid)
}

// TestRun_GroupOutlivesMainProcess_LeaseLost: when the lease is lost, the
// main process ends on SIGTERM but a process of its group ignores it: baton
// exits 76 only after the SIGKILL --grace later has ended it.
func TestRun_GroupOutlivesMainProcess_LeaseLost(t *testing.T) {
	backend := etcdBackend(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	run := startBaton(t, append([]string{"run", "--backend", backend, "--grace", "1s", "invoices", "--"}, straggler(pidFile, `trap 'exit 0' TERM; sleep 60 & wait`)...)...)
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(pidFile); return err == nil }, func() string { return run.stderr.String() })
	pid, pgid := readStraggler(t, pidFile)
	if r := runBaton(t, "release", "--force", "--backend", backend, "invoices"); r.code != 0 {
		t.Fatalf("release --force: %d %s", r.code, r.stderr)
	}
	r := run.wait(t)
	if r.code != exitLeaseLost {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, exitLeaseLost, r.stderr)
	}
	checkGroupGone(t, pid, pgid)
}

// TestRun_LossFoundByRelease: the lock service notices the loss only when
// baton releases the lock (as etcd's does when the key was deleted by a
// forced release its watcher had not yet reported) after the command
// exited 0: baton exits 76, not the command's 0, and says the release found
// it.
func TestRun_LossFoundByRelease(t *testing.T) {
	backend := useFake(t, &fakeBackend{releaseErr: fmt.Errorf("%w: lock key gone when released", baton.ErrLeaseLost)})
	for _, cmd := range []string{"run", "elect"} {
		r := runInProcess(cmd, "--backend", backend, "stock", "--", "true")
		if r.code != exitLeaseLost {
			t.Fatalf("%s: exit %d, want %d; stderr %q", cmd, r.code, exitLeaseLost, r.stderr)
		}
		if cmd == "elect" { // elect says first that it leads
			_, r.stderr, _ = strings.Cut(r.stderr, "\n")
		}
		if !strings.Contains(r.stderr, "found by the re") {
			t.Errorf("%s: stderr does not say the release found the loss: %q", cmd, r.stderr)
		}
		oneLine(t, r)
	}
}

// TestRun_DeadlinePassedBeforeStart: a lease whose local deadline passed
// before its command could start (a slow fence raise, a slow --once check)
// starts nothing: run exits 76; elect campaigns again, and runs the
// command in its next term.
func TestRun_DeadlinePassedBeforeStart(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	r := runInProcess("run", "--backend", useFake(t, &fakeBackend{deadline: -time.Second}), "stock", "--", "touch", ran)
	if r.code != exitLeaseLost || !strings.Contains(r.stderr, `lease on "stock"`) || !strings.Contains(r.stderr, "not started") {
		t.Fatalf("run: exit %d, stderr %q; want %d, the lease named, and the command not started", r.code, r.stderr, exitLeaseLost)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("run: the command ran past its lease's deadline")
	}
	// With --fence, a lease lost already raises no fence.
	store := initStore(t)
	r = runInProcess("run", "--backend", useFake(t, &fakeBackend{deadline: -time.Second}), "--fence", store, "stock", "--", "touch", ran)
	if r.code != exitLeaseLost || !strings.Contains(r.stderr, "the fence was not raised") {
		t.Fatalf("run --fence: exit %d, stderr %q; want %d and the fence not raised", r.code, r.stderr, exitLeaseLost)
	}
	if show := runInProcess("fence", "show", "--store", store, "stock"); show.code != 0 || !strings.Contains(show.stdout, "stock     0             never") {
		t.Errorf("fence show after the lost lease: exit %d, stdout %q, stderr %q; want the fence never raised", show.code, show.stdout, show.stderr)
	}
	r = runInProcess("elect", "--backend", useFake(t, &fakeBackend{deadline: -time.Second}), "stock", "--", "touch", ran)
	if r.code != 0 || !strings.Contains(r.stderr, "not started; campaigning again") {
		t.Fatalf("elect: exit %d, stderr %q; want 0 after a first term that started nothing", r.code, r.stderr)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatal("elect: the command did not run in the second term")
	}
	// With --fence, the term lost already raises no fence either.
	store = initStore(t)
	r = runInProcess("elect", "--backend", useFake(t, &fakeBackend{deadline: -time.Second}), "--fence", store, "stock", "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "the fence was not raised, true not started; campaigning again") {
		t.Fatalf("elect --fence: exit %d, stderr %q; want 0 after a first term that raised nothing", r.code, r.stderr)
	}
}

// TestRun_NestedEnv: a run inside another (an outer run on etcd, an inner
// one on Redis) does not hand the inner command the outer lease's token,
// key or revision, which the inner backend does not set.
func TestRun_NestedEnv(t *testing.T) {
	backend := "redis://" + testsvc.StartRedis(t).Addr
	p := batonCmd("run", "--backend", backend, "stock", "--", "sh", "-c", `echo "token=${BATON_TOKEN-unset} key=${ETCD_LOCK_KEY-unset} rev=${ETCD_LOCK_REV-unset} lock=$BATON_LOCK"`)
	p.Env = append(p.Env, "BATON_TOKEN=999", "ETCD_LOCK_KEY=/baton/lock/outer/1", "ETCD_LOCK_REV=999", "BATON_LOCK=outer", "BATON_HOLDER=outer-holder")
	r := startCmd(t, p).wait(t)
	if want := "token=unset key=unset rev=unset lock=stock"; r.code != 0 || strings.TrimSpace(r.stdout) != want {
		t.Fatalf("exit %d, command saw %q, want %q; stderr %q", r.code, r.stdout, want, r.stderr)
	}
}

// proxiedStore returns the URL of a PostgreSQL fence store with baton's
// tables, on a fresh database, reached through the proxy it returns.
func proxiedStore(t *testing.T) (string, *testsvc.Proxy) {
	t.Helper()
	dsn := pg.Database(t)
	if r := runInProcess("fence", "init", "--store", dsn); r.code != 0 {
		t.Fatalf("fence init: %s", r.stderr)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testsvc.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	return u.String(), proxy
}

// TestRun_FenceStoreCutOff_Interrupted: the fence store does not answer
// the raise baton sends once it has the lock (its proxy holds it back).
// SIGTERM then ends baton at once with exit 130, instead of leaving it
// holding and renewing the lock while it waits for the store, and the lock
// is free again.
func TestRun_FenceStoreCutOff_Interrupted(t *testing.T) {
	backend := etcdBackend(t)
	store, proxy := proxiedStore(t)

	dir := t.TempDir()
	started, gate := filepath.Join(dir, "started"), filepath.Join(dir, "gate")
	holder := startBaton(t, "run", "--backend", backend, "invoices", "--", "sh", "-c", fmt.Sprintf(`touch %s; while [ ! -e %s ]; do sleep 0.01; done`, started, gate))
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, func() string { return holder.stderr.String() })
	waiter := startBaton(t, "run", "--backend", backend, "--fence", store, "--wait", "60s", "--id", "waiter", "invoices", "--", "true")
	waitFor(t, 30*time.Second, func() bool { return waiters(t, backend, "invoices") == 1 }, func() string { return "the waiter never queued: " + waiter.stderr.String() })

	// The first statement that names the fence's column is the raise,
	// made once the waiter holds the lock: it never reaches the server.
	raise := proxy.HoldFirst([]byte("last_token"))
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-raise.Caught():
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiter did not raise the fence: %s", waiter.stderr.String())
	}
	if err := waiter.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termed := time.Now()
	// Well within storeTimeout, after which baton would exit 69 by itself.
	waitFor(t, storeTimeout/2, func() bool { _, ok := waiter.exited(); return ok }, func() string {
		return "baton still runs after SIGTERM, waiting for the fence store: " + waiter.stderr.String()
	})
	r := waiter.wait(t)
	t.Logf("baton exited %v after SIGTERM", time.Since(termed).Round(time.Millisecond))
	if r.code != exitInterrupted || !strings.Contains(r.stderr, "fence store") {
		t.Fatalf("exit %d, want %d saying it was waiting for the fence store; stderr %q", r.code, exitInterrupted, r.stderr)
	}
	oneLine(t, r)
	if r := runInProcess("status", "--backend", backend, "--json", "invoices"); strings.Contains(r.stdout, `"holder"`) {
		t.Fatalf("the lock is still held after the interrupted run: %s", r.stdout)
	}
}

// TestRun_StoppedCommandEnds: a command stopped by the kernel (as by SIGTTIN
// when it reads the terminal from its own background group) acts on the
// SIGTERM baton passes on only when continued: baton follows it with
// SIGCONT, so the command ends (128+SIGTERM) instead of hanging.
func TestRun_StoppedCommandEnds(t *testing.T) {
	backend := etcdBackend(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	run := startBaton(t, "run", "--backend", backend, "invoices", "--", "sh", "-c", fmt.Sprintf(`echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 60`, pidFile))
	pid := waitPid(t, pidFile, func() string { return run.stderr.String() })
	if err := syscall.Kill(-pid, syscall.SIGTTIN); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return proc.Stopped(pid) }, func() string { return "the command did not stop" })
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { _, ok := run.exited(); return ok }, func() string {
		_, state, _ := proc.Stat(pid)
		return fmt.Sprintf("baton still runs 10s after SIGTERM; its command is in state %c", state)
	})
	if r := run.wait(t); r.code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want %d (the command killed by SIGTERM); stderr %q", r.code, 128+int(syscall.SIGTERM), r.stderr)
	}
}

// TestRun_CtrlZ_StopsCommandToo: SIGTSTP (Ctrl-Z) to baton stops its
// command's group too, then baton: the command must not run on
// unsupervised while baton's renewals are stopped. Continued within the
// lease, the command goes on; stopped past the TTL, the lock passes to
// another holder while the command stays stopped, and once continued
// baton finds the lease lost and ends the command without letting it run
// on (exit 76).
func TestRun_CtrlZ_StopsCommandToo(t *testing.T) {
	backend := etcdBackend(t)
	for _, past := range []bool{false, true} {
		t.Run(fmt.Sprintf("pastTTL=%v", past), func(t *testing.T) {
			name := fmt.Sprintf("ctrlz-%v", past)
			dir := t.TempDir()
			pidFile, termFile := filepath.Join(dir, "pid"), filepath.Join(dir, "term")
			// Continued within the lease: the stop and the continue must
			// both come before the lease's local deadline, and at a 2s TTL
			// a loaded machine can take longer than that leaves. Past the
			// TTL: a short one, for the other holder's wait.
			ttl := "30s"
			if past {
				ttl = "2s"
			}
			run := startBaton(t, "run", "--backend", backend, "--ttl", ttl, name, "--", "sh", "-c", fmt.Sprintf(`trap 'touch %[2]s; exit 0' TERM; echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; sleep 60 & wait`, pidFile, termFile))
			pid := waitPid(t, pidFile, func() string { return run.stderr.String() })
			baton := run.cmd.Process.Pid
			if err := syscall.Kill(baton, syscall.SIGTSTP); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, func() bool { return proc.Stopped(pid) && proc.Stopped(baton) }, func() string {
				_, cs, _ := proc.Stat(pid)
				_, bs, _ := proc.Stat(baton)
				return fmt.Sprintf("after SIGTSTP the command is in state %c and baton in %c; want both stopped (T)", cs, bs)
			})
			if past {
				// Another holder gets the lock once the stopped lease ran
				// out, while the command is still stopped.
				if r := runBaton(t, "run", "--backend", backend, "--wait", "20s", name, "--", "true"); r.code != 0 {
					t.Fatalf("another holder while baton is stopped: exit %d: %s", r.code, r.stderr)
				}
				if !proc.Stopped(pid) {
					t.Fatal("the command ran on while baton was stopped")
				}
			}
			if err := syscall.Kill(baton, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if past {
				// Killed while still stopped: it does not run again, not
				// even its SIGTERM handler.
				if r := run.wait(t); r.code != exitLeaseLost {
					t.Fatalf("continued past the TTL: exit %d, want %d; stderr %q", r.code, exitLeaseLost, r.stderr)
				}
				if _, err := os.Stat(termFile); err == nil {
					t.Fatal("the command ran its SIGTERM handler after its lease was lost while it was stopped")
				}
				return
			}
			waitFor(t, 10*time.Second, func() bool { return !proc.Stopped(pid) }, func() string { return "the command was not continued with baton" })
			if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if r := run.wait(t); r.code != 0 {
				t.Fatalf("exit %d, want 0 (the command's SIGTERM handler exits 0); stderr %q", r.code, r.stderr)
			}
			if _, err := os.Stat(termFile); err != nil {
				t.Fatal("the continued command did not get the SIGTERM passed on")
			}
		})
	}
}

// fakeLease is a lease from a Locker on the fake backend, for supervise's
// own tests: it holds for an hour.
func fakeLease(t *testing.T) *baton.Lease {
	t.Helper()
	cfg, err := baton.NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	l := baton.NewLocker(&fakeBackend{}, cfg)
	t.Cleanup(func() { _ = l.Close() })
	lease, err := l.Acquire(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// TestSupervise_SignalBeforeStart: a stop signal that came after the lease
// was granted, before supervise listened for signals (it cancelled ctx
// alone), starts nothing: exit 130. Checked once supervise listens, so
// that no signal falls between the check and the command's start.
func TestSupervise_SignalBeforeStart(t *testing.T) {
	lease := fakeLease(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ran := filepath.Join(t.TempDir(), "ran")
	_, err := supervise(ctx, lease, []string{"touch", ran}, os.Environ(), time.Second, nil, io.Discard, io.Discard, slog.New(slog.DiscardHandler))
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitInterrupted {
		t.Fatalf("supervise after a signal = %v, want exit %d", err, exitInterrupted)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran after the signal")
	}
}

// TestSupervise_SignalCancelsLate: a stop signal that reached only the
// signal context, just before supervise listened, cancels ctx a moment
// later, on the signal package's goroutine, after the check before the
// start: supervise passes on the signal ctx's cause names (here SIGINT)
// when none comes through its own
// channel. Before, the command ran on to its end; then it got SIGTERM.
func TestSupervise_SignalCancelsLate(t *testing.T) {
	lease := fakeLease(t)
	ctx, cancel := context.WithCancelCause(t.Context())
	started := filepath.Join(t.TempDir(), "started")
	go func() {
		for ctx.Err() == nil { // the command started: cancel, as a signal would
			if _, err := os.Stat(started); err == nil {
				cancel(signalCause{syscall.SIGINT})
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	script := "sleep 30 & trap 'kill $!; exit 42' INT; touch " + started + "; wait"
	res, err := supervise(ctx, lease, []string{"sh", "-c", script}, os.Environ(), time.Second, nil, io.Discard, io.Discard, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !res.signaled || res.code != 42 {
		t.Fatalf("supervise after a late cancellation by SIGINT = %+v; want the command's trap of SIGINT (exit 42)", res)
	}
}

// TestCauseSignal: causeSignal reads the signal from the cause that
// signalContext gives, for a real signal.
func TestCauseSignal(t *testing.T) {
	ctx, stop := signalContext(syscall.SIGHUP)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if got := causeSignal(ctx); got != syscall.SIGHUP {
		t.Fatalf("causeSignal = %v for a context SIGHUP cancelled (cause %q), want SIGHUP", got, context.Cause(ctx))
	}
	if got := causeSignal(t.Context()); got != syscall.SIGTERM {
		t.Fatalf("causeSignal of a live context = %v, want SIGTERM", got)
	}
}

// TestRun_LostInBackground_Tostop: baton runs as a background job on a
// terminal with `stty tostop`, and its lease is lost. Its message about
// the loss, written to the terminal, raises SIGTTOU, and the kernel
// restarts the write until baton stops: baton must stop the command's
// group, then itself, rather than spin in the write while the command,
// which ignores SIGTERM, runs on without a lease and its SIGKILL never
// comes.
func TestRun_LostInBackground_Tostop(t *testing.T) {
	backend := etcdBackend(t)
	master, tty := openPTY(t)
	go func() { _, _ = io.Copy(io.Discard, master) }() // the terminal's screen; ends when master closes
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag |= unix.TOSTOP
	if err := unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	pidFile, batonFile := filepath.Join(dir, "pid"), filepath.Join(dir, "baton")
	b := batonCmd("run", "--backend", backend, "--grace", "1s", "tostop", "--", "sh", "-c",
		fmt.Sprintf(`trap '' TERM; echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 60`, pidFile))
	// A session on the terminal: a shell with job control in the
	// foreground, and baton as its background job.
	sh := exec.Command("sh", append([]string{"-c", `set -m; "$@" & echo $! > ` + batonFile + `.tmp; mv ` + batonFile + `.tmp ` + batonFile + `; wait`, "sh", b.Path}, b.Args[1:]...)...)
	sh.Env = b.Env
	sh.Stdin, sh.Stdout, sh.Stderr = tty, tty, tty
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	readPid := func(f string) int {
		var pid int
		waitFor(t, 30*time.Second, func() bool {
			b, err := os.ReadFile(f)
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && pid > 0
		}, func() string { return f + " not written" })
		return pid
	}
	baton, pid := readPid(batonFile), readPid(pidFile)
	t.Cleanup(func() {
		for _, p := range []int{-pid, -baton, sh.Process.Pid} {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		_ = sh.Wait()
	})
	if pg, _, _ := proc.Stat(baton); pg != baton {
		t.Fatalf("baton is in process group %d, want its own (%d): the shell did no job control", pg, baton)
	}

	if r := runBaton(t, "release", "--backend", backend, "--force", "tostop"); r.code != 0 {
		t.Fatalf("release --force: exit %d: %s", r.code, r.stderr)
	}
	stopped := func(p int) bool { _, state, ok := proc.Stat(p); return !ok || state == 'T' || state == 'Z' }
	waitFor(t, 10*time.Second, func() bool { return stopped(pid) && stopped(baton) }, func() string {
		_, cs, _ := proc.Stat(pid)
		_, bs, _ := proc.Stat(baton)
		return fmt.Sprintf("after the loss the command is in state %c and baton in %c; want the command stopped or gone (T, Z), and baton stopped (T) or gone (its shell gone, the orphaned group has SIGHUP)", cs, bs)
	})
}

// openPTY opens a pseudo-terminal: its master side, and its terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// TestRun_StalledStderr_LossStillKills: baton's stderr is a pipe that
// nobody reads, already full, so every write of baton's blocks; the
// command ignores SIGTERM. When the lease is lost, the command still gets
// SIGKILL after --grace: neither the loss's log line (--log-level warn;
// the Lease writes it after it let go of its lock) nor baton's own
// message holds up the signals. Once the pipe is read, baton exits 76.
func TestRun_StalledStderr_LossStillKills(t *testing.T) {
	backend := etcdBackend(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	fillPipe(t, w)
	cmd := batonCmd("--log-level", "warn", "run", "--backend", backend, "--grace", "500ms", "invoices", "--", "sh", "-c",
		fmt.Sprintf(`trap '' TERM; echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 600`, pidFile))
	cmd.Stderr = w
	run := startCmd(t, cmd)
	pid := waitPid(t, pidFile, func() string { return "no pid file" })
	if r := runBaton(t, "release", "--force", "--backend", backend, "invoices"); r.code != 0 {
		t.Fatalf("release --force: %d %s", r.code, r.stderr)
	}
	waitFor(t, 30*time.Second, func() bool {
		_, state, ok := proc.Stat(pid)
		return !ok || state == 'Z'
	}, func() string { return "the command, which ignores SIGTERM, still runs 30s after the loss" })
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if res := run.wait(t); res.code != exitLeaseLost {
		t.Errorf("exit %d, want %d", res.code, exitLeaseLost)
	}
}

// fillPipe writes to w until the pipe is full, and leaves w blocking.
func fillPipe(t *testing.T, w *os.File) {
	t.Helper()
	fd := int(w.Fd())
	if err := syscall.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := syscall.Write(fd, chunk); err != nil {
			if errors.Is(err, syscall.EAGAIN) {
				break
			}
			t.Fatal(err)
		}
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
}

// TestRun_Once_InterruptedNotDone: baton gets SIGTERM while a --once run's
// command works, and passes it on; the command stops cleanly, exit 0,
// halfway through. The run is not marked done, baton exits 143 and says
// why, and the next try runs the command again.
func TestRun_Once_InterruptedNotDone(t *testing.T) {
	backend := etcdBackend(t)
	store := initStore(t)
	dir := t.TempDir()
	started, marker := filepath.Join(dir, "started"), filepath.Join(dir, "ran")
	run := startBaton(t, "run", "--backend", backend, "--fence", store, "--once", "night-1", "invoices", "--", "sh", "-c",
		fmt.Sprintf(`trap 'exit 0' TERM; echo ran >> %s; touch %s; sleep 60 & wait`, marker, started))
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, func() string { return run.stderr.String() })
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := run.wait(t)
	if r.code != 128+int(syscall.SIGTERM) || !strings.Contains(r.stderr, "not marked done") {
		t.Fatalf("interrupted run: exit %d, stderr %q; want %d and a line saying it was not marked done", r.code, r.stderr, 128+int(syscall.SIGTERM))
	}
	again := runBaton(t, "run", "--backend", backend, "--fence", store, "--once", "night-1", "invoices", "--", "sh", "-c", "echo ran >> "+marker)
	if again.code != 0 || strings.Contains(again.stderr, "already done") {
		t.Fatalf("next try: exit %d, stderr %q; want the run done now", again.code, again.stderr)
	}
	if b, _ := os.ReadFile(marker); strings.Count(string(b), "ran") != 2 {
		t.Errorf("command ran %d times, want twice: the interrupted run, then the next try", strings.Count(string(b), "ran"))
	}
}

// TestRun_KilledBaton_GroupDies: baton is killed outright (SIGKILL) while
// its command runs a process in the background. The command's main
// process dies with baton (its parent-death signal), and so does the
// background process, which no parent-death signal reaches: the group's
// guard kills it. Else it would run on without a lease.
func TestRun_KilledBaton_GroupDies(t *testing.T) {
	backend := etcdBackend(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	run := startBaton(t, "run", "--backend", backend, "invoices", "--", "sh", "-c",
		fmt.Sprintf(`sleep 600 & echo "$! $$" > %[1]s.tmp; mv %[1]s.tmp %[1]s; wait`, pidFile))
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(pidFile); return err == nil }, func() string { return run.stderr.String() })
	pid, pgid := readStraggler(t, pidFile)
	var guard int
	waitFor(t, 30*time.Second, func() bool {
		var ok bool
		guard, ok = childNamed(run.cmd.Process.Pid, guardName)
		return ok
	}, func() string { return "baton has no child named " + guardName })
	if err := run.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		_, state, ok := proc.Stat(pid)
		return (!ok || state == 'Z') && liveInGroup(pgid) == 0
	}, func() string {
		return fmt.Sprintf("the command's background process %d (group %d) still runs after baton was killed", pid, pgid)
	})
	waitFor(t, 30*time.Second, func() bool {
		_, state, ok := proc.Stat(guard)
		return !ok || state == 'Z'
	}, func() string { return fmt.Sprintf("the guard %d still runs after it killed the group", guard) })
}

// childNamed returns the pid of a child of ppid whose name (comm) is name.
func childNamed(ppid int, name string) (int, bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses
		open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || end < open {
			continue
		}
		var pid, parent int
		var state string
		if _, err := fmt.Sscan(string(b[:open]), &pid); err != nil {
			continue
		}
		if _, err := fmt.Sscan(string(b[end+1:]), &state, &parent); err != nil {
			continue
		}
		if parent == ppid && string(b[open+1:end]) == name {
			return pid, true
		}
	}
	return 0, false
}

// panicWriter panics at its first write: a fault of baton's own while the
// command runs.
type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("a fault of baton's") }

// TestSupervise_Panic_KillsGroupFirst: a panic inside supervise while part
// of the command's group runs (here, writing that a process outlived the
// main one) goes on only once the group is dead: on its way out, the
// callers' deferred releases free the lock, and nothing of the command may
// run on then. Before, the process left behind ran on for 30s.
func TestSupervise_Panic_KillsGroupFirst(t *testing.T) {
	lease := fakeLease(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		// The straggler's stderr is not the pipe to panicWriter, which
		// cmd.Wait would wait to see closed.
		argv := []string{"sh", "-c", fmt.Sprintf(`(trap '' TERM; exec sleep 30 2>/dev/null) & echo "$! $$" > %[1]s.tmp; mv %[1]s.tmp %[1]s; exit 0`, pidFile)}
		_, _ = supervise(t.Context(), lease, argv, os.Environ(), 10*time.Second, nil, nil, panicWriter{}, slog.New(slog.DiscardHandler))
	}()
	if recovered != "a fault of baton's" {
		t.Fatalf("supervise recovered %v, want the writer's panic to go on", recovered)
	}
	pid, pgid := readStraggler(t, pidFile)
	checkGroupGone(t, pid, pgid)
}

// TestRun_RelaysSignals: SIGUSR1, SIGUSR2 and SIGWINCH sent to baton reach
// the command (a log rotation, a terminal's resize), and end nothing: the
// command runs on until it is told to stop. Go would catch them and drop
// them.
func TestRun_RelaysSignals(t *testing.T) {
	backend := etcdBackend(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	run := startBaton(t, "run", "--backend", backend, "relays", "--", "sh", "-c", fmt.Sprintf(
		`trap 'touch %[2]s/USR1' USR1; trap 'touch %[2]s/USR2' USR2; trap 'touch %[2]s/WINCH' WINCH; trap 'exit 0' TERM; echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; while :; do sleep 0.05; done`,
		pidFile, dir))
	waitPid(t, pidFile, func() string { return run.stderr.String() })
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH} {
		if err := run.cmd.Process.Signal(s); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(unix.SignalName(s), "SIG")
		waitFor(t, 10*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }, func() string {
			return fmt.Sprintf("the command did not get %v sent to baton; stderr %q", s, run.stderr.String())
		})
	}
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := run.wait(t); r.code != 0 {
		t.Fatalf("exit %d after the relayed signals and a SIGTERM, want 0 (the command's TERM trap); stderr %q", r.code, r.stderr)
	}
}

// TestRun_FenceStoreSilentAtOpen: a fence store that takes the connection
// and answers nothing (a blocked proxy before PostgreSQL) fails the run
// as unavailable once the store's 10s per request have passed, before
// the lock is taken, where the open waited for the kernel's retries.
func TestRun_FenceStoreSilentAtOpen(t *testing.T) {
	backend := etcdBackend(t)
	store, proxy := proxiedStore(t)
	proxy.Block()

	run := startBaton(t, "run", "--backend", backend, "--fence", store, "invoices", "--", "true")
	waitFor(t, 2*storeTimeout, func() bool { _, ok := run.exited(); return ok }, func() string {
		return "baton still runs 20s after it began opening a silent fence store: " + run.stderr.String()
	})
	r := run.wait(t)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "no answer within 10s to open it") {
		t.Fatalf("exit %d, want %d saying the store did not answer its opening; stderr %q", r.code, exitUnavailable, r.stderr)
	}
	oneLine(t, r)
	if r := runInProcess("status", "--backend", backend, "--json", "invoices"); strings.Contains(r.stdout, `"holder"`) {
		t.Fatalf("the lock is held after the run failed: %s", r.stdout)
	}
}

// TestRun_StoppedCommand_Warns: a command stopped while baton runs (here
// by itself; in life, the kernel stops a background process that reads
// from the terminal) holds the lease without a word unless baton says so:
// once, after stoppedWarn. Continued, it runs to its end.
func TestRun_StoppedCommand_Warns(t *testing.T) {
	backend := etcdBackend(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	run := startBaton(t, "run", "--backend", backend, "stopped", "--", "sh", "-c",
		fmt.Sprintf(`echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; kill -STOP $$; echo resumed`, pidFile))
	pid := waitPid(t, pidFile, func() string { return run.stderr.String() })
	waitFor(t, stoppedWarn+10*time.Second, func() bool {
		return strings.Contains(run.stderr.String(), "sh has been stopped for 5s, holding the lease")
	}, func() string { return "no warning about the stopped command: " + run.stderr.String() })
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r := run.wait(t)
	if r.code != 0 || !strings.Contains(r.stdout, "resumed") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the command continued to its end", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stderr, "has been stopped"); n != 1 {
		t.Errorf("warned %d times about one stop, want once: %q", n, r.stderr)
	}
}
