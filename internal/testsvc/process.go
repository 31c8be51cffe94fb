package testsvc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What every server process shares.
const (
	portTries    = 3  // ports tried when one is taken
	logTailLines = 15 // log lines quoted when a server does not start
)

// errPortTaken marks a start-up that failed because another process bound
// the server's port first.
var errPortTaken = errors.New("port taken")

// process is one server process started by this package: its output goes
// to a log file, it is waited for as soon as it starts (exited closes
// then), and it can be stopped, killed, paused and resumed. Each method is
// safe to call more than once and after the process exited.
type process struct {
	what    string // names it in errors: "redis-server on port 6379"
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed when cmd.Wait returned
	group   bool          // signals go to its process group

	mu     sync.Mutex
	paused bool
}

// startProcess starts cmd with its output to a new log file at logPath.
// Unless the caller set cmd.SysProcAttr, the process gets its own process
// group, so that a signal meant for the test binary's group does not reach
// it, and dies with the test binary (PR_SET_PDEATHSIG). Signals go to the
// whole group when the process has one of its own.
func startProcess(what string, cmd *exec.Cmd, logPath string) (*process, error) {
	bin := cmd.Path // named in errors, also when taskset runs it
	if err := pinCPUs(cmd, os.Getenv(CPUsEnv)); err != nil {
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", what, err)
	}
	defer logFile.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{what: what, cmd: cmd, logPath: logPath, exited: make(chan struct{}), group: cmd.SysProcAttr.Setpgid}
	go func() {
		_ = cmd.Wait() // the result is in cmd.ProcessState
		close(p.exited)
	}()
	return p, nil
}

// onFreePort calls start with a free loopback port and the try's number
// (from 0), and again with another port while start fails with
// errPortTaken (another process bound the port between FreePort and the
// server), up to portTries times.
func onFreePort[T any](what string, start func(port, try int) (T, error)) (T, error) {
	var zero T
	var errs []error
	for try := range portTries {
		port, err := FreePort()
		if err != nil {
			return zero, fmt.Errorf("find a free port for %s: %w", what, err)
		}
		v, err := start(port, try)
		if err == nil {
			return v, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return zero, errors.Join(errs...)
}

// waitReady calls ready every poll until it returns nil, the process exits
// or timeout passes, and says why in the error, with the log's last
// lines. A server that answers is the process's only when the process
// itself listens on port: another server that bound the port first (such
// as another test's, given the same free port a moment before) answers
// ready too, and that is errPortTaken, as is an exit whose log says an
// address is already in use, and a ready error that wraps errPortTaken. A
// port of 0 skips that look, for a server
// whose ready tells it is ours by itself (see listensOn for why one
// would). It leaves the process running on a timeout.
func (p *process) waitReady(port int, timeout, poll time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		last := ready()
		switch {
		case errors.Is(last, errPortTaken): // ready knows
			return last
		case last == nil && port == 0:
			return nil
		}
		if last == nil {
			ours, err := p.listensOn(port)
			switch {
			case ours:
				return nil
			case !p.running():
				// It answered, then exited (or it was another's server,
				// and ours exited for want of the port): its log says.
				return p.exitErr()
			case err != nil:
				return fmt.Errorf("%s: tell whose server answers port %d: %w", p.what, port, err)
			}
			return fmt.Errorf("%w: %s: port %d is answered by another process's server", errPortTaken, p.what, port)
		}
		select {
		case <-p.exited:
			return p.exitErr()
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %v (last error: %v); log %s:\n%s", p.what, timeout, last, p.logPath, p.logTail(logTailLines))
		}
	}
}

// exitErr says that the process exited during start-up, quoting its log:
// errPortTaken when the log says an address is already in use.
func (p *process) exitErr() error {
	<-p.exited
	log, _ := os.ReadFile(p.logPath)
	err := fmt.Errorf("%s exited during start-up (%v); log %s:\n%s", p.what, p.cmd.ProcessState, p.logPath, tail(log, logTailLines))
	if bytes.Contains(bytes.ToLower(log), []byte("already in use")) {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

// listensOn reports whether the process holds a socket listening on TCP
// port, from /proc: the listening sockets' inodes in /proc/net/tcp and
// tcp6, and the process's open files. Reading another user's open files
// takes CAP_SYS_PTRACE, which root in a container usually lacks: for a
// server run as another user (PostgreSQL, when the tests run as root),
// ask the server who it is instead, and pass waitReady port 0.
func (p *process) listensOn(port int) (bool, error) {
	sockets := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if errors.Is(err, fs.ErrNotExist) && table != "/proc/net/tcp" {
			continue // no IPv6
		}
		if err != nil {
			return false, err
		}
		for _, inode := range listeners(string(b), port) {
			sockets["socket:["+inode+"]"] = true
		}
	}
	if len(sockets) == 0 {
		return false, nil
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid)
	fds, err := os.ReadDir(fdDir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // it has exited (after another's server answered)
	}
	if err != nil {
		return false, err
	}
	var unread error
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		switch {
		case err == nil && sockets[target]:
			return true, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist) && unread == nil:
			unread = err // not ours to read: whether it listens is unknown
		}
	}
	return false, unread
}

// listeners returns the inodes of the sockets in a /proc/net/tcp table
// that listen on port.
func listeners(table string, port int) []string {
	const listen = "0A" // TCP_LISTEN
	var out []string
	for _, line := range strings.Split(table, "\n") {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != listen {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if n, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(n) == port {
			out = append(out, f[9])
		}
	}
	return out
}

// running reports whether the process has not exited yet.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the process, or to its group if it has its own.
func (p *process) signal(sig syscall.Signal) {
	if p.group {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
		return
	}
	_ = p.cmd.Process.Signal(sig)
}

// stop sends sig (after SIGCONT, if paused: a stopped process cannot act
// on it) and waits for the process to exit, killing it after timeout.
func (p *process) stop(sig syscall.Signal, timeout time.Duration) {
	if !p.running() {
		return
	}
	p.resume()
	p.signal(sig)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.kill()
	}
}

// kill sends SIGKILL, as a crash would, and waits for the process to exit.
func (p *process) kill() {
	if !p.running() {
		return
	}
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// pause freezes the process with SIGSTOP: its connections stay open and
// nothing is answered until resume.
func (p *process) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.signal(syscall.SIGSTOP)
		p.paused = true
	}
}

// resume thaws a paused process with SIGCONT.
func (p *process) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.signal(syscall.SIGCONT)
		p.paused = false
	}
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	return tail(b, n)
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CPUsEnv names the CPUs (a taskset list: "1", "2-3") that the servers
// started from here run on, when set: benchmarks run with the client on
// other CPUs (taskset -c 0 go test ...) then measure the client and the
// server as if on machines of their own, where on a small machine they
// would share its CPUs.
const CPUsEnv = "BATON_SERVER_CPUS"

// pinCPUs has cmd run under taskset on cpus, unless cpus is empty. The
// process keeps its pid: taskset execs the command.
func pinCPUs(cmd *exec.Cmd, cpus string) error {
	if cpus == "" {
		return nil
	}
	if strings.Trim(cpus, "0123456789,-") != "" {
		return fmt.Errorf("%s=%q: want a list of CPUs as taskset takes it, such as 1 or 2-3", CPUsEnv, cpus)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("%s is set, but taskset (Debian package util-linux) is not installed: %w", CPUsEnv, err)
	}
	cmd.Args = append([]string{taskset, "-c", cpus}, cmd.Args...)
	cmd.Path = taskset
	return nil
}
