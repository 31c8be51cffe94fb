package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/baton-go/baton"
)

// supervised is how a supervised command ended.
type supervised struct {
	code     int   // its exit code (128+N if killed by signal N)
	lost     error // the lease's loss, if that is why it was stopped
	signaled bool  // baton got SIGINT, SIGTERM or SIGHUP and passed it on
	status   string
}

// passedOn are the signals baton handles: they end a wait for the lock
// (exit 130), and while a command runs baton passes them on to its process
// group; run's help lists them.
var passedOn = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// handled returns passedOn without the signals ignored when baton started
// (SIGHUP under nohup): those stay ignored, for baton and, as the kernel
// passes an ignored disposition on, for the command. Go keeps a signal
// ignored at start-up ignored until it is asked to notify of it, which
// baton never does, so handled gives the same answer all along.
func handled() []os.Signal {
	var out []os.Signal
	for _, s := range passedOn {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// supervise runs argv in its own process group until it exits, passing on
// the signals in passedOn, and stops it when the lease is lost: SIGTERM to
// the group at once, SIGKILL after grace.
func supervise(lease *baton.Lease, argv, env []string, grace time.Duration, stdin io.Reader, stdout, stderr io.Writer, log *slog.Logger) (supervised, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// Its own process group, so a loss can stop all of it; and the command
	// (not what it forks: the kernel signals direct children only) is killed
	// if baton itself dies, since nothing would renew the lease or stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	sigs := make(chan os.Signal, 4)
	if hs := handled(); len(hs) > 0 { // Notify with none would relay every signal
		signal.Notify(sigs, hs...)
	}
	defer signal.Stop(sigs)

	if err := cmd.Start(); err != nil {
		return supervised{}, &exitError{code: exitCannotRun, msg: fmt.Sprintf("cannot start %q: %v", argv[0], err)}
	}
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	var res supervised
	var kill <-chan time.Time
	done := lease.Done() // nil once handled: a closed channel would spin
	for {
		select {
		case <-exited:
			res.code, res.status = exitStatus(cmd.ProcessState), status(cmd.ProcessState)
			return res, nil
		case s := <-sigs:
			log.Info("passing signal on to the command", "signal", s)
			res.signaled = true
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-done:
			done = nil
			if !errors.Is(lease.Err(), baton.ErrLeaseLost) {
				continue
			}
			res.lost = lease.Err()
			fmt.Fprintf(stderr, "baton: %v: sending SIGTERM to %s (SIGKILL in %v)\n", res.lost, argv[0], grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			kill = time.After(grace)
		case <-kill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}

// commandEnv is the environment of a command run under a lease.
func commandEnv(backend, name string, lease *baton.Lease, token baton.Token, fenced bool) []string {
	env := append(os.Environ(), "BATON_LOCK="+name, "BATON_HOLDER="+lease.Holder())
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
