package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/proc"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestElect_KillLeader runs the guide's election on every backend: three
// `baton elect` processes contend, the leader is killed with SIGKILL, and
// a new leader takes office within about one TTL (bounded at 2 TTL, see
// below), with a higher token on the fenced backends; an observer
// (`baton elect --observe --json`) sees every leader in order.
func TestElect_KillLeader(t *testing.T) {
	const ttl = 2 * time.Second
	backends := map[string]func(t *testing.T) string{
		"etcd":     etcdBackend,
		"zk":       func(t *testing.T) string { return "zk://" + zkSrv.Addr(t) + "/baton-elect" },
		"postgres": func(t *testing.T) string { return pg.Database(t) },
		"redis":    func(t *testing.T) string { return "redis://" + testsvc.StartRedis(t).Addr },
	}
	for name, backend := range backends {
		t.Run(name, func(t *testing.T) {
			be := backend(t)
			fenced := name != "redis"
			obs := startBaton(t, "elect", "--observe", "--json", "--backend", be, "scheduler")
			seen := observed(obs)

			electors := map[string]*execResult{}
			for i := range 3 {
				id := fmt.Sprintf("%s-%d", name, i)
				// The command prints the token it runs under and its pid,
				// then waits; exec, so baton's parent-death signal
				// reaches the sleep.
				electors[id] = startBaton(t, "elect", "--backend", be, "--ttl", ttl.String(), "--grace", "1s", "--id", id, "scheduler", "--",
					"sh", "-c", `echo "$BATON_HOLDER ${BATON_TOKEN:-0} $$"; exec sleep 600`)
			}
			var order []string // the leaders, in office order
			// leader waits for an elector not yet in order to run its
			// command, and returns its id, token and command's pid.
			leader := func() (string, int64, int) {
				t.Helper()
				var id string
				var tok int64
				var pid int
				waitFor(t, 20*time.Second, func() bool {
					for eid, p := range electors {
						for _, line := range strings.Split(strings.TrimSpace(p.stdout.String()), "\n") {
							var got string
							var gt int64
							var gp int
							if n, _ := fmt.Sscanf(line, "%s %d %d", &got, &gt, &gp); n == 3 && got == eid && !slices.Contains(order, eid) {
								id, tok, pid = eid, gt, gp
								return true
							}
						}
					}
					return false
				}, func() string { return "no new leader ran its command" })
				order = append(order, id)
				return id, tok, pid
			}

			first, tok1, pid1 := leader()
			t.Cleanup(func() { _ = syscall.Kill(pid1, syscall.SIGKILL) })
			if err := syscall.Kill(-electors[first].cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			delete(electors, first)
			// The killed leader's command dies with it (the parent-death
			// signal), before the next leader's may start.
			waitFor(t, 10*time.Second, func() bool {
				_, state, ok := proc.Stat(pid1)
				return !ok || state == 'Z'
			}, func() string {
				return fmt.Sprintf("the killed leader %s's command (pid %d) is still running", first, pid1)
			})
			second, tok2, _ := leader()
			took := time.Since(killed)
			t.Logf("%s killed; %s led %v later (TTL %v)", first, second, took.Round(time.Millisecond), ttl)
			// The lock is freed at most one TTL after the server last
			// had a renewal, which came before the kill; then the server
			// must find the lease expired (etcd checks every 500ms,
			// ZooKeeper at its tick), the next in line hear of it, and
			// its elect start sh, all on a loaded machine. TTL + 1s left
			// less than half a second for that; 2 TTL leaves a second
			// more, and still tells a takeover that follows the lease's
			// end from one that waits a second TTL or a timeout of its
			// own.
			if took > 2*ttl {
				t.Errorf("new leader after %v, want within 2 TTL", took)
			}
			if fenced && tok2 <= tok1 {
				t.Errorf("leader %s token %d after %s's %d", second, tok2, first, tok1)
			}

			// The observer saw the leaders in order.
			waitFor(t, 20*time.Second, func() bool { return len(leadersOf(seen())) >= len(order) }, func() string { return fmt.Sprint(seen()) })
			if got := leadersOf(seen()); strings.Join(got[:len(order)], ",") != strings.Join(order, ",") {
				t.Fatalf("observer saw %v, want %v", got, order)
			}
		})
	}
}

// observed collects the terms an observer process prints, one JSON object
// per line.
func observed(p *execResult) func() []termJSON {
	return func() []termJSON {
		var out []termJSON
		sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
		for sc.Scan() {
			var tm termJSON
			if json.Unmarshal(sc.Bytes(), &tm) == nil {
				out = append(out, tm)
			}
		}
		return out
	}
}

// leadersOf lists the leaders of the terms, skipping the empty ones.
func leadersOf(terms []termJSON) []string {
	var out []string
	for _, tm := range terms {
		if tm.Leader != "" {
			out = append(out, tm.Leader)
		}
	}
	return out
}

// TestElect_ServerFrozen freezes the etcd server (Debian's binary) past the
// TTL while one replica leads and another stands by, so that both sessions
// run out: the leader stops its command and campaigns again, and so does
// the standby, whose campaign lost its session (it exited 76 before, and
// an outage quietly left fewer replicas to take over). Once the server is
// thawed, one of the two leads a new term, and neither has exited.
func TestElect_ServerFrozen(t *testing.T) {
	srv := testsvc.StartEtcdBinary(t)
	backend := "etcd://" + strings.TrimPrefix(srv.Endpoint, "http://")
	terms := filepath.Join(t.TempDir(), "terms")
	script := fmt.Sprintf(`echo "$BATON_HOLDER" >> %s; trap 'exit 0' TERM; sleep 600 & wait`, terms)
	elector := func(id string) *execResult {
		return startBaton(t, "elect", "--backend", backend, "--ttl", "2s", "--grace", "2s", "--id", id, "mailer", "--", "sh", "-c", script)
	}
	termsSoFar := func() []string {
		b, _ := os.ReadFile(terms)
		return strings.Fields(string(b))
	}
	a := elector("a")
	waitFor(t, 30*time.Second, func() bool { return slices.Equal(termsSoFar(), []string{"a"}) }, func() string { return a.stderr.String() })
	b := elector("b")
	waitFor(t, 30*time.Second, func() bool { return waiters(t, backend, "mailer") == 1 }, func() string { return "b does not stand by: " + b.stderr.String() })

	srv.Pause(t)
	waitFor(t, 30*time.Second, func() bool {
		_, aDone := a.exited()
		_, bDone := b.exited()
		return strings.Contains(a.stderr.String(), "leadership of mailer lost") && strings.Contains(b.stderr.String(), "campaign for mailer failed") || aDone || bDone
	}, func() string { return "a: " + a.stderr.String() + "\nb: " + b.stderr.String() })
	srv.Resume()
	for id, p := range map[string]*execResult{"a": a, "b": b} {
		if code, done := p.exited(); done {
			t.Fatalf("%s exited %d while the server was frozen; stderr %q", id, code, p.stderr.String())
		}
	}
	waitFor(t, 30*time.Second, func() bool { return len(termsSoFar()) == 2 }, func() string { return "no new term: a: " + a.stderr.String() + "\nb: " + b.stderr.String() })
	for id, p := range map[string]*execResult{"a": a, "b": b} {
		if code, done := p.exited(); done {
			t.Fatalf("%s exited %d after the server was thawed; stderr %q", id, code, p.stderr.String())
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t)
	}
	t.Logf("terms: %v", termsSoFar())
}
