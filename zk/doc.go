// Package zk is baton's ZooKeeper backend: a FencedLocker on
// github.com/go-zookeeper/zk, built on the classic election and lock recipe
// of the ZooKeeper documentation, with Curator's protections and session
// states.
//
//	fl, err := zk.Dial(ctx, []string{"zk1:2181", "zk2:2181", "zk3:2181"}, baton.WithTTL(10*time.Second))
//	// or, from a URL: zk://user:password@zk1:2181,zk2:2181/baton/lock?session-timeout=10s
//
// Each server is a host:port. A Java connect string's chroot
// (zk1:2181,zk2:2181/app) is not part of a server: Dial refuses it with a
// *baton.OptionError; make it the root instead (baton.WithPrefix("/app"),
// or the URL's path).
//
// # Nodes and the recipe
//
// Lock NAME is the election node ROOT/NAME (ROOT defaults to /baton/lock;
// baton.WithPrefix or the URL's path sets it). Every acquisition creates an
// ephemeral, sequential node there, named _c_<guid>-lock-<sequence> as
// Curator and go-zookeeper's zk.Lock name theirs, so the three exclude each
// other on the same election node. The smallest sequence number holds the
// lock. Every other candidate watches only the node just before its own, so
// a release or an expired session wakes exactly one waiter (no herd
// effect), which then lists the candidates again, unless the node it
// watched was the only one ahead of it: then it is first, since no node can
// be created ahead of it. The election node is a container node, which the
// server deletes once it is empty, so lock names do not pile up; the root's
// ancestors are created as plain nodes on demand.
//
// The "_c_<guid>-" protection is Curator's: when the connection drops
// after a create was sent but before its answer came, the node may exist;
// the GUID finds it again after the reconnection, so it is used instead of
// being left behind, first in line, holding the lock while the session
// lives. A node we stop caring about while the connection is down (an
// abandoned create, a release without answer, the node of a lease lost to
// a disconnection) is deleted as soon as the connection is back.
//
// With a digest identity (Settings.Auth, or the URL's user:password) every
// node baton creates, the root included, is readable and writable by that
// identity alone; without one they are open to all. ZooKeeper accepts any
// identity and refuses only what an ACL does not allow, so Dial lists the
// root and returns a *baton.OptionError when its ACL refuses the identity.
// A request refused later (NoAuth: a lock's nodes that are another
// identity's; InvalidACL: an ACL the server will not set) is a
// *baton.OptionError too (the CLI's exit 2), not ErrUnavailable, which
// baton elect and run --wait would retry for ever: go-zookeeper sends the
// credentials again before any other request on a new connection, so a
// refusal is never an artefact of a reconnection.
//
// That ACL (or Settings.ACL) goes on every node baton creates, the root's
// missing ancestors included, as Curator does with an ACLProvider. So
// with an identity, the first user to create a shared ancestor owns it:
// when alice's root /baton/alice made /baton hers, bob's /baton/bob is
// refused (NoAuth). Create shared ancestors beforehand with the ACL you
// want (zkCli create /baton, open to all), or give each user a root of
// its own at the top (/alice, /bob). An ACL of your own must let the
// holder Create, Delete and Read on the election node, Read on the
// candidates, Create on the root (for new election nodes), and Write on
// the election node for the one-request create (without it, see below).
// Without Delete no node of ours can be deleted: every Release fails and
// the node stays, holding the lock, until the session ends; a TryAcquire
// that finds the lock taken leaves its node in line too. baton does not
// check an ACL of your own for these rights: a super user, for one,
// needs none.
//
// # Tokens: czxid, not the sequence number
//
// The fencing token is the czxid of the holder's node: the zxid of the
// transaction that created it. The sequence number in the node's name
// cannot serve: the election node keeps that counter, so when the election
// node is deleted and created again (by an operator, or by the server
// itself, since it is a container that goes when empty) names restart at
// lock-0000000000, and a later holder would carry a smaller number than an
// earlier one. A zxid is the position of a change in ZooKeeper's single,
// totally ordered history, kept across leader elections (a new leader
// starts a new epoch in the high 32 bits, above every earlier zxid), so a
// node created later always has a larger czxid. A candidate only holds the
// lock once every node created before it in the same election node is gone,
// and an election node can only be deleted once it is empty, so each holder's
// node was created after its predecessor's: tokens strictly increase, across
// re-created election nodes and failovers. The guide saw czxids 6, 8, 10,
// then 18 after a re-create, while the names restarted.
//
// The czxid costs no extra request: the create is a multi, the create and
// an empty write to the election node in one transaction, and the write's
// answer carries the transaction's zxid, which is our node's czxid. (So
// the election node's data version counts acquisitions, a data watch on
// it fires at each, and any data it held is cleared: keep nothing of
// your own there, as under a Curator lock path. Where its ACL lets us
// create children but not write it, a plain create and a read of our
// node do instead.)
//
// # Sessions: the session is the lease
//
// On ZooKeeper the lease is the session: every node a Locker creates is an
// ephemeral node of its connection's session, and the server deletes them
// all when it has heard nothing from the client for the session timeout.
// baton's TTL is therefore the session timeout. Dial asks for it and checks
// what the server granted: servers grant between 2 and 20 times their
// tickTime (minSessionTimeout, maxSessionTimeout) and silently adjust a
// request outside that range, which would make the local deadline wrong, so
// Dial returns a *baton.OptionError naming the limit instead. go-zookeeper
// does not report the granted timeout for a connection made elsewhere, so
// New trusts baton.WithTTL to be it; prefer Dial. Every RenewEvery
// (default TTL/3) the backend confirms the session with a sync and an
// exists on each node it holds (which also finds a node deleted by
// someone else), sent together; go-zookeeper pings on its own as well.
//
// # The clock model and the local deadline
//
// A lease's Deadline is counted, on the monotonic clock, from the send
// time of a request the session's server is known to have counted from,
// plus the session timeout, minus the drift margin. The server cannot
// expire the session before it: it resets a session's expiry on every
// packet it receives, to at least the session timeout after the receipt
// (rounding up to its next tick), and the request was received no earlier
// than it was sent.
//
// On an ensemble it is the leader that expires sessions, and a client may
// be connected to a follower. A follower cut off from the leader goes on
// answering reads and pings on its own until it notices, syncLimit x
// tickTime later, while the leader expires the session after the session
// timeout, which may be shorter: so the request that confirms a session is
// a sync, which a follower answers only after the leader has. Nor does the
// leader reset the session's expiry when it answers that sync: it learns
// of the client's packets from the follower's answer to its next ping,
// which it sends every half tick. A link between them that breaks just
// after the sync was answered leaves the leader counting from the
// client's packets before it, up to RenewEvery older. So a confirmation
// counts only once a later sync, sent more than half a tick after the
// earlier one's answer, is answered: the follower's ping answer that
// carried the earlier one went to the leader before the later sync did,
// on the same connection. Renewals are sent no sooner than that: three
// tenths of the session timeout after the last answer. Servers grant at
// least two ticks, so half a tick is at most a quarter of the timeout;
// what is left for the ping's own delays, a lost packet's retransmission
// or a busy leader, is (0.3 - 0.5/k) x the timeout for a timeout of k
// ticks: 0.05 (200ms for ZooKeeper's default tickTime of 2s and a 4s
// timeout) at two ticks, 0.175 at four. Prefer a session timeout of four
// ticks or more on an ensemble. The deadline counts from the renewal
// before the last: with RenewEvery TTL/3 and answers quicker than
// RenewEvery less the settling time (TTL/30), a renewal has a third of the
// timeout, less drift, to be answered; slower answers put each renewal
// the settling time after the last answer, and three answers in a row
// must then take less than 2/5 of the timeout, less drift. A renewal that
// succeeds late, after failures, is followed by the next sooner. A
// session object (made by the first acquisition) counts its first
// deadline from when go-zookeeper began to dial its connection, when Dial
// made that connection less than RenewEvery before: the leader creates
// (or, for a client that connects again, revalidates) a session only
// after that, and resets its expiry then. One made on a connection given
// to New, or on one dialed longer before (a process that acquires long
// after Dial, or after a lost session object), first waits for a renewal
// to settle its first request, about three tenths of the session
// timeout, before its acquisition puts a node in line. TestEnsemble_FollowerCutOff_HolderStopsBeforeTakeover cuts that
// link on a three-server ensemble at the worst moment; a deadline counted
// from the last renewal lets the next holder in about 0.8s early.
// Observers are not considered: one behind an observer master may pass
// its clients' packets on through two pings instead of one.
//
// A leader cut off from its quorum answers syncs itself until it steps
// down, at the same syncLimit x tickTime (ZOOKEEPER-2136), and drops its
// clients then; the session cannot expire sooner elsewhere, since the
// leader the others elect gives every session a whole timeout when it
// takes over. When the deadline passes without a settled confirmation,
// the lease is lost.
//
// # Connection states, as Curator has them
//
// Disconnected is Curator's SUSPENDED: go-zookeeper has heard nothing for
// two thirds of the session timeout (or the connection broke), and tries
// the servers again. The session may well survive, but a holder cannot
// know, while suspended, whether the server has already expired it and
// handed the lock to the next in line. So by default a suspended lease is
// lost at once: Done closes, the work context is cancelled with an error
// matching ErrSuspended, about a third of the session timeout before
// the server could expire the session. If the connection comes back within
// the timeout on the same session, the lost lease is not resumed behind the
// work's back: its node is deleted, so the next waiter gets the lock, and
// the holder must acquire again, for a new token. A waiter keeps its
// place in line while the server's session may live: once its node is in
// line, it outlasts any outage the session survives (a listing or a watch
// is waited for without the request timeout, and sent again after a
// connection error once the connection has the session back), also one
// past the local deadline of the session object it began on (it then
// takes the lock on a fresh one, confirmed by a request, which may wait
// for a renewal to settle it, about three tenths of the session timeout
// later). It stops
// when the session expired, or when the connection has stayed down for
// the session timeout, by when the server has expired it (an error
// matching baton.ErrLeaseLost and ErrSuspended; its node goes with the
// session). That timeout counts from when the waiter finds the connection
// down: go-zookeeper notices a silent connection only after two thirds of
// the session timeout, so the waiter can stop that much after the server
// expired the session. A reconnection, one the waiter saw or not (the
// connection flapped between two looks), starts the count again: the
// server heard from the session then.
// Settings.ContinueWhileSuspended (URL:
// on-suspend=continue) keeps the work going instead, until the local
// deadline or the session's expiry, and keeps the lease if the session
// reconnects in time, as it does when it moves to another server of an
// ensemble.
//
// Expired is Curator's LOST: the server ended the session and deleted its
// nodes; every lease on it is lost (ErrSessionExpired), a waiter stops
// waiting with an error matching baton.ErrLeaseLost, and the next
// acquisition uses the new session go-zookeeper makes.
//
// # What is guaranteed
//
//   - At most one holder per lock name as ZooKeeper sees it, from any mix of
//     processes and Lockers, and of baton, Curator and zk.Lock clients.
//   - Tokens (czxids) strictly increase from holder to holder.
//   - A holder is told it lost the lease (Done, Err, the work context)
//     before the server can hand the lock to someone else, when its
//     connection is silent or broken; when its node is deleted by someone
//     else (ForceRelease), at the session's next confirmation, within
//     RenewEvery.
//   - No node of ours outlives its purpose while the session lives.
//
// # What is not
//
//   - A paused process cannot be stopped from writing: a holder frozen
//     longer than the session timeout wakes, sees its lease lost a moment
//     later, and may write in between. Writes that must not happen twice go
//     through a fence, which refuses the stale token.
//   - The time that settles a confirmation (three tenths of the session
//     timeout) covers the leader's half-tick pings for session timeouts
//     of two ticks or more, which is what servers grant unless
//     minSessionTimeout is set lower, with a slack for the ping's own
//     delays that is thin at two ticks (see "The clock model"); Dial
//     cannot learn the tickTime.
//   - TTLLeft in status is unknown (-1): only the server knows how long a
//     session has left.
//   - An election node numbers its candidates with a signed 32-bit count
//     of the creates under it, which runs out past 2^31-1 (two billion
//     candidates; servers before 3.6 go on to "-2147483648", 3.6 and later
//     name every later candidate "2147483647"): past it, candidates are
//     no longer in the order they came, and two may each find themselves
//     first. baton refuses to queue there (an error matching
//     ErrSequenceWrap, not baton.ErrUnavailable) once our node's number is
//     within 2^20 of the limit, and whenever a candidate numbered at or
//     past it, or two with one number, are in line (another client's, such
//     as Curator's, zk.Lock's or kazoo's, which need not check); Inspect
//     of that lock, Observe and ForceRelease fail then too, unable to tell
//     the holder (an Inspect of every lock, as baton status without names,
//     lists it with its error, LockInfo.Err).
//     The election node must then be deleted and created again: zkCli
//     deleteall (a holder's lease is then lost; a server before 3.6 does
//     not remove such a container node by itself); its numbers start
//     again from 0, and tokens keep rising. Until then those other clients may still take the lock past
//     the wrap, beside a holder of ours that came before it; a fence
//     refuses the older holder.
//   - A TryAcquire whose node is first in line just as the connection
//     drops waits for the connection, up to the session's local deadline,
//     rather than answering at once; one whose session object ended just
//     then (its local deadline passed) also waits for a fresh one to be
//     confirmed, and may wait for it to be settled, about three tenths of
//     the session timeout.
//   - A Locker from New follows its connection's state by polling it every
//     few milliseconds, so a disconnection shorter than that can go unseen;
//     it cannot cost the session, and Dial sees every one.
//   - A node deleted by someone else is noticed at the session's next
//     confirmation, at most RenewEvery later: a holder's, forced by an
//     operator, and also a waiter's (a forced release that read the lock
//     just as its holder left, or a zkCli deleteall of the election node,
//     as the sequence wrap above calls for, which deletes the waiters'
//     nodes with the holder's). Such a waiter may still be granted the
//     lock when the candidate ahead goes, while the candidate behind it
//     takes the lock too, until that confirmation ends its lease. Writes
//     through a fence are safe meanwhile: the later holder's token is
//     higher. The confirmation's exists goes out with its sync, each on a
//     goroutine of its own, so it may reach the server first: a follower
//     that has not yet applied a delete the leader made answers it that
//     the node is there, and the next confirmation finds it gone (up to
//     twice RenewEvery). Sent after the sync's answer, it would add a
//     round trip to every confirmation, and hold up the deadline it moves.
//   - A waiter that gives up leaves its watch on its predecessor's node on
//     the server until that node goes (go-zookeeper cannot remove a watch);
//     the event then reaches a client that ignores it.
//   - go-zookeeper v1.0.4, the newest release, has a data race of its own
//     (go-zookeeper/zk#35, open): after a reconnection with watches set, it
//     reads the last zxid it saw, to set them again, while the new
//     connection's first answers may be raising it. The race detector can
//     report it, rarely, in a program's -race tests. baton does not depend
//     on that zxid: at worst the server sends a watch's event again, or
//     leaves out the event of a change made while the connection was
//     down, and after every reconnection a waiter looks at its predecessor
//     again and an observer reads the election again, whatever the events
//     say. baton does not carry a patched copy, which a program using it
//     would not get anyway (a replace directive applies to the main module
//     alone).
//
// # Performance
//
// The extra safety costs no round trip. An uncontended cycle is two
// requests, where go-zookeeper's zk.Lock takes three (create, list,
// delete): the create is a multi whose answer carries our czxid and the
// election node's child count, and a count of 1 means we hold the lock
// without listing. Once a create finds others, the backend's next ones
// send the listing right behind the create, in the same round trip, until
// one finds itself alone again. A cycle among 8 contenders is five
// requests for both (TestRecipe_RequestsPerCycle counts them on the
// server). The GUID is part of the name, and session states cost nothing
// on the wire. A request weighs more: every request runs on its own
// goroutine so that a caller's context can abandon it, and the create is
// a multi. Per cycle with 8 contenders, measured separately (three rounds
// of 3,000 cycles, the server's CPU time from /proc, the client's from
// getrusage), the server spent 0 to 6% more than for zk.Lock and the
// client about 18% more (5 goroutines per cycle, zk.Lock none). But
// neither shows in the time a cycle takes. Two variants, each run against
// the code as it is in three alternating sets of eight paired runs, came
// out within the noise: calling go-zookeeper directly, without the
// goroutines (and without cancellation), 1.01x, 0.99x and 0.99x against
// 0.99x, 0.99x and 1.00x; a bare create instead of the multi in contended
// mode, its czxid read while waiting for the predecessor, 0.92x, 0.95x and
// 0.91x against 0.95x, 0.94x and 0.96x. (Earlier, a bare create without
// any czxid measured about 7% faster, and one read right after it
// slower still.) Under contention, baton's speed was 0.94x to 1.00x of
// zk.Lock's in seven such sets on 2026-12-01 (set medians, in rounds of
// 16 cycles), and 0.99x in rounds of 256 (below).
//
// BenchmarkPaired alternates the two in rounds (16 cycles for one client,
// 256 for 8 contenders), so both see the same machine (Debian's ZooKeeper
// 3.8.0, standalone, tickTime 500ms, 2 cores shared with other work;
// medians of ten runs, 2026-12-01: go test -run '^$' -bench Paired
// -benchtime 60x -count 10 ./zk/ for one client, -benchtime 10x for 8).
// Uncontended, a figure is the time of one acquire and release; with 8
// contenders, the time per hold, all clients together (the inverse of the
// throughput):
//
//	                baton     zk.Lock   baton's speed
//	uncontended     691 us    902 us    1.27x (1.18x to 1.35x)
//	8 contenders    802 us    791 us    0.99x (0.85x to 1.04x)
//
// The contended ratio moves with the machine's day: on 2026-12-02, a
// slower one, eight runs gave 0.73x to 0.93x (median 0.86x), and in four
// alternating sets of 800 holds the handoff (a release to the next
// holder's acquisition) took 575 to 888us at the median against zk.Lock's
// 531 to 771us. Both hand over the same way: the release's delete, the
// watch event, a listing. Tried again that day in five runs each, a bare
// create without any czxid (0.87x to 0.90x) and requests made on the
// caller's goroutine (0.82x to 1.02x) stayed within that spread. What
// moves it is where the CPU goes: on 2026-12-03, with the server on a core
// of its own and the clients on the other (BATON_SERVER_CPUS=1, the test
// under taskset -c 0), six runs gave 0.95x to 1.03x (median 0.99x); six
// sharing both cores, just after, 0.80x to 0.90x (median 0.87x). baton's
// client spends more CPU per cycle (a goroutine per request), which on
// loopback the server has to share.
package zk
