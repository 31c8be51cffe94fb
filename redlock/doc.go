// Package redlock is baton's Redlock backend: one lock over N independent
// Redis nodes (not replicas of each other; an odd number, at least 3),
// held when a majority agrees. It is an efficiency lock: New and Open
// return a *baton.Locker, never a FencedLocker, because Redlock's random
// value never goes up and so cannot serve as a fencing token (`baton run
// --fence` refuses it and names etcd, zk or postgres instead).
//
// One server named twice would give two votes, a majority of three on its
// own. Open refuses such a URL, whether the server is written two ways
// (a:6379 and A:6379; ports are plain numbers, so a:06379 is refused) or
// reached by two names (localhost and 127.0.0.1: the servers' run_id
// tells). New, given clients, refuses one client given twice, and two
// *redis.Client with one address; it does not ask the servers for their
// run_id, so two names for one server get past it.
//
// # When to use which
//
// Use a single Redis lock (package redis) when a rare double run only
// wastes work. Use etcd, ZooKeeper or PostgreSQL with fencing tokens when
// a double run would corrupt data. Redlock sits in between: it survives
// the loss of a minority of nodes and needs no failover, but gives no
// token, and its safety rests on timing assumptions that Kleppmann
// disputes (bounded network delay, bounded pauses, bounded clock drift).
//
// # The algorithm
//
// An acquisition sends SET key value NX PX ttl (in a script, with the
// same value, 128 random bits from crypto/rand, on every node) to all
// nodes in parallel, each awaited at most min(request timeout, TTL/10),
// far below the TTL. It holds the lock when a majority set it and the
// validity, TTL - elapsed - drift, is still positive; the lease's local
// deadline is the attempt's start + TTL - drift. An attempt that set the
// key on some nodes but not on a majority, or that some nodes did not
// answer (their SET may have run all the same; also when no node
// answered, or the caller gave up first), is undone on every node (a
// request held up in the network past that undo may still set our key on
// its node for one TTL).
//
// A request a node did not answer in time may still reach it later (a
// packet sent again on a connection the client closed; go-redis also sends
// a request again after a read timeout, so even an answered one may have
// an earlier copy on its way). Of an acquisition's requests, only its
// undos delete a key (a first attempt's claim that took a key reserved for
// a queued waiter reports it yielded and leaves it to the undo). So every
// undo ends the value it undid: the acquisition goes on with a new value,
// and a late request for an old value touches nothing of the new one's
// (TestLateUndo_TouchesNothingCounted, TestClaim_LateScriptDeletesNothing;
// go-redsync v4.18.1 keeps one value for all of a Lock's tries). Every
// later attempt hands each old value's place in the queues to the new
// value, and makes a key an old value still holds ours (where an undo has
// not landed, that can cost the waiter it would have woken a turn, never
// mutual exclusion); the old values' wake-ups wake the waiter, and the
// hold's release and a waiter giving up clear them too. An acquisition
// keeps its last 8 old values; an older one that a late attempt queued
// again can stay first in a node's queue until its entry runs out, one
// TTL after its last refresh.
//
// Release deletes the key (compare-and-delete) on every node. Renewal
// every TTL/3 is a compare-and-PEXPIRE on every node and succeeds on a
// majority; when it does not (so many nodes refuse that no majority can
// hold the key any more, or too few answer within the request timeout),
// the lease ends at once. A renewal ends as soon as the nodes yet to
// answer could no longer make a majority; one still waiting for a node at
// the local deadline (a frozen node's answer could still make the
// majority) ends the lease then. Drift defaults to TTL/100 + 2ms (baton.WithDrift).
//
// # Waiting
//
// Racers that split the vote, so that no one has a majority, undo theirs
// and try again after a random delay, as Redlock prescribes. A waiting
// acquisition also joins each node's wait queue, ordered by the waiter's
// own start time, so every node orders the same waiters alike. A release
// hands each node's key to the first live waiter there, for what that
// waiter's queue entry had left to live (its TTL from its last attempt
// there), and tells it on its Locker's channel which of its
// attempts the handoff came after (by the round's number, which its
// entry keeps: numbers never repeat within an acquisition, whatever the
// nodes' clocks do). When a majority of the nodes handed it the key after
// its last round, the waiter holds the lock:
// every one of those keys was set after that attempt reached its node,
// so none expires before the attempt's start plus TTL, the base of the
// lease's deadline, as for a round it wins; unless a renewal counted from
// that start would be due already (the handoffs came late), or the
// lease's deadline has passed by the time the hold is made (the waiter
// was held up in between, by a stall of its machine), when a round
// confirms the keys first, for a whole TTL. Otherwise (some nodes handed
// their key to another waiter, or their message is late), after a grace
// of about two rounds' time it acquires on every node at once, a round that
// finds the keys handed to it its own. So waiters get the lock in
// arrival order, a fresh acquisition does not barge past them, and they
// do not split the vote among themselves. Timed
// retries (the first in line just past the holder's PTTL, by 1ms plus a
// jitter under 10ms whatever the TTL; every waiter at
// least every RenewEvery) cover a crashed holder and lost messages; a
// first waiter that gives up wakes the one now first, which then looks
// at the holder's PTTL itself. Each node's subscription is checked as
// the redis package's is: quiet for 3s, a PING; not answered within 3s
// more, a new connection; refused by the server, logged and asked for
// again every 3s.
//
// # What is guaranteed
//
//   - While at most a minority of nodes fail, and fail by stopping (a node
//     that answers keeps every key it acknowledged, for its TTL), clocks
//     drift less than the drift margin over a TTL, and no holder pauses
//     past its deadline, at most one holder per name.
//   - The lock is acquired and renewed with a minority of nodes dead or
//     frozen, and reported unavailable (a *baton.UnavailableError naming
//     the nodes) when a majority cannot answer: not contended, not
//     cancelled. TryAcquire reports it within about twice the per-node
//     timeout (its attempt's, then an undo's on the nodes that did not
//     answer, where the attempt may have run); a waiting Acquire, when a
//     node did not answer in time (it may only be slow), tries again
//     after a random delay until a request timeout has passed with no
//     round answered by a majority.
//   - Release and renewal act only on our own value.
//
// # What is not
//
//   - No fencing token; a paused holder wakes still running its work.
//   - Each node expires keys by its wall clock: a clock jump on a majority
//     of nodes, or on one node while another restarts, can end a lease
//     early and let a second holder in before the first renews.
//   - A node that loses a key it acknowledged turns a holder's majority
//     into a minority, and a second client can acquire, though only one
//     node failed. It loses them when it restarts without persistence, or
//     with RDB snapshots or appendfsync everysec (the last writes);
//     when maxmemory-policy evicts (every lock key has a TTL, so a
//     volatile-* policy evicts them first, and an allkeys-* one may); and
//     when a replica takes over behind its address (replication is
//     asynchronous). Run each node with maxmemory-policy noeviction, no
//     failover, and either appendfsync always or a restart delayed by one
//     TTL (antirez's advice).
//   - Fair order across hosts whose clocks differ. A waiter's place in
//     every node's queue is its own start time, by its host's wall clock,
//     so that every node orders the waiters alike (each node's own TIME,
//     taken as the request reaches it, would order two waiters that queue
//     at about the same moment differently on different nodes, and split
//     the handoffs so that no one is first on a majority). A waiter whose
//     clock is ahead by d waits behind every waiter that queues within d
//     after it; one whose clock is behind by d goes before every waiter
//     that queued within d before it. Only the order suffers: mutual
//     exclusion does not rest on it. Keep the hosts' clocks in step (NTP)
//     where arrival order matters.
//
// # Clock model
//
// As for every baton lease, the holder's deadline is counted on its
// monotonic clock from the send time of the request that set or last
// renewed the key on a majority, plus TTL, minus drift; the nodes expire
// keys by their own wall clocks.
//
// # Performance
//
// An uncontended cycle is two rounds of N parallel requests; the first
// acquisition attempt on each node is a plain SET NX PX pipelined with an
// EXISTS of the queue and a GET, as redsync's is a plain SET (see claim),
// and a release on a node with no queue finishes before the script's
// helpers are defined. Measured on the 2-core development machine (a
// shared VM) with 5 nodes of Redis 7.0.15 on loopback, in one run with
// go-redsync/redsync v4.18.1 at its defaults (32 tries, a random 50-250ms
// delay; a lock that ran out of tries was tried again), medians; the
// cycle on 2026-12-01, the rest on 2026-12-02:
//
//	                               baton      redsync     ratio
//	cycle, in alternating rounds   604µs      554µs       0.92x
//	8 contenders: holds/s          1,418      1,274       1.11x
//	  same client again            0%         96.3%
//	  busiest client / fair share  1.01       3.14
//	  longest wait                 10ms       598ms
//	  longest / median wait        2.4        1,838
//	  handoff p50 (other client)   0.65ms     0.66ms
//	over a network, mean delay 1.4-1.6ms each way: holds/s
//	                               246        157         1.57x
//	  mean delay 2.6-2.7ms         146        91          1.59x
//
// The cycle is BenchmarkRedlockPaired (cd bench && go test -run '^$'
// -bench RedlockPaired -benchtime 100x -count 10 .; ten runs 0.89x to
// 0.94x; 0.88x on an earlier day, 0.81x without the plain first attempt);
// the 8 contenders BenchmarkRedlockContended (-bench 'RedlockContended$'
// -benchtime 1000x -count 3, after an untimed warm-up round; 1.16x to
// 1.22x in three other sets that day, the last after the review of the
// handoff), and over a network
// BenchmarkRedlockContendedLatency (-bench RedlockContendedLatency
// -benchtime 1000x -count 3), where a proxy delays every chunk to and
// from each node. redsync's throughput under contention is one client
// re-taking the lock; the others wait up to most of a second. baton's
// waiters get it in arrival order. A handoff is the release (one round,
// which hands each node's key to the first waiter there) and the
// messages that tell the waiter: no round of the waiter's own, where
// redsync's releasing client takes the lock back with a release and an
// obtain, two rounds. Before the release handed the keys over (it left
// them free, reserved for the first waiter, whose round took them), baton
// ran at 0.77x redsync on loopback on 2026-12-01 and 0.92x on 2026-12-02,
// and at 1.00x and 0.93x over the network (two rounds per hold, as
// redsync). Messages from all five nodes reached the woken waiter within
// 3ms of the first in 499 of 499 holds, counted then; a waiter waits for
// a majority of them about two rounds' time (handoffGrace) before it looks
// with a round of its own.
//
// The nodes share the two cores with the clients, and their time runs
// short first. Before the handoff, the scripts made about 20 calls per
// hold on each node (30 before that: the contended paths come first, a first waiter
// takes the free key without checking its own entry, and times are built
// from strings). Against redsync in the same runs that took baton from
// 0.63x to 0.67x, and 0.72x once the requests an attempt does not wait for
// were no longer cancelled when Acquire returned (885 against 1,229
// holds/s that day).
//
// Racers that split the vote undo their keys at once, handing them to the
// first waiter, who tries again after a pause of a few milliseconds (for a few
// rounds; then it waits out the keys, which crashed racers leave for a
// TTL). Before, the first waiter counted the keys reserved for it as
// another's majority and slept until the racers' keys would have expired
// (RenewEvery): about one start in three of eight new contenders stalled
// 3.4s (TestRace_NoStallAtStart).
//
// # Limits
//
// MinTTL is 500ms. The first request on a new client also dials, which
// the per-node timeout may not cover with a short TTL: Open pings every
// node first; do the same with clients you pass to New. A Redis ACL user
// needs on every node what the redis package lists (the lock keys, the
// keys in their hash slot, the wake-up channels, the commands), and INFO:
//
//	ACL SETUSER app on >pw ~baton:lock:* ~{baton:lock:* &baton:wake:* +@read +@write +@scripting +@pubsub +@connection +time +info
//
// A URL with a user and no password (redlock://app@a,b,c) is refused, as
// by the redis package: go-redis would run it as the default user.
// Without INFO, Open cannot tell a server named twice (it then counts as
// two votes). A node that HELLO says is a replica (which refuses every
// write, READONLY, and, a replica of another node, is not independent)
// counts at Open as a failed node, and is logged, saying to give its
// primary if it stays so: a majority of nodes down or replicas is
// unavailable, as for a while after a failover behind an address.
//
// A node that refuses a request for good, as the redis package says (its
// ACL, NOAUTH or WRONGPASS, WRONGTYPE, an unknown or disallowed command),
// counts as a failed node: a majority of the others still takes, renews
// and frees the lock, so one misconfigured node stops nothing. When the
// refusing nodes alone deny a majority, the error is theirs, listing each,
// which baton elect and run --wait do not retry: a *baton.OptionError
// naming what to grant or check when every refusal is a setting (the ACL,
// credentials), and otherwise an error that matches neither
// baton.ErrUnavailable nor baton.ErrInvalidOption and says that they
// refused it for good. When an outage has its part (a node down, slow,
// or answering READONLY, LOADING and the like), it is
// baton.ErrUnavailable, with the refusals among its causes. A node that
// refuses the wake-up channels refuses its SUBSCRIBE (its waiters look on
// their timed retries) and a release that hands the lock on there.
package redlock
