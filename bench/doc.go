// Package bench measures baton against the libraries a Go team would
// otherwise pick, side by side, in the same run on the same servers, where
// those libraries are not dependencies of baton itself: bsm/redislock for
// the single-node Redis lock and go-redsync/redsync for Redlock. It is a
// module of its own, so that baton's go.mod carries neither.
//
// The peers baton depends on anyway (etcd's concurrency.Mutex,
// go-zookeeper's zk.Lock, PostgreSQL's pg_advisory_lock) are benchmarked
// in the backends' own packages; here, too, is one that needs two
// servers: baton's PostgreSQL lock against ZooKeeper's recipe (zk.Lock),
// under contention, the bar we set the PostgreSQL lock. Run with (make
// bench runs them all):
//
//	cd bench && BATON_REQUIRE_SERVICES=1 go test -run '^$' -bench 'RedisCycle|RedisContended$' -benchtime 3000x -count 5 .
//	cd bench && BATON_REQUIRE_SERVICES=1 go test -run '^$' -bench 'RedisPaired$' -benchtime 400x -count 10 .
//	cd bench && BATON_REQUIRE_SERVICES=1 go test -run '^$' -bench RedisFloor -benchtime 400x -count 6 .
//	cd bench && BATON_REQUIRE_SERVICES=1 go test -run '^$' -bench RedisPairedLatency -benchtime 64x -count 4 .
//	cd bench && BATON_REQUIRE_SERVICES=1 go test -run '^$' -bench 'RedlockContended$' -benchtime 1000x -count 5 .
//	cd bench && BATON_REQUIRE_SERVICES=1 go test -run '^$' -bench ContendedLatency -benchtime 1000x -count 3 .
//	cd bench && BATON_REQUIRE_SERVICES=1 go test -run '^$' -bench RedlockPaired -benchtime 100x -count 10 .
//	cd bench && BATON_REQUIRE_SERVICES=1 go test -run '^$' -bench PostgresVsZooKeeper -benchtime 40x -count 5 .
//
// Every benchmark here checks mutual exclusion as it runs. The Redis and
// Redlock contended ones report throughput, the handoff latency (a release
// to the next holder's acquisition, when the next holder is another
// client), how often the releasing client took the lock straight back, the
// median and longest wait and their ratio, and the busiest client's share
// of holds over a fair share; RedisContendedLatency and
// RedlockContendedLatency report the same over a network, each server
// reached through a proxy that delays every chunk by a one-way latency
// (and the mean delay it gave); RedisPaired, RedisPairedLatency (over such
// a network), RedisFloor, RedlockPaired and PostgresVsZooKeeper report two
// locks' figures in alternating rounds, and their ratio. RedisFloor's
// baseline is the guide's bare lock (SET NX PX and a compare-and-delete, no
// lease): the floor of a two-round-trip cycle.
package bench
