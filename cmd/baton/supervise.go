package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/proc"
)

// saidLost is lost, the loss for which supervise stopped the command,
// told again once the command has ended: supervise said why at the loss,
// so the lease alone, not the cause a second time.
func saidLost(lost error) string {
	var le *baton.LostError
	switch {
	case !errors.As(lost, &le):
		return lost.Error()
	case le.Token != 0:
		return fmt.Sprintf("lease on %q (token %d) lost, as said above", le.Name, le.Token)
	}
	return fmt.Sprintf("lease on %q lost, as said above", le.Name)
}

// supervised is how a supervised command ended.
type supervised struct {
	code     int   // its exit code (128+N if killed by signal N)
	lost     error // the lease's loss, if that is why it was stopped while its main process ran
	signaled bool  // baton got one of passedOn and passed it on
	// interrupted: baton passed one of passedOn on while the main process
	// ran, signal the first; it may have stopped short of its end
	interrupted bool
	signal      syscall.Signal
	status      string
	// left counts the processes of the command's group still alive
	// killStuck after SIGKILL, when supervise gave up waiting for them:
	// another user's (which baton may not signal) or stuck in the kernel.
	left int
}

// passedOn are the signals baton handles: they end a wait for the lock
// (exit 130), and while a command runs baton passes them on to its process
// group; run's help lists them. SIGQUIT (Ctrl-\) is one of them: left to
// Go's default, baton would dump its goroutines and exit 2, and the
// command's group would run on without a lease.
var passedOn = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// relayed are signals that mean something to a command and nothing to
// baton: while the command runs, baton passes them on to its group, and
// they change nothing else (no exit 130). A service's log rotation
// (SIGUSR1, SIGUSR2) and a terminal's resize (SIGWINCH, sent to the
// terminal's foreground group, baton's, not the command's own) reach the
// command so. Go would otherwise catch them and drop them.
var relayed = []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// handled returns sigs without the signals ignored when baton started
// (SIGHUP under nohup): those stay ignored, for baton and, as the kernel
// passes an ignored disposition on, for the command. Go keeps SIGHUP and
// SIGINT ignored at start-up ignored until it is asked to notify of them,
// which baton never does, so handled gives the same answer all along. It
// keeps no other signal so: it installs its own handler for SIGTERM and
// SIGQUIT whatever their disposition at start, and signal.Ignored cannot
// tell that they were ignored.
func handled(sigs ...os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// notify relays to c those of sigs that handled keeps; none, when it
// keeps none (signal.Notify with none would relay every signal).
func notify(c chan<- os.Signal, sigs ...os.Signal) {
	if hs := handled(sigs...); len(hs) > 0 {
		signal.Notify(c, hs...)
	}
}

// jobSignals are the signals with which a terminal stops a job (Ctrl-Z, or
// a background job that read or wrote the terminal), and SIGCONT, with
// which it continues it. The command runs in a process group of its own,
// which the terminal does not stop along with baton: left to the default,
// baton would stop, its renewals with it, and the command run on
// unsupervised while the lock passed to another holder. So baton stops
// the command's group first, then itself; continued, it continues the
// group only while the lease holds.
var jobSignals = []os.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGCONT}

// groupPoll is how often supervise looks for processes left in the
// command's group after its main process exited; killStuck is how long it
// waits for them after SIGKILL before it gives up (a process in the D state
// dies only when the kernel lets it).
const (
	groupPoll = 40 * time.Millisecond
	killStuck = 5 * time.Second
)

// stoppedWarn is how long the command's main process may be stopped while
// baton runs (the kernel stops a background process that reads from the
// terminal, or writes to it under stty tostop) before baton says so, once
// a stop; the lease is held all the while. stoppedLook is how often
// baton looks.
const (
	stoppedWarn = 5 * time.Second
	stoppedLook = time.Second
)

// supervise runs argv in its own process group until it exits, passing on
// the signals in passedOn, and stops it when the lease is lost: SIGTERM to
// the group at once, SIGKILL after grace. It returns only once no process
// of the group is left alive: when the main process exits before the rest,
// the rest get SIGTERM (unless they had it already) and SIGKILL after grace,
// so that the caller never releases the lease while part of the command
// runs. The result is the main process's exit status. A stop signal that
// came (cancelling ctx) before the command could start starts nothing:
// exit 130.
func supervise(ctx context.Context, lease *baton.Lease, argv, env []string, grace time.Duration, stdin io.Reader, stdout, stderr io.Writer, log *slog.Logger) (supervised, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, commandOutput(stderr) // baton's own lines go through stderr
	// Its own process group, so a loss can stop all of it; and the command
	// is killed if baton itself dies, since nothing would renew the lease
	// or stop it (what it forks, too: the kernel signals direct children
	// only, and startGuard's guard kills the group).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	sigs := make(chan os.Signal, 4)
	notify(sigs, passedOn...)
	defer signal.Stop(sigs)
	jobs := make(chan os.Signal, 4)
	var jc []os.Signal
	for _, s := range jobSignals {
		// Not as PID 1 (a container's init): the kernel drops the SIGSTOP
		// it would send itself, and the command would stay stopped while
		// baton renewed the lease on; PID 1 ignores these signals anyway.
		if os.Getpid() != 1 && !signal.Ignored(s) {
			jc = append(jc, s)
		}
	}
	if len(jc) > 0 {
		signal.Notify(jobs, jc...)
	}
	defer signal.Stop(jobs)

	// Checked only now that sigs listens: a signal that came before
	// reached ctx alone, and would be lost; one from now on reaches sigs
	// too, and is passed on once the command runs. One that came just
	// before, whose cancellation of ctx is still on its way, is passed
	// on below (stopped).
	if ctx.Err() != nil {
		return supervised{}, &exitError{code: exitInterrupted, msg: "interrupted before the command started"}
	}
	g, err := startGuard()
	if err != nil {
		fmt.Fprintf(stderr, "baton: warning: %v; should baton die without a say, what %s starts would run on\n", err, argv[0])
	} else {
		defer g.release()
	}
	// The fence raise, the --once check and the guard's start before may
	// have taken long.
	if err := leaseErr(lease); err != nil {
		return supervised{}, &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%v; %s not started", err, argv[0])}
	}
	if err := cmd.Start(); err != nil {
		return supervised{}, cannotRun(argv, err)
	}
	// Listened for only now: one that came before, while baton waited,
	// is dropped, not handed to a command that has yet to set a handler
	// (SIGUSR1's default ends a process).
	relays := make(chan os.Signal, 4)
	notify(relays, relayed...)
	defer signal.Stop(relays)
	pgid := cmd.Process.Pid
	if g != nil {
		g.watch(pgid)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	group := &jobControl{pgid: pgid, lease: lease}
	defer group.end() // the SIGKILL timer's callback may run late
	// A panic from here on (a fault of baton's) goes on only once the
	// group is dead: the callers' deferred releases would free the lock
	// while it ran. Deferred after end, so it runs first.
	defer func() {
		if p := recover(); p != nil {
			group.kill()
			<-exited
			for t := time.Now(); liveInGroup(pgid) > 0 && time.Since(t) < killStuck; {
				time.Sleep(groupPoll)
			}
			panic(p)
		}
	}()
	quit := make(chan struct{})
	defer close(quit)
	go group.run(jobs, quit) // ends with supervise

	var (
		res     supervised
		termed  bool        // the group got SIGTERM, from baton or passed on
		kill    *time.Timer // sends SIGKILL when due
		killed  = make(chan struct{}, 1)
		stuck   <-chan time.Time // SIGKILL was sent: stop waiting then
		poll    *time.Ticker     // the main process exited: look at its group
		pollC   <-chan time.Time
		leader  = exited       // nil once the main process exited
		done    = lease.Done() // nil once handled: a closed channel would spin
		stopped = ctx.Done()   // nil once handled
		look    = time.NewTicker(stoppedLook)
		since   time.Time // when the main process was first seen stopped; zero while it runs
		warned  bool      // about this stop
	)
	defer func() {
		look.Stop()
		if poll != nil {
			poll.Stop()
		}
		if kill != nil {
			kill.Stop()
		}
	}()
	// killLater has SIGKILL sent after grace, unless it already is due or
	// was sent. The timer's own goroutine sends it, and then tells the
	// loop on killed: a loop held up in a write to a stalled stderr
	// delays no SIGKILL.
	killLater := func() {
		if kill == nil && stuck == nil {
			kill = time.AfterFunc(grace, func() {
				group.kill()
				killed <- struct{}{}
			})
		}
	}
	// killedStopped notes that group killed the group it had stopped, whose
	// lease ended since (lost): it must not run again, not even to act on
	// SIGTERM.
	killedStopped := func(lost error, why string) {
		res.lost, termed = lost, true
		fmt.Fprintf(stderr, "baton: %v%s: sent SIGKILL to %s, still stopped\n", lost, why, argv[0])
		if stuck == nil {
			stuck = time.After(killStuck)
		}
	}
	// passOn hands a signal baton got on to the group, or ends the group
	// that baton stopped and whose lease ended meanwhile.
	passOn := func(s os.Signal) {
		res.signaled = true
		if leader != nil && !res.interrupted {
			res.interrupted, res.signal = true, s.(syscall.Signal)
		}
		if err := group.signal(s.(syscall.Signal)); err != nil {
			// kill %1 sends SIGTERM then SIGCONT to a stopped job.
			killedStopped(err, fmt.Sprintf("; got %v", s))
			return
		}
		termed = termed || s == syscall.SIGTERM
		log.Info("passed signal on to the command", "signal", s)
	}
	for {
		select {
		case <-leader:
			leader = nil
			res.code, res.status = exitStatus(cmd.ProcessState), status(cmd.ProcessState)
			n := liveInGroup(pgid)
			if n == 0 {
				return res, nil
			}
			if !termed {
				termed = true
				if err := group.signal(syscall.SIGTERM); err != nil {
					stuck = time.After(killStuck)
					fmt.Fprintf(stderr, "baton: %s of %s left after it exited (%s); %v: sent SIGKILL to its group, still stopped\n", processes(n), argv[0], res.status, err)
				} else {
					killLater()
					fmt.Fprintf(stderr, "baton: %s of %s still running after it exited (%s); sent SIGTERM to its group (SIGKILL in %v)\n", processes(n), argv[0], res.status, grace)
				}
			} else {
				killLater()
			}
			poll = time.NewTicker(groupPoll)
			pollC = poll.C
		case <-look.C:
			if leader == nil {
				continue
			}
			if _, state, ok := proc.Stat(pgid); !ok || state != 'T' {
				since, warned = time.Time{}, false
				continue
			}
			if since.IsZero() {
				since = time.Now()
			}
			if !warned && time.Since(since) >= stoppedWarn {
				warned = true
				fmt.Fprintf(stderr, "baton: warning: %s has been stopped for %v, holding the lease (a command in the terminal's background that reads from it is stopped by the kernel: give it its input with < /dev/null)\n", argv[0], stoppedWarn)
			}
		case <-pollC:
			if liveInGroup(pgid) == 0 {
				return res, nil
			}
		case s := <-sigs:
			passOn(s)
		case s := <-relays:
			// To the group alone: a stopped group stays stopped, and acts
			// on it once continued.
			if err := syscall.Kill(-pgid, s.(syscall.Signal)); err != nil {
				log.Warn("could not pass a signal on to the command", "signal", s, "err", err)
			} else {
				log.Info("passed signal on to the command", "signal", s)
			}
		case <-stopped:
			stopped = nil
			if res.signaled {
				break // the signal came through sigs as well
			}
			// ctx is cancelled by the same signals as reach sigs. The
			// signal package hands a signal to its listeners one after
			// the other, and the signal context's goroutine may cancel
			// ctx before sigs has its copy: give it signalGrace. One that
			// does not come came before sigs listened: pass it on, as
			// ctx's cause names it.
			t := time.NewTimer(signalGrace)
			select {
			case s := <-sigs:
				passOn(s)
			case <-t.C:
				passOn(causeSignal(ctx))
			}
			t.Stop()
		case <-done:
			done = nil
			if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
				continue
			}
			if group.killStopped() {
				killedStopped(lease.Err(), "")
				continue
			}
			if leader == nil {
				// The command had ended by itself; what is left of its
				// group has had SIGTERM, and SIGKILL comes after the
				// grace. It ran to its end: the loss is the caller's to
				// report as found when it exited (lostLate), not a reason
				// to run it again (elect).
				fmt.Fprintf(stderr, "baton: %v; %s of %s still running after it exited\n", lease.Err(), processes(liveInGroup(pgid)), argv[0])
				continue
			}
			res.lost = lease.Err()
			termed = true
			if err := group.signal(syscall.SIGTERM); err != nil {
				killedStopped(err, "") // stopped since the loss
				continue
			}
			killLater()
			fmt.Fprintf(stderr, "baton: %v: sent SIGTERM to %s (SIGKILL in %v)\n", res.lost, argv[0], grace)
		case <-killed:
			stuck = time.After(killStuck)
		case <-stuck:
			res.left = liveInGroup(pgid)
			fmt.Fprintf(stderr, "baton: warning: %s of %s still alive %v after SIGKILL (another user's, or stuck in the kernel?); not waiting for them any longer\n", processes(res.left), argv[0], killStuck)
			if leader != nil { // the main process has not ended either
				res.code, res.status = 128+int(syscall.SIGKILL), fmt.Sprintf("not ended %v after SIGKILL", killStuck)
			}
			return res, nil
		}
	}
}

// jobControl stops the command's group, then baton, on a job-control stop
// signal, and continues the group with baton while the lease holds. It
// runs in a goroutine of its own, which never writes: under `stty
// tostop`, a write of baton's to the terminal while in the background
// raises SIGTTOU, and the kernel restarts the write until baton stops; a
// loop blocked in that write could not read the signal, and its SIGKILL
// would never come while the command ran on without a lease. Every
// signal to the group goes through its lock, so that a group it stopped
// is not continued by a signal passed on meanwhile.
type jobControl struct {
	pgid  int
	lease *baton.Lease

	mu     sync.Mutex
	paused bool // the group was stopped with baton
	ended  bool // supervise returned: the group's id may be another's
}

// end makes kill a no-op: supervise returned, so the group is empty (or
// was sent SIGKILL), and its id may be reused by another group.
func (j *jobControl) end() {
	j.mu.Lock()
	j.ended = true
	j.mu.Unlock()
}

// run handles the signals of jobs until quit closes.
func (j *jobControl) run(jobs <-chan os.Signal, quit <-chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case s := <-jobs:
			j.mu.Lock()
			if s != syscall.SIGCONT {
				j.paused = true
				_ = syscall.Kill(-j.pgid, syscall.SIGSTOP)
				// Still locked: a signal passed on between the two stops
				// would continue the group while baton stopped. The
				// process stops whole; continued, it unlocks.
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				j.mu.Unlock()
				continue
			}
			// Continued: so is the command, unless its lease may have
			// ended meanwhile; then the loss (the keeper's timer fires as
			// soon as baton runs again) kills it, still stopped.
			if j.paused && leaseErr(j.lease) == nil {
				j.paused = false
				_ = syscall.Kill(-j.pgid, syscall.SIGCONT)
			}
			j.mu.Unlock()
		}
	}
}

// signal sends sig to the group, and SIGCONT so that a stopped group acts
// on it, unless the group was stopped with baton and its lease has ended
// since: then it kills the group, still stopped, and returns the loss.
func (j *jobControl) signal(sig syscall.Signal) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := leaseErr(j.lease); j.paused && err != nil {
		_ = syscall.Kill(-j.pgid, syscall.SIGKILL)
		j.paused = false // killed: reported once
		return err
	}
	j.paused = false
	stop(j.pgid, sig)
	return nil
}

// kill sends SIGKILL to the group, unless supervise returned (see end).
func (j *jobControl) kill() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.ended {
		_ = syscall.Kill(-j.pgid, syscall.SIGKILL)
	}
}

// killStopped kills the group if it was stopped with baton, and reports
// whether it was.
func (j *jobControl) killStopped() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	was := j.paused
	if was {
		_ = syscall.Kill(-j.pgid, syscall.SIGKILL)
		j.paused = false // killed: reported once
	}
	return was
}

// signalGrace is how long supervise waits, once its context was
// cancelled by a stop signal, for the same signal to reach its own
// channel: the signal package sends it to each listener in turn.
const signalGrace = 100 * time.Millisecond

// causeSignal is the signal that cancelled ctx, as signalContext's cause
// names it; SIGTERM when ctx ended otherwise.
func causeSignal(ctx context.Context) syscall.Signal {
	var sc signalCause
	if errors.As(context.Cause(ctx), &sc) {
		if s, ok := sc.sig.(syscall.Signal); ok {
			return s
		}
	}
	return syscall.SIGTERM
}

// leaseErr is lease's loss, counting a local deadline passed that the
// backend's timer has not reported yet (a *baton.LostError, as the
// backend's would be, without the token, which a Lease does not tell);
// nil while the lease holds (after a release, ErrReleased).
func leaseErr(lease *baton.Lease) error {
	if err := lease.Err(); err != nil {
		return err
	}
	if d := lease.Deadline(); !time.Now().Before(d) {
		return &baton.LostError{Name: lease.Name(), Cause: fmt.Errorf("%w: its local deadline (%s) passed", baton.ErrLeaseLost, d.Format(time.StampMilli))}
	}
	return nil
}

// stop sends sig, which ends a process unless it handles it, to the process
// group pgid, then SIGCONT, as shells do: a stopped process (SIGTSTP, or
// SIGTTIN when it read the terminal from its background group) acts on
// sig only once continued.
func stop(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
}

// liveInGroup counts the processes of process group pgid that are not
// zombies, from /proc. It reaps nothing: baton may run in a process
// (its tests) whose other children are not its to wait for. When /proc
// shows none, it asks the kernel: processes that baton may neither see
// nor signal (another user's, with /proc mounted hidepid=2) count as one.
func liveInGroup(pgid int) int {
	n := 0
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if pg, state, ok := proc.Stat(pid); ok && pg == pgid && state != 'Z' && state != 'X' {
				n++
			}
		}
	}
	if n == 0 && unseenInGroup(pgid) {
		return 1
	}
	return n
}

// unseenInGroup reports whether process group pgid has a process that
// baton may not signal, and none that it may: kill(-pgid, 0) says EPERM
// only then (ESRCH for an empty group, success when one could be
// signalled).
func unseenInGroup(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.EPERM)
}

func processes(n int) string {
	if n == 1 {
		return "1 process"
	}
	return strconv.Itoa(n) + " processes"
}

// leaseVars are the variables commandEnv sets, each only where the backend
// gives it a value.
var leaseVars = []string{"BATON_LOCK", "BATON_HOLDER", "BATON_TOKEN", "ETCD_LOCK_KEY", "ETCD_LOCK_REV"}

// commandEnv is the environment of a command run under a lease: baton's
// own, without any of leaseVars it inherited (from an outer baton run, whose
// token is not this lease's), and with those of this lease.
func commandEnv(backend, name string, lease *baton.Lease, token baton.Token, fenced bool) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(leaseVars, k)
	})
	env = append(env, "BATON_LOCK="+name, "BATON_HOLDER="+lease.Holder())
	if fenced {
		env = append(env, "BATON_TOKEN="+strconv.FormatInt(int64(token), 10))
	}
	if u, err := baton.ParseURL(backend); err == nil && u.Scheme == "etcd" {
		env = append(env, "ETCD_LOCK_KEY="+lease.Key(), "ETCD_LOCK_REV="+strconv.FormatInt(int64(token), 10))
	}
	return env
}

func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func status(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return "exit " + strconv.Itoa(ps.ExitCode())
}
