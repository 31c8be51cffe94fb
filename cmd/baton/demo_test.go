package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/examples/warehouse"
	"github.com/baton-go/baton/internal/demo"
)

// TestDemo_Interrupted: Ctrl-C during the demo exits 130, as for the other
// commands, and leaves no runner and no temp dir behind. It exited 1.
func TestDemo_Interrupted(t *testing.T) {
	tmp := t.TempDir()
	cmd := batonCmd("demo")
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	p := startCmd(t, cmd)
	// Interrupt in night 1, once runner 1 holds the lock.
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(p.stdout.String(), "holds the lock") },
		func() string { return "the demo did not start: " + p.stderr.String() })
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGINT)
	r := p.wait(t)
	if r.code != exitInterrupted {
		t.Fatalf("demo after SIGINT: exit %d, stderr %q; want %d", r.code, r.stderr, exitInterrupted)
	}
	oneLine(t, r)
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in TMPDIR: %s", e.Name())
	}
	// The runners, in process groups of their own, name their ledger in
	// TMPDIR on their command lines: none may be left.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), tmp) {
			t.Errorf("left running: %s (%s)", f, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// TestDemo_SummaryFromResults: the demo's conclusion comes from what the
// nights measured: a stale write through the fence fails the demo (it
// printed "the fence stops the woken runner writing anything at all"
// whatever happened), and an unfenced night that showed no failure says so.
func TestDemo_SummaryFromResults(t *testing.T) {
	rejected := &warehouse.Event{Kind: "rejected", Client: 4, Token: 6, Newest: 7}
	var out strings.Builder
	if err := printSummary(&out, &demo.Result{StaleWrites: []int{4, 5}}, &demo.Result{StaleWrites: []int{4}}); err == nil || !strings.Contains(err.Error(), "bug") {
		t.Errorf("a stale write through the fence: err %v, want the demo to fail", err)
	}
	out.Reset()
	if err := printSummary(&out, &demo.Result{StaleWrites: []int{4, 5}}, &demo.Result{Rejected: rejected}); err != nil || !strings.Contains(out.String(), "billed 2 clients") || !strings.Contains(out.String(), "refused") {
		t.Errorf("the guide's night: err %v, output %q", err, out.String())
	}
	out.Reset()
	if err := printSummary(&out, &demo.Result{}, &demo.Result{Rejected: rejected}); err != nil || !strings.Contains(out.String(), "run it again") {
		t.Errorf("an unfenced night without a stale write: err %v, output %q", err, out.String())
	}
}
