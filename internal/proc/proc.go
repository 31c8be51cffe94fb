// Package proc reads what Linux's /proc says of a process: its process
// group and its state, for job control (baton run, elect) and for the demo,
// which must know a runner is stopped before it goes on.
package proc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Stat reads the process group and state of pid from /proc/PID/stat; ok
// is false when pid is gone or the file cannot be read.
func Stat(pid int) (pgrp int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return pgrp, f[0][0], true
}

// Stopped reports whether pid is stopped by a signal (state T). The
// kernel stops a process when it next comes to run, so a SIGSTOP sent is
// not yet a process stopped.
func Stopped(pid int) bool {
	_, state, ok := Stat(pid)
	return ok && state == 'T'
}
