package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/benchcycle"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/postgres"
)

// silent drops go-zookeeper's log lines.
type silent struct{}

func (silent) Printf(string, ...any) {}

// BenchmarkPostgresVsZooKeeper measures baton's PostgreSQL lock against
// ZooKeeper's lock recipe (go-zookeeper's zk.Lock), 8 contenders each, on
// servers on this machine: the bar we set the PostgreSQL lock is to do at
// least what ZooKeeper's recipe does under contention. The two alternate
// in rounds of 64 cycles (benchcycle.Alternate), so that a slow spell of
// the machine (a neighbour on a shared VM, the ZooKeeper JVM compiling)
// falls on both alike, after a warm-up of both, which lets the JVM compile
// its hot paths first. It reports each one's cycles per second over all
// rounds, and their ratio (pg/zk; 1 or more meets the bar).
func BenchmarkPostgresVsZooKeeper(b *testing.B) {
	var pg testsvc.Postgres
	b.Cleanup(pg.Stop)
	var zks testsvc.ZooKeeper
	b.Cleanup(zks.Stop)
	dsn, zkAddr := pg.Database(b), zks.Addr(b)

	const contenders = 8
	pcs := make([]benchcycle.Cycler, contenders)
	zcs := make([]benchcycle.Cycler, contenders)
	for i := range contenders {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		fl, err := postgres.Dial(ctx, dsn, baton.WithTTL(10*time.Second), baton.WithHolder("bench-"+strconv.Itoa(i)))
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = fl.Close() })
		pcs[i] = benchcycle.Baton(fl.Acquire)

		conn, events, err := zkgo.Connect([]string{zkAddr}, 10*time.Second, zkgo.WithLogger(silent{}))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			conn.Close()
			for range events { // until go-zookeeper's loop has ended
			}
		})
		zcs[i] = benchcycle.ZKLock(conn, "/bench-zklock/bench")
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		benchcycle.Run(b, zcs, 256)
		benchcycle.Run(b, pcs, 256)
	}

	tp, tz, n := benchcycle.Alternate(b, pcs, zcs, 64)
	b.ReportMetric(float64(n)/tp.Seconds(), "pg-cycles/s")
	b.ReportMetric(float64(n)/tz.Seconds(), "zk.Lock-cycles/s")
	b.ReportMetric(float64(tz)/float64(tp), "pg/zk")
}
