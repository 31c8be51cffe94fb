// Package etcd is baton's etcd backend: a FencedLocker on
// go.etcd.io/etcd/client/v3.
//
// # Keys and tokens
//
// Lock NAME is the key range PREFIX NAME "/" (PREFIX defaults to
// /baton/lock/, the layout of etcdctl lock, so `etcdctl lock
// /baton/lock/NAME` and baton exclude each other). Every acquisition creates
// its own key there, attached to the Locker's session lease; the key with
// the lowest create revision holds the lock, and the others wait in create
// revision order, each watching only the key just before its own. A
// TryAcquire creates its key only when the range has none, in the same
// transaction (a compare on the key range: etcd 3.3 or later), so one that
// finds the lock held writes nothing.
//
// The fencing token is the holder key's create revision. It is monotonic
// because etcd's revision only grows, across leader changes too (it is the
// index of the change in the Raft log's applied state), and because a key
// can only hold the lock once every key created before it is gone: the next
// holder's key was created later, so its create revision is higher. etcdctl
// lock exports ETCD_LOCK_REV from Mutex.Header(), the header of the last
// request it made: the create revision when the lock was free, a later
// revision after a wait. Both only grow; baton uses the create revision
// because anyone can read it back from the key.
//
// They grow within one cluster's history. A cluster restored from a
// snapshot with plain `etcdutl snapshot restore`, or built anew, starts
// again from a lower revision: fences, which remember the newest token,
// then refuse every new holder until the revision passes it (safe, but
// nothing runs). Restore with --bump-revision (more than the revisions
// written since the snapshot, 1000000000 is ample) and --mark-compacted.
//
// # Sessions
//
// A Locker keeps one etcd lease (the session) for all its locks, granted
// with the TTL on first use and renewed by KeepAliveOnce every RenewEvery.
// A renewal that gets no answer within the request timeout is tried again
// soon after, until the local deadline: the client sends it to its next
// endpoint, so a member that holds requests (one cut off from its leader
// waits about 7s before it answers) does not cost the session.
// The session is the single source of liveness: when a renewal is refused,
// or the local deadline (send time of the last confirmed renewal + TTL -
// drift) passes, every lock on it is lost, waiters stop waiting with an
// error matching baton.ErrLeaseLost, and the next acquisition grants a new
// session. A dead session is never reused (etcd issue 19597). A lock whose
// key is deleted by someone else (an operator clearing it) is lost too.
//
// A key nobody tracks must not live as long as the session: a create whose
// answer was lost may be applied after the delete that cleaned up after it
// (a copy held up in the network), and a delete may fail (an outage during
// Release). Either retires the session: the next acquisition grants a new
// one, and the retired one is revoked, with every key on it, once the
// acquisitions and holds still on it are done. Meanwhile the delete is
// tried again every RenewEvery: another lock of the Locker (a leadership)
// may keep the retired session alive for days. A session lost by its local
// deadline is revoked the same way when its last lease is released: a
// renewal nobody heard back from may have kept it alive on the server.
// Close revokes every session, in parallel, and lets the revoke of a
// retired session already under way finish, waiting one release timeout
// at most; it does not wait for a server that let a session's renewals go
// unanswered. It also ends every observation, whose channel is closed by
// the time it returns, a reader that stopped reading notwithstanding.
//
// Why not concurrency.Session: it learns of a lease's end only after the
// deadline computed from the receipt of the last keep-alive response,
// checked every 500ms, when the server may already have handed the lock to
// someone else. And why not concurrency.Mutex: its key is the session's
// lease, so two goroutines sharing a session both "hold" it (etcd issue
// 11360), and each waiter watches its predecessor from a revision the server
// already has, so every handoff waits for the server's 100ms catch-up loop.
// Here a waiter's watch starts at the current revision and is served at
// once; with 8 contenders that is 7.5x concurrency.Mutex's throughput (573
// against 76.7 cycles/s, medians of five runs on 2026-12-01, single runs
// 6.6x to 8.0x; 4.1x to 4.8x in earlier sets, without the warm-up round;
// see the README).
//
// # What is guaranteed
//
//   - At most one holder per lock name as etcd sees it (the key with the
//     lowest create revision under PREFIX NAME "/"), from any mix of
//     processes, Lockers, and etcdctl lock or concurrency.Mutex clients
//     on the same prefix.
//   - Tokens (create revisions) strictly increase from holder to holder
//     within one cluster's history (see "Keys and tokens" for a restore).
//   - Waiters get the lock in the order they began to wait.
//   - A holder is told it lost the lease (Done, Err, the work context) by
//     its local deadline, before etcd can expire its session and hand the
//     lock on, when renewals go unanswered or are refused; and at once when
//     the watch on its key sees the key deleted by someone else (a forced
//     release).
//   - No key of ours outlives its purpose: a key nobody tracks goes with
//     a retired session, revoked once nothing else is on it (see
//     "Sessions").
//
// # What is not
//
//   - A paused process cannot be stopped from writing: a holder frozen
//     longer than the TTL wakes, sees its lease lost at its deadline check,
//     and may write in between. Writes that must not happen twice go
//     through a fence, which refuses the stale token.
//   - A key deleted by someone else while the holder's watch is cut off
//     from the cluster is noticed when the watch comes back, or at the
//     local deadline when renewals fail too; a fence covers the gap.
//     clientv3 puts all of a client's watches on one gRPC stream, to one
//     endpoint; when that endpoint goes silent (a host that died, a NAT
//     or firewall that dropped the connection's state), the watch comes
//     back only once the connection is found dead. A Locker from Dial
//     pings its connections after 10s without a word and drops one that
//     does not answer within the request timeout; a client passed to New
//     has the caller's settings (set clientv3.Config's DialKeepAliveTime
//     and DialKeepAliveTimeout), and without them TCP takes minutes. A
//     waiter also looks at the key ahead of it every RenewEvery (one
//     read per waiter), and looks again after a read with no answer, so
//     it takes a free lock whatever its watch hears; through an outage of
//     the cluster it waits as long as its session lives. When
//     the holder's Release hears first, after the local deadline, it
//     cannot tell the delete from the key's running out with the session's
//     lease after the work stopped, and returns nil (see baton's "What is
//     not").
//   - Tokens from a cluster restored without --bump-revision start lower,
//     and fences refuse every holder until they pass the newest seen
//     (safe, but nothing runs).
//   - TTLs are whole seconds, 2s at least on a default server (see "TTL").
//
// # TTL
//
// etcd leases count whole seconds, and a server raises a TTL below its
// minimum (about 1.5 x the election timeout, 2s by default) without saying
// so; baton refuses both with a *baton.OptionError instead of holding a
// longer lease than asked for.
//
// A leader stuck in its raft loop (a slow disk, starved CPU) could, before
// etcd-io/etcd#16822 (in the 3.4 and 3.5 releases of early 2024), revoke
// leases that its successor was renewing, all at once (etcd-io/etcd#15247):
// every holder then loses its lock at once, and the next holders may take
// theirs before the old ones' watches have said so. Run a server that has
// the fix (Debian's 3.4.23, which the tests use, does not); either way, a
// fence is what stops a holder that learns of its loss late.
//
// # Authentication
//
// With etcd's authentication on, give the user and password in the URL
// (etcd://user:password@host:port/prefix/) or in the clientv3.Config of
// your own client. A user needs readwrite on the prefix only: Dial checks
// that it answers by reading under the prefix. Dial returns a
// *baton.OptionError (the CLI's exit 2), not an unavailable server, when
// the server refuses the credentials, gets none, or refuses the user the
// prefix. A user who may read the prefix but not write it passes Dial;
// its acquisitions (and any other request the server refuses it later,
// as when its password or role changed) then return a *baton.OptionError
// saying to grant readwrite on the prefix, which baton elect and run
// --wait do not retry. A request larger than the server's
// --max-request-bytes (a long prefix, or a server set to take very little)
// is refused with an error that is neither. Everything else the server answers with (no leader, a
// timeout, too many requests, a database out of space, an auth token to
// fetch again) matches baton.ErrUnavailable, and so does every failed
// renewal.
package etcd
