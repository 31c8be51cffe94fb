package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testsvc"
)

// TestElect_KillLeader runs the guide's election on every backend: three
// `baton elect` processes contend, the leader is killed with SIGKILL, and
// a new leader takes office within TTL + 1s, with a higher token on the
// fenced backends; an observer (`baton elect --observe --json`) sees every
// leader in order.
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
				// The command prints the token it runs under, then waits;
				// exec, so baton's parent-death signal reaches the sleep.
				electors[id] = startBaton(t, "elect", "--backend", be, "--ttl", ttl.String(), "--grace", "1s", "--id", id, "scheduler", "--",
					"sh", "-c", `echo "$BATON_HOLDER ${BATON_TOKEN:-0}"; exec sleep 600`)
			}
			var order []string // the leaders, in office order
			// leader waits for an elector not yet in order to run its
			// command, and returns its id and token.
			leader := func() (string, int64) {
				t.Helper()
				var id string
				var tok int64
				waitFor(t, 20*time.Second, func() bool {
					for eid, p := range electors {
						for _, line := range strings.Split(strings.TrimSpace(p.stdout.String()), "\n") {
							var got string
							var gt int64
							if n, _ := fmt.Sscanf(line, "%s %d", &got, &gt); n == 2 && got == eid && !slices.Contains(order, eid) {
								id, tok = eid, gt
								return true
							}
						}
					}
					return false
				}, func() string { return "no new leader ran its command" })
				order = append(order, id)
				return id, tok
			}

			first, tok1 := leader()
			if err := syscall.Kill(-electors[first].cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			delete(electors, first)
			second, tok2 := leader()
			took := time.Since(killed)
			t.Logf("%s killed; %s led %v later (TTL %v)", first, second, took.Round(time.Millisecond), ttl)
			if took > ttl+time.Second {
				t.Errorf("new leader after %v, want within TTL + 1s", took)
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
