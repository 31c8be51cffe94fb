package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton/examples/warehouse"
	"github.com/baton-go/baton/internal/demo"
	"github.com/baton-go/baton/internal/testsvc"
)

var pg testsvc.Postgres

const runnerEnv = "BATON_TEST_RUNNER_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(runnerEnv); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(demo.RunnerMain(context.Background(), a, os.Stdin, os.Stdout, os.Stderr))
	}
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runnerCommand re-executes this test binary as a runner process.
func runnerCommand(args []string) *exec.Cmd {
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runnerEnv+"="+string(b), "GORACE=atexit_sleep_ms=20")
	return cmd
}

func ledgers(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"postgres": func(t *testing.T) string { return pg.Database(t) },
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "ledger.db") },
	}
}

// frozenClient is the client runner 1 is frozen on: nightLagging sets the
// night's FreezeAfter to it - 1.
const frozenClient = 4

func night(t *testing.T, ledger string, fenced bool) *demo.Result {
	t.Helper()
	return nightLagging(t, ledger, fenced, 0)
}

// nightLagging is night with a reader that takes lag over runner 1's check
// of the client it is frozen on, as a loaded machine may.
func nightLagging(t *testing.T, ledger string, fenced bool, lag time.Duration) *demo.Result {
	t.Helper()
	srv := testsvc.StartEtcd(t)
	res, err := demo.Night(context.Background(), demo.Config{
		Etcd:        strings.TrimPrefix(srv.Endpoint, "http://"),
		Ledger:      ledger,
		Fenced:      fenced,
		TTL:         2 * time.Second,
		Clients:     10,
		Interval:    200 * time.Millisecond, // runner 2 waits at client 4 for the woken runner 1's write of it (see demo.Night)
		FreezeAfter: frozenClient - 1,
		Command:     runnerCommand,
		Log: func(e warehouse.Event) {
			t.Logf("%s %-9s %-8s client %2d token %d %s", e.At.Format("15:04:05.000"), e.Runner, e.Kind, e.Client, e.Token, e.Err)
			if e.Runner == "runner-1" && e.Kind == "checked" && e.Client == frozenClient {
				time.Sleep(lag)
			}
		},
	})
	if err != nil {
		t.Fatalf("night: %v", err)
	}
	return res
}

// TestNight_Fenced is the guide's frozen-holder experiment with real
// processes: runner 1 is frozen with SIGSTOP past its 2s lease, runner 2
// takes over with a higher token, runner 1 wakes while runner 2 bills, and
// its very next write is refused by the fence. Nobody is billed twice.
func TestNight_Fenced(t *testing.T) {
	for name, dsn := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			res := night(t, dsn(t), true)
			t.Logf("tokens %d then %d; takeover %v after the freeze; frozen %v", res.Token1, res.Token2, res.Takeover.Round(time.Millisecond), res.Frozen.Round(time.Millisecond))
			if err := res.FenceHeld(); err != nil {
				t.Errorf("the fence did not hold:\n%v", err)
			}
			// Runner 2 was queued before the freeze: the lease runs out
			// at most one TTL after it (its last renewal came before),
			// and then etcd must find it expired (it looks every 500ms)
			// and tell runner 2 by its watch. Runner 2's start and dial
			// are no longer in it: a second on top of the TTL is room for
			// those on a loaded machine, as it was before, with the start.
			if res.Takeover > 2*time.Second+time.Second {
				t.Errorf("takeover %v after the freeze; want within one TTL (2s) and a second", res.Takeover)
			}
			if res.Rejected == nil {
				t.Fatalf("runner 1's write after waking was not rejected (stale writes accepted: %v)", res.StaleWrites)
			}
			if res.Rejected.Client != frozenClient || res.Rejected.Newest != res.Token2 || res.Rejected.Token != res.Token1 {
				t.Errorf("rejected %+v; want client 4, token %d refused for newest %d", *res.Rejected, res.Token1, res.Token2)
			}
			// Runner 2 redid the clients runner 1 billed before the
			// freeze, and the primary key turned those away; runner 1's
			// stale write was refused by the fence before it got there.
			if want := []int{1, 2, 3}; !slices.Equal(res.Duplicates, want) {
				t.Errorf("second invoices turned away for clients %v, want %v", res.Duplicates, want)
			}
		})
	}
}

// TestNight_Unfenced is the control: the same night without the fence. The
// woken runner keeps billing, so the assertions of TestNight_Fenced would
// fail here; the primary key still turns away every second invoice.
func TestNight_Unfenced(t *testing.T) {
	res := night(t, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), false)
	t.Logf("stale runner 1 billed clients %v after waking", res.StaleWrites)
	if len(res.StaleWrites) == 0 {
		t.Fatal("without the fence the woken runner billed nobody; the experiment would not show what the fence prevents")
	}
	if !slices.Contains(res.StaleWrites, 4) {
		t.Errorf("stale writes %v do not start with client 4", res.StaleWrites)
	}
	if res.Rejected != nil {
		t.Errorf("a write was rejected without a fence: %+v", *res.Rejected)
	}
	// The check the demo makes of the fenced night fails here.
	if err := res.FenceHeld(); err == nil {
		t.Error("FenceHeld passed the unfenced night")
	} else {
		t.Logf("FenceHeld on the unfenced night, as it should fail:\n%v", err)
	}
	// Both runners wrote every client (runner 1 from client 4 on after
	// waking, since unfenced it does not look at its lease): one write of
	// each pair was turned away by the primary key.
	if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(res.Duplicates, want) {
		t.Errorf("second invoices turned away for clients %v, want one for each of %v", res.Duplicates, want)
	}
	for _, c := range res.StaleWrites {
		if res.Billed[c] != res.Token1 {
			t.Errorf("client %d: the ledger has token %d, want the stale runner's %d", c, res.Billed[c], res.Token1)
		}
	}
	// The job knows, at its release, that it did not finish under its
	// lease, even though nothing stopped its writes.
	if res.Runner1Exit == 0 || res.Runner2Exit != 0 {
		t.Errorf("exit codes: runner 1 %d (want non-zero: its lease was lost), runner 2 %d (want 0)", res.Runner1Exit, res.Runner2Exit)
	}
}

// TestNight_LaggingReader: the night freezes runner 1 when it reads its
// check of client 4; a reader that lags (here 4 intervals) must not let
// runner 1 write client 4 before the freeze, which the night would then
// count as written after the wake: the fenced night reported a stale
// write through the fence. Runner 1 now waits, after that check, for the
// night's line, which it can read only once woken.
func TestNight_LaggingReader(t *testing.T) {
	res := nightLagging(t, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), true, 400*time.Millisecond)
	if len(res.StaleWrites) != 0 || res.Rejected == nil || res.Rejected.Client != frozenClient {
		t.Fatalf("with a lagging reader: stale writes %v, rejected %+v; want none, and client 4 refused", res.StaleWrites, res.Rejected)
	}
}
