package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// guardEnv, set to "1", starts baton as a guard (see startGuard) instead
// of as the CLI, when its argv[0] is guardName too (a variable left in a
// user's environment starts no guard).
const guardEnv = "BATON_INTERNAL_GUARD"

// guardName is the guard's argv[0] and its name in ps and pkill.
const guardName = "baton-guard"

// isGuard reports whether this process is a guard startGuard started.
func isGuard() bool {
	return os.Getenv(guardEnv) == "1" && len(os.Args) > 0 && os.Args[0] == guardName
}

// guard is the guard of one command's process group (see startGuard).
type guard struct {
	w *os.File
	p *exec.Cmd
}

// startGuard starts a guard for a command's process group: a copy of this
// binary, in a process group of its own, that waits on a pipe from baton.
// The kernel kills only a dying process's direct children with their
// parent-death signal, so when baton dies without a say (SIGKILL, the OOM
// killer), the command's main process goes with it, but what it started
// would run on without a lease; the pipe's end then reads as closed, and
// the guard kills the whole group. It is started before the command, whose
// group's id guard.watch then sends, so that it is there from the
// command's start; release tells it that baton is done with the group.
func startGuard() (*guard, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start the guard of the command's process group: %w", err)
	}
	p := exec.Command("/proc/self/exe")
	p.Args = []string{guardName}
	p.Env = append(os.Environ(), guardEnv+"=1")
	p.Stdin = r
	// Its own group: neither baton's signals to the command's group nor the
	// terminal's to baton's reach it.
	p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = p.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("start the guard of the command's process group: %w", err)
	}
	return &guard{w: w, p: p}, nil
}

// watch hands the guard the command's group, pgid.
func (g *guard) watch(pgid int) {
	_, _ = fmt.Fprintf(g.w, "%d\n", pgid)
}

// release tells the guard that baton is done with the group (or that no
// command started), and waits for it to exit.
func (g *guard) release() {
	_, _ = g.w.Write([]byte{'.'})
	_ = g.w.Close()
	_ = g.p.Wait()
}

// runGuard is the guard's main (see startGuard): it reads the group's id
// from baton, then waits for baton's word that it is done with the group,
// or for the pipe's end, which says baton died, and then kills the group.
// It ignores the stop signals a user may send it by hand.
func runGuard() int {
	// Named for ps and pkill, which would see "exe".
	_ = os.WriteFile("/proc/self/comm", []byte(guardName), 0)
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return 0 // baton is done (or died) before any command started
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pgid <= 1 {
		fmt.Fprintf(os.Stderr, "baton: guard given %q: not a process group id\n", line)
		return exitUsage
	}
	if _, err := in.ReadByte(); err == nil {
		return 0
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return 0
}
