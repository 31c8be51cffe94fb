package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"
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

// heldNight is a fenced night that went as the fence promises: runner 1
// (token 6) billed clients 1 to 3, froze, and its write of client 4 on
// waking was refused; runner 2 (token 7) billed the rest.
func heldNight() *demo.Result {
	rejected := &warehouse.Event{Kind: "rejected", Runner: "runner-1", Client: 4, Token: 6, Newest: 7}
	r := &demo.Result{Token1: 6, Token2: 7, FirstWake: rejected, Rejected: rejected, Duplicates: []int{1, 2, 3},
		Billed: map[int]baton.Token{}, Runner1Exit: 1, FreezeAfter: 3, Clients: 10}
	for c := 1; c <= 10; c++ {
		r.Billed[c] = 7
		if c <= 3 {
			r.Billed[c] = 6
		}
	}
	return r
}

// TestDemo_SummaryFromResults: the demo's conclusion comes from what the
// nights measured, the fenced night's database included: a stale write
// through the fence fails the demo (it printed "the fence stops the woken
// runner writing anything at all" whatever happened), and so do a stale
// write that reached the database and was turned away only by the primary
// key, a night whose woken runner was never refused, and a ledger with
// the wrong token for a client (it looked at the runners' own reports of
// what they billed); an unfenced night that showed no failure says so.
func TestDemo_SummaryFromResults(t *testing.T) {
	unfenced := &demo.Result{StaleWrites: []int{4, 5}, FirstWake: &warehouse.Event{Kind: "billed", Client: 4}, Token1: 2}
	var out strings.Builder
	if err := printSummary(&out, unfenced, heldNight()); err != nil || !strings.Contains(out.String(), "billed 2 clients") || !strings.Contains(out.String(), "refused") {
		t.Errorf("the guide's night: err %v, output %q", err, out.String())
	}
	for name, spoil := range map[string]func(*demo.Result){
		"billed through the fence":  func(r *demo.Result) { r.StaleWrites = []int{4} },
		"reached the database":      func(r *demo.Result) { r.StaleSkipped = []int{5} },
		"never refused":             func(r *demo.Result) { r.FirstWake, r.Rejected = nil, nil },
		"first write not refused":   func(r *demo.Result) { r.FirstWake = &warehouse.Event{Kind: "skipped", Client: 4} },
		"ledger has the old token":  func(r *demo.Result) { r.Billed[8] = 6 },
		"ledger misses a client":    func(r *demo.Result) { delete(r.Billed, 10) },
		"tokens did not grow":       func(r *demo.Result) { r.Token2 = 6 },
		"refused for another token": func(r *demo.Result) { r.FirstWake = &warehouse.Event{Kind: "rejected", Client: 4, Token: 6, Newest: 9} },
		"loss not seen":             func(r *demo.Result) { r.Runner1Exit = 0 },
	} {
		fenced := heldNight()
		spoil(fenced)
		out.Reset()
		err := printSummary(&out, unfenced, fenced)
		if err == nil || !strings.Contains(err.Error(), "bug") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err %v, want the demo to fail with one line", name, err)
		}
	}
	out.Reset()
	if err := printSummary(&out, &demo.Result{}, heldNight()); err != nil || !strings.Contains(out.String(), "run it again") {
		t.Errorf("an unfenced night without a stale write: err %v, output %q", err, out.String())
	}
}
