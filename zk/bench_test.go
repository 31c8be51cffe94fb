package zk_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/benchcycle"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/zk"
)

// newCyclers builds n contenders of one kind, each with its own connection
// and session, as n processes would have.
func newCyclers(b testing.TB, addr, kind string, n int) []benchcycle.Cycler {
	b.Helper()
	out := make([]benchcycle.Cycler, n)
	for i := range out {
		switch kind {
		case "baton":
			fl := dial(b, []string{addr}, zk.Settings{}, baton.WithTTL(10*time.Second), baton.WithPrefix("/bench-baton"))
			out[i] = benchcycle.Baton(fl.Acquire)
		case "zk.Lock":
			conn := adminConn(b, addr)
			out[i] = benchcycle.ZKLock(conn, "/bench-zklock/bench")
		}
	}
	// Warm up: the first cycle creates the parents and the session.
	benchcycle.Warm(b, out[:1]...)
	return out
}

// warm runs both recipes for a while, once per test binary, so that the
// server's JIT has compiled its request path before anything is measured:
// -count runs each sub-benchmark back to back, and the first would
// otherwise pay for the cold JVM.
var warm sync.Once

func warmUp(b testing.TB, addr string) {
	warm.Do(func() {
		ctx := context.Background()
		end := time.Now().Add(3 * time.Second)
		for _, kind := range []string{"baton", "zk.Lock"} {
			cs := newCyclers(b, addr, kind, 2)
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) {
						if c.Lock(ctx) != nil || c.Unlock(ctx) != nil {
							b.Error("warm-up cycle failed")
							return
						}
					}
				}()
			}
			wg.Wait()
			end = time.Now().Add(3 * time.Second)
		}
	})
}

// BenchmarkCycle measures one uncontended acquire + release, against
// zk.Lock on the same server, in the same run. Compare with
//
//	go test -run '^$' -bench . -count 5 ./zk/ > bench.txt
//	go run golang.org/x/perf/cmd/benchstat@latest -col /lib bench.txt
//
// -count repeats each sub-benchmark back to back; on a machine shared with
// other work, run go test five times with -count 1 instead, so the two
// alternate.
func BenchmarkCycle(b *testing.B) {
	addr := zkServer.Addr(b)
	warmUp(b, addr)
	for _, kind := range []string{"baton", "zk.Lock"} {
		b.Run("lib="+kind, func(b *testing.B) {
			benchcycle.Cycle(b, newCyclers(b, addr, kind, 1)[0])
		})
	}
}

// BenchmarkContended has 8 contenders, each on its own session, loop
// lock/unlock on one name, reports lock cycles per second, and checks
// mutual exclusion as it goes.
func BenchmarkContended(b *testing.B) {
	addr := zkServer.Addr(b)
	warmUp(b, addr)
	const contenders = 8
	for _, kind := range []string{"baton", "zk.Lock"} {
		b.Run(fmt.Sprintf("clients=%d/lib=%s", contenders, kind), func(b *testing.B) {
			r := benchcycle.Contend(b, newCyclers(b, addr, kind, contenders))
			benchcycle.ReportCycles(b, r)
		})
	}
}

// BenchmarkPaired alternates baton and zk.Lock in short rounds within one
// loop, so that both see the same machine, and reports each one's figure
// and baton's speed relative to zk.Lock (above 1: baton is faster). On a
// machine shared with other work, whose load swings within seconds, these
// ratios are steadier than those of the separate sub-benchmarks above.
// Each round checks mutual exclusion as BenchmarkContended does. A round
// is 16 cycles for one client, and 256 for 8 contenders (32 each), so
// that its start (all 8 at once) and its end (the last few alone) weigh
// little: the figure is the time per hold in a steady contention, the
// inverse of the throughput.
func BenchmarkPaired(b *testing.B) {
	addr := zkServer.Addr(b)
	warmUp(b, addr)
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			per := 16
			if clients > 1 {
				per = 256
			}
			benchcycle.Paired(b, newCyclers(b, addr, "baton", clients), newCyclers(b, addr, "zk.Lock", clients), per, "baton", "zk.Lock")
		})
	}
}

// serverPackets returns how many packets the server has received and sent
// since it started (the srvr command).
func serverPackets(t testing.TB, addr string) (received, sent int) {
	t.Helper()
	out, err := testsvc.FourLetter(addr, "srvr")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Received: "); ok {
			received, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(line, "Sent: "); ok {
			sent, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return received, sent
}

// TestRecipe_RequestsPerCycle counts, on the server, the requests of a lock
// cycle: the extra safety (GUID names, the czxid, session states) must
// cost no request over zk.Lock's, neither uncontended nor with 8
// contenders. It counts requests, not time, so it holds on a busy machine.
func TestRecipe_RequestsPerCycle(t *testing.T) {
	addr := zkServer.Addr(t)
	ctx := timeout(t, time.Minute)
	perCycle := map[string]float64{}
	for _, clients := range []int{1, 8} {
		for _, kind := range []string{"baton", "zk.Lock"} {
			cs := newCyclers(t, addr, kind, clients)
			const cycles = 40
			r0, _ := serverPackets(t, addr)
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range cycles {
						if err := c.Lock(ctx); err != nil {
							t.Error(err)
							return
						}
						if err := c.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			r1, _ := serverPackets(t, addr)
			// One packet is the srvr command; pings and session
			// confirmations add a few over the run.
			perCycle[fmt.Sprintf("%s/%d", kind, clients)] = float64(r1-r0-1) / float64(cycles*clients)
		}
		b, z := perCycle[fmt.Sprintf("baton/%d", clients)], perCycle[fmt.Sprintf("zk.Lock/%d", clients)]
		t.Logf("%d client(s): requests per cycle: baton %.2f, zk.Lock %.2f", clients, b, z)
		if b > z+0.25 { // an extra request per cycle would show as +1
			t.Errorf("%d client(s): baton makes %.2f requests per cycle, zk.Lock %.2f", clients, b, z)
		}
	}
	if b := perCycle["baton/1"]; b > 2.25 {
		t.Errorf("an uncontended cycle takes %.2f requests, want 2 (create, delete: the create's answer says it is alone)", b)
	}
}
