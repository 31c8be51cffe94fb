package proc_test

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/proc"
)

// TestStat reads this process's own group and state.
func TestStat(t *testing.T) {
	pg, state, ok := proc.Stat(os.Getpid())
	if !ok || pg != syscall.Getpgrp() || state == 'Z' {
		t.Fatalf("Stat(self) = %d %c %v; want group %d, not a zombie", pg, state, ok, syscall.Getpgrp())
	}
	if _, _, ok := proc.Stat(1 << 30); ok {
		t.Fatal("Stat of a pid that cannot exist succeeded")
	}
}

// TestStopped: a child is not stopped until SIGSTOP, and is once the
// kernel has stopped it.
func TestStopped(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if proc.Stopped(cmd.Process.Pid) {
		t.Fatal("a running child reads as stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !proc.Stopped(cmd.Process.Pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("child not stopped 10s after SIGSTOP")
		}
	}
}
