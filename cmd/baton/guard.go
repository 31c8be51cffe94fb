package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
)

// guardEnv, set to a process group's id, starts baton as the guard of that
// group (see startGuard) instead of as the CLI, when its argv[0] is
// guardName too (a variable left in a user's environment starts no guard).
const guardEnv = "BATON_INTERNAL_GUARD_PGID"

// guardName is the guard's argv[0] and its name in ps and pkill.
const guardName = "baton-guard"

// guardOf returns the group id a guard started by startGuard is given, and
// whether this process is one.
func guardOf() (string, bool) {
	pgid := os.Getenv(guardEnv)
	return pgid, pgid != "" && len(os.Args) > 0 && os.Args[0] == guardName
}

// startGuard starts a guard for the command's process group pgid: a copy
// of this binary, in a process group of its own, that waits on a pipe
// from baton. The kernel kills only a dying process's direct children
// with their parent-death signal, so when baton dies without a say
// (SIGKILL, the OOM killer), the command's main process goes with it but
// what it started would run on without a lease; the pipe's end then
// reads as closed, and the guard kills the whole group. release tells
// the guard that baton is done with the group, and waits for it to exit.
func startGuard(pgid int) (release func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	g := exec.Command("/proc/self/exe")
	g.Args = []string{guardName}
	g.Env = append(os.Environ(), guardEnv+"="+strconv.Itoa(pgid))
	g.Stdin = r
	// Its own group: neither baton's signals to the command's group nor the
	// terminal's to baton's reach it.
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = g.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("start the guard of the command's process group: %w", err)
	}
	return func() {
		_, _ = w.Write([]byte{1})
		_ = w.Close()
		_ = g.Wait()
	}, nil
}

// runGuard is the guard's main (see startGuard): it waits for a byte from
// baton, which says baton is done with the group, or the pipe's end, which
// says baton died; then it kills the group. It ignores the stop signals a
// user may send it by hand.
func runGuard(pgid string) int {
	id, err := strconv.Atoi(pgid)
	if err != nil || id <= 1 {
		fmt.Fprintf(os.Stderr, "baton: %s=%q: not a process group id\n", guardEnv, pgid)
		return exitUsage
	}
	// Named for ps and pkill, which would see "exe".
	_ = os.WriteFile("/proc/self/comm", []byte(guardName), 0)
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	var b [1]byte
	if n, _ := os.Stdin.Read(b[:]); n == 1 {
		return 0
	}
	_ = syscall.Kill(-id, syscall.SIGKILL)
	return 0
}
