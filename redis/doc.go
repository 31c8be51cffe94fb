// Package redis is baton's single-node Redis backend: the guide's first
// lock, done right, behind baton's lease API. It is an efficiency lock:
// New and Open return a *baton.Locker, never a FencedLocker, because Redis
// hands out no fencing token (`baton run --fence` refuses it and names
// etcd, zk or postgres instead).
//
// # When to use which
//
// Use this single Redis lock when a rare double run only wastes work (the
// guide's stock report). Use etcd, ZooKeeper or PostgreSQL with fencing
// tokens when a double run would corrupt data (the guide's invoices).
// Redlock (package redlock) sits in between, survives the loss of a
// minority of nodes, still gives no token, and its safety is disputed.
//
// # The lock
//
// Lock NAME is the key PREFIX+NAME (PREFIX defaults to "baton:lock:"),
// taken with SET key value NX PX ttl, where value is 128 random bits from
// crypto/rand, never used twice, followed by the holder identity
// (for `baton status`). Release is a Lua compare-and-delete; renewal, every
// TTL/3, a Lua compare-and-PEXPIRE. Every script is sent with EVALSHA and
// falls back to EVAL when the server answers NOSCRIPT. So
//
//	redis-cli SET baton:lock:invoices x NX PX 900000   # (nil) while held
//	redis-cli PTTL baton:lock:invoices                 # just under the TTL
//
// behave as in the guide. An acquisition's first attempt is that SET
// itself, pipelined with an EXISTS of the lock's wait queue and observers'
// mark, with no script (a TryAcquire's always; a waiting one's until the
// Locker has waited once: from then on its subscription is up, and a
// waiting acquisition's first attempt is the acquire script, which joins
// the queue in the same round trip when the lock is held): a script costs the server about 5µs before its
// first call and about 2µs per call. Only when the SET took the key and
// the EXISTS found a queue (the last holder's key expired with waiters
// queued) or an observer does a script follow: it keeps the key and tells
// the observers, or, when a live waiter is first, says so, and a release
// of the claim's value hands the lock to that waiter. DELEX key IFEQ value (Redis 8.4)
// would replace the release script, but it is not used: only Redis 7.0.15
// could be tested here, and the script is needed anyway for the wait
// queue.
//
// # Waiting: FIFO, no herd, no blind polling
//
// A waiting acquisition joins the lock's queue (a sorted set {KEY}:q, in
// the key's Cluster hash slot) and sleeps. Release hands the lock straight
// to the first live waiter, inside the release script (SET key
// waiter-value, expiring when the waiter's queue entry would have: its
// TTL from its last attempt), and publishes on that waiter's Locker
// channel; only that waiter wakes, already holding the lock. Waiters get
// the lock in arrival order; a fresh acquisition does not barge past them.
// A waiter also retries on a timer: the first in line just past the key's
// remaining TTL (PTTL), by 1ms plus a jitter under 10ms whatever the TTL,
// so a crashed holder is taken over right after its key expires (a first waiter that gives up tells the one
// now first, which then looks at the key's expiry itself); every waiter at least every RenewEvery,
// which keeps its place alive (a waiter that stops refreshing is dropped
// once its entry has run out, one TTL on: by the next refresh of the live
// waiter ahead of it, or when it comes first) and covers a lost message. A key removed early by someone
// else (a DEL, a clock jump) is noticed at that timed retry. Keyspace
// notifications are not used. The Locker's subscription, quiet for 3s, is
// sent a PING; one not answered within 3s more (a connection a NAT or
// firewall dropped without a word, where go-redis would read on until TCP
// keepalive gave up, minutes on) is made again on a new connection, and
// the timed retries cover the wake-ups lost meanwhile. A subscription the
// server refuses on a new connection (an ACL that no longer grants the
// channel) is logged, a warning, and asked for again every 3s until the
// server takes it; go-redis asks once per connection.
//
// # What is guaranteed
//
//   - While the Redis server runs without failover, at most one holder per
//     name: SET NX and the scripts run atomically on the server.
//   - Release and renewal act only on our own value: a holder whose key
//     expired and was taken by another can neither delete nor extend the
//     new holder's key.
//   - A request of an acquisition delivered late, or twice (go-redis
//     sends a request again after a read timeout, on another connection,
//     while the first copy may still be on its way), hands on or deletes
//     nothing of a later hold: the acquire script hands nothing on (a
//     claim that finds a waiter first leaves the key to a release of its
//     value), and after a release of its value an acquisition ends or, a
//     claim's, waits with a new value
//     (TestClaim_ResentScriptHandsNothingLate).
//   - A refused renewal (the key is gone or holds another value) or a
//     failed one (an error, no answer within the request timeout) ends the
//     lease at once: Done closes, Err is a *baton.LostError, the work
//     context is cancelled. A renewal still unanswered at the local
//     deadline ends it then, even on a client that ignores context
//     deadlines. (The fenced backends retry a failed renewal until the
//     local deadline instead: their tokens make a late holder harmless.)
//
// # What is not
//
//   - No fencing token. A holder paused past its TTL (GC, SIGSTOP, a
//     suspended VM) wakes still running its work; it learns of the loss
//     at its next renewal at the earliest, and nothing stops a write it
//     had already started.
//   - Redis expires keys by its wall clock (the Redis documentation says
//     so): a server clock jumped forward ends every lease early, before
//     the holder's local deadline. The holder finds out at its next
//     renewal, at most RenewEvery later; until then two holders can run.
//     A lock handed to a waiter expires at the waiter's last attempt's
//     server time plus its TTL, so a jump at any time after that attempt
//     shortens the handed lease alike, and its holder too finds out at
//     its first renewal. The tests make a key expire early with PEXPIRE
//     key 1 from a third client, which the holder cannot tell apart from
//     such a jump.
//   - Replication is asynchronous: if the primary fails over before the
//     replica received the key, the promoted replica grants the lock a
//     second time (the guide's replica race). Use a single node, or accept
//     it; WAIT does not close the gap.
//   - A server restart without persistence forgets every lock.
//   - Eviction: every lock key has a TTL, so a volatile-* maxmemory-policy
//     evicts lock keys first, and an allkeys-* one may; another client then
//     takes the lock while the holder works on until its next renewal. Run
//     the locks on a server with maxmemory-policy noeviction, or with the
//     memory never full.
//
// # Clock model
//
// The holder never trusts the server's clock nor its own wall clock: its
// local deadline is the send time of the last renewal the server
// confirmed, plus the TTL, minus the drift margin (default TTL/100 + 2ms),
// on Go's monotonic clock (internal/keeper). A waiter handed the lock by a
// release counts from the send time of its own last request that the
// server ran before the handoff: the handoff's message names that
// request (by the number the waiter gave it, which its queue entry keeps:
// numbers never repeat within an acquisition, whatever the server's clock
// does). A message that names an earlier one (it was held up on its way
// while a later attempt ran), or that comes when a renewal counted from
// that send time would be due already (the lease would start with less
// time for its first renewal than any renewed lease has, or none), or
// whose lease's deadline has passed by the time the hold is made (the
// waiter was held up in between, by a stall of its machine), is checked
// by one more attempt instead, which gives the key a whole TTL. (An
// attempt whose own answer comes past that deadline is released, and the
// acquisition fails, unavailable: the server or the network is that
// slow.) The
// server, though, ends the key by its wall clock, so the local deadline
// is only as good as that clock: see above. (In a fleet of mixed
// versions, a baton older than these numbered entries reads them as run
// out, and a newer one reads the older entries so: a waiter may lose its
// place to a release by the other version and join again at its next
// timed attempt, within RenewEvery.)
//
// # Limits
//
// MinTTL is 200ms. A Redis ACL user needs the lock keys, the keys in
// their hash slot, the wake-up channels and the commands baton sends, no
// more: with the default prefix,
//
//	ACL SETUSER app on >pw ~baton:lock:* ~{baton:lock:* &baton:wake:* +@read +@write +@scripting +@pubsub +@connection +time
//
// (Redis 7 gives a new user no channels); its URL is
// redis://app:pw@host. A URL with a user and no password (redis://app@host)
// is refused: go-redis sends no AUTH without a password, and the
// connection would run as the default user; a nopass user takes any
// password. A password alone (redis://:pw@host) is the default user's
// (requirepass). A request the server's ACL
// refuses (NOPERM, or on Redis 7.0 "The user executing the script can't"
// for a call inside a script, which has then run up to it) fails with a
// *baton.OptionError naming what to grant, not with ErrUnavailable: trying
// again cannot mend it. So do credentials the server stops accepting
// (NOAUTH, WRONGPASS). Other replies that trying again cannot mend fail
// with an error that matches neither ErrUnavailable nor ErrInvalidOption
// (the CLI's exit 1), naming the reply: WRONGTYPE (a key of the lock holds
// a value of another type, set by something else: the error lists the
// lock's keys), and an unknown command or one the server does not allow
// (renamed or disabled, or a proxy in front). Replies that may change stay
// ErrUnavailable: LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, OOM,
// MISCONF, NOREPLICAS, too many clients, and READONLY. A replica answers
// READONLY; so does a primary demoted by a failover, until a new
// connection (which go-redis makes after that reply) reaches its
// successor behind a DNS name, so Open reports an address that HELLO says
// is a replica as unavailable (*baton.UnavailableError), saying to give
// the primary's if it stays so, and a READONLY reply later says the same. New makes no request: on
// a client of a replica every acquisition is ErrUnavailable, READONLY. A
// renewal refused in any way is the lease's loss, as any
// failed renewal. Redis Cluster works through redis.UniversalClient (the
// queue keys share the lock key's hash slot; the prefix must not contain
// braces). For a client you build yourself, set ContextTimeoutEnabled so
// that context deadlines reach the socket (go-redis interrupts a read at a
// deadline, not at a cancellation), and MaxRetries: -1: baton retries
// within its own deadlines, and a copy go-redis sends again, or one that
// arrives late, can leave a key behind that blocks the lock for one TTL;
// Open does both. A Release
// waits for a renewal in flight, so it can take up to the request timeout
// longer than the release timeout. Any renewal error ends the lease, also
// one that says nothing about the key (the client's pool timing out under
// load).
//
// # Performance
//
// An uncontended acquire+release is two round trips, the floor, as for
// bsm/redislock: a pipelined SET and EXISTS, then one EVALSHA. Measured on
// the 2-core development machine (a shared VM, on 2026-12-01, a faster day
// than earlier figures) against Redis 7.0.15 on loopback, in one run with
// bsm/redislock v0.9.4 using the 10ms linear back-off its README shows for
// waiting (in the bench module: cd bench && go test -run '^$' -bench
// 'RedisCycle|RedisContended$' -benchtime 3000x -count 5 ., medians; the
// alternating rounds are BenchmarkRedisPaired, below):
//
//	                               baton      redislock   ratio
//	cycle, uncontended             147µs      112µs       0.76x
//	  in alternating rounds        124µs      112µs       0.90x
//	8 contenders: holds/s          6,552      7,568       0.87x
//	  same client again            0%         97.2%
//	  busiest client / fair share  1.003      1.73
//	  longest wait                 4.0ms      177ms
//	  longest / median wait        3.6        3,814
//	  handoff p50 (other client)   139µs      147µs
//
// The uncontended figures, measured one sub-benchmark after the other,
// swing with the VM's slow spells (baton's five runs: 118µs to 158µs).
// BenchmarkRedisPaired alternates the two in rounds of 16, so that those
// spells fall on both: 0.90x (median of ten runs, 0.89x to 0.93x; cd bench
// && go test -run '^$' -bench 'RedisPaired$' -benchtime 400x -count 10 .;
// 0.85x on slower days), up from 0.71x before the pipelined first attempt
// and the shared renewal timer (internal/keeper's Scheduler). What is
// left, measured in alternating rounds with benchmarks not kept: the
// fairness checks, EXISTS in the claim and the queue check in the release
// (the same lease without them, which would let a newcomer pass queued
// waiters, measured 0.95x to 0.98x against redislock), and the lease
// around the lock that redislock does not have: a renewal schedule, a work
// context and the Locker's bookkeeping (a Locker cycle against the same
// two calls made bare: 0.94x to 0.98x; its own CPU, on a backend that
// answers at once, is 2.8µs and 28 allocations per cycle).
//
// BenchmarkRedisFloor (bench module) measures the floor itself: the
// guide's bare lock, SET NX PX and its compare-and-delete with no lease
// around them, on the same client. On 2026-12-02 it ran at 1.08x to 1.12x
// redislock (six runs, 85µs against 95µs: redislock's obtain is a script,
// and bounds its wait with a timer), and baton at 0.80x to 0.84x of it
// (111µs). So a lease on two round trips costs about 20µs here over the
// bare lock, which leads redislock by about 10µs: matching redislock means
// a lease that costs less than half of what this one does (cd bench && go
// test -run '^$' -bench RedisFloor -benchtime 400x -count 6 .). A
// profile on 2026-12-02, a slower day (baton at 0.79x to 0.82x of
// redislock in alternating rounds), found no one cost to cut: without the
// two per-cycle request timers (context.WithTimeout), or without the
// garbage collector (GOGC=off), the cycle took as long; against the bare
// lock, the claim's pipeline cost about 7%, the release script about 4%
// (its five keys and EXISTS: Redis spent 7.6µs per EVALSHA against the
// bare compare-and-delete's 3.3µs), and the hold's bookkeeping the rest
// (the keeper, the work context, the Locker's tracking: 91 allocations
// per cycle against the bare lock's 20, and 25 to 35µs more of the
// client's CPU).
//
// Over a network the uncontended cycle is its two round trips and little
// more. BenchmarkRedisPairedLatency (bench module) alternates the two
// through proxies that delay every chunk each way: on 2026-12-02, at a
// mean delay of 1.15ms baton's cycle took 5.06 to 5.30ms against
// redislock's 4.99 to 5.23ms (0.98x to 0.99x, four runs), at 2.25ms 9.55
// to 9.79ms against 9.47 to 9.78ms (0.99x to 1.00x) (cd bench && go test
// -run '^$' -bench RedisPairedLatency -benchtime 64x -count 4 .).
//
// Under contention redislock's releasing client takes the lock again at
// once 97% of the time while the others wait out 10ms back-offs; baton
// hands the lock over in arrival order, with no starvation, at 0.87x of
// that throughput (0.73x on a slower day). The contended runs start with an
// untimed warm-up round: a contender's first wait opens its Locker's
// subscription and loads the scripts, which made the first holds' waits 7
// to 18 times the median (a one-off listing of the longest waits). Each
// hold is a handoff: 139µs at the median, of 153µs per hold. The next holder is another client, woken
// through Pub/Sub, and the server runs two scripts per hold: the release
// that hands over and the releaser's place in the queue. Both take the
// contended paths first, with six or seven calls and eight, and build their
// times from strings (a Lua number made a string costs as much as a
// call): INFO commandstats put them at 35µs each under this load, down
// from 42µs (15% less server time per hold), and the throughput did not
// move. What bounds it is the handoff chain, timed inside one run on a
// slower day (median from the release's start): the release script's answer comes at 130µs,
// the waiter's message at 195µs, and the waiter returns at 215µs. Redis
// writes its pending replies newest first, so the releaser's answer, ready
// when the script ends, goes out before the message the script published,
// and the eight clients and the server share two cores.
//
// Over a network the handoff is the faster way. BenchmarkRedisContendedLatency
// (bench module) puts a proxy between the clients and the server that
// delays every chunk each way: at a mean delay of 1.23ms, baton held the
// lock 365 times a second against redislock's 234 (1.56x), at 2.5ms 177
// against 127 (1.39x), with the longest wait 1.2 to 1.9 times the median
// (redislock 5.4 to 13); 2026-12-02, medians of three runs (cd bench &&
// go test -run '^$' -bench RedisContendedLatency -benchtime 1000x -count
// 3 .). A handoff costs about one round trip there (the release reaches
// the server, which tells the next waiter), where redislock's releasing
// client takes the lock back in two (release, obtain). On loopback what a
// hold costs is CPU instead, which the wake-up adds to: on 2026-12-02 the
// 8-contender ratio came out 0.70x in one set of runs and 0.99x in
// another.
package redis
