// Package postgres is baton's PostgreSQL lock backend: a FencedLocker whose
// leases are rows judged by the database's clock, whose tokens come from a
// sequence, and whose waiters are handed the lock by the release that frees
// it and woken by LISTEN/NOTIFY; once someone observes an election
// (Observe), triggers NOTIFY every change of holder to the observers. With the fence (fence/postgres) in the
// same database, one PostgreSQL gives the guide's whole correctness story:
// lock, token and fenced writes, with no other service.
//
//	locker, err := postgres.Dial(ctx, "postgres://app@db/billing", baton.WithTTL(15*time.Second))
//	// or postgres.New(ctx, pool) on your own *pgxpool.Pool,
//	// or backends.Open(ctx, "postgres://app@db/billing?ttl=15s&table=ops.locks")
//
// # Tables
//
// Lock NAME is one row of the lease table (DefaultTable, baton_lock, or the
// table given with baton.WithPrefix or ?table=, optionally
// schema-qualified). A Locker's first Acquire, TryAcquire or Observe
// creates the schema when it is missing; Init creates it on its own, for a
// user who may; this is it:
//
//	CREATE TABLE IF NOT EXISTS baton_lock (
//		name         text        PRIMARY KEY,
//		holder       text        NOT NULL,
//		token        bigint      NOT NULL,
//		ticket       bigint      NOT NULL DEFAULT 0, -- the waiter it was handed to; 0 if taken directly
//		acquired_at  timestamptz NOT NULL,  -- the database's clock
//		expires_at   timestamptz NOT NULL,  -- the database's clock; '-infinity' once released
//		holder_clock timestamptz            -- the holder's own clock: recorded, never compared
//	);
//	-- (a waiters table without the slot column, an older baton's, is dropped first)
//	CREATE UNLOGGED TABLE IF NOT EXISTS baton_lock_waiters (
//		name         text        NOT NULL,
//		channel      text        NOT NULL,  -- the waiter's Locker's LISTEN channel
//		slot         integer     NOT NULL,  -- the Locker's row, reused by its next wait
//		ticket       bigint      NOT NULL,  -- FIFO order
//		waiter       text        NOT NULL,  -- the NOTIFY payload that reaches it: new with each attempt
//		holder       text        NOT NULL,
//		ttl          interval    NOT NULL,  -- its lease's TTL, for a hand-off
//		holder_clock timestamptz,
//		expires_at   timestamptz NOT NULL,  -- its place lapses unless it looks again
//		PRIMARY KEY (name, channel, slot)
//	) WITH (fillfactor = 50);
//	-- the sequences: fencing tokens, and places in the queue; one made
//	-- here while the tables hold rows starts above every value in them
//	DO $$ BEGIN
//		IF to_regclass('baton_lock_token') IS NULL THEN
//			CREATE SEQUENCE baton_lock_token AS bigint;
//			PERFORM setval('baton_lock_token', m) FROM (SELECT max(token) AS m FROM baton_lock) x WHERE m > 0;
//		END IF;
//		IF to_regclass('baton_lock_ticket') IS NULL THEN
//			CREATE SEQUENCE baton_lock_ticket AS bigint;
//			PERFORM setval('baton_lock_ticket', m) FROM (SELECT max(t) AS m FROM
//				(SELECT ticket AS t FROM baton_lock UNION ALL SELECT ticket FROM baton_lock_waiters) u) x WHERE m > 0;
//		END IF;
//	END $$;
//	-- for observers of elections, added by Init or the first Observe:
//	-- a NOTIFY when a change of holder commits
//	CREATE OR REPLACE FUNCTION baton_lock_observe() RETURNS trigger LANGUAGE plpgsql
//	SET search_path FROM CURRENT AS $$
//	DECLARE
//		change text;
//	BEGIN
//		SELECT json_build_object(
//				'name', left(name, 500), 'holder', left(holder, 500), 'token', token, 'ticket', ticket,
//				'live', expires_at > clock_timestamp(),
//				'since', CASE WHEN isfinite(acquired_at) THEN extract(epoch FROM acquired_at)::float8 END)::text
//			INTO change FROM baton_lock WHERE name = NEW.name;
//		IF change IS NOT NULL THEN
//			PERFORM pg_notify('baton.observe.' || TG_RELID, change);
//		END IF;
//		RETURN NULL;
//	END $$;
//	CREATE CONSTRAINT TRIGGER baton_observe_insert AFTER INSERT ON baton_lock
//		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION baton_lock_observe();
//	CREATE CONSTRAINT TRIGGER baton_observe_update AFTER UPDATE ON baton_lock
//		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
//		WHEN (NEW.holder <> OLD.holder OR NEW.token <> OLD.token OR NEW.ticket <> OLD.ticket
//			OR NEW.expires_at < OLD.expires_at OR OLD.expires_at <= clock_timestamp())
//		EXECUTE FUNCTION baton_lock_observe();
//
// A constraint trigger has no CREATE OR REPLACE: Init creates each of the
// two in a DO block, only when pg_trigger has none of that name on the
// table. The function reads its table in static SQL, whose plan PL/pgSQL
// keeps (a statement planned on every call, EXECUTE, halved the lock's
// throughput), under the search_path it was created with, whatever the
// writer's; the channel it notifies is named by the table's OID
// (TG_RELID). It cuts name and holder so that a payload never
// passes NOTIFY's 8000 bytes (names and holders are at most 200 bytes; only
// rows written by hand come near).
//
// New and Dial only read the database, so that a Locker that only looks
// changes nothing in it: Inspect and ForceRelease (baton status, baton
// release --force) and Leader report every lock free where the lease
// table does not exist (nobody has locked in it yet, or ?table= is
// mistyped), and create nothing. A Locker's first Acquire, TryAcquire or
// Observe creates the tables and sequences when they are missing (once
// per Locker; a failure is that call's error, and the next call tries
// again), but not the function and triggers: they cost every change of
// holder about a sixth of the contended throughput and half the
// uncontended (measured here), which a lock nobody observes need not pay.
// Init creates all of it; otherwise the first Observe on the table adds
// them, when its user may (the table's owner); when it may not, Observe
// fails, saying to run Init as the owner. Once added they stay.
//
// The user needs SELECT, INSERT, UPDATE and DELETE on both tables and USAGE
// on both sequences (and on the schema of a schema-qualified table). A
// statement the server refuses for want of a privilege fails with a
// *baton.OptionError that gives the GRANT statements, not with
// baton.ErrUnavailable: trying again cannot mend it (baton run exits 2,
// and baton elect stops). Another refusal that trying again cannot mend
// (a lock table dropped while Lockers run, a column missing) is an error
// that says what the server refused and matches neither. Only a
// connection that fails or gets no answer, and a statement the server
// gives up on (a lock or statement timeout, a serialization failure, a
// deadlock), shuts down for, has no resources for, or cannot write (a
// primary turned standby) is baton.ErrUnavailable, from the Locker's calls
// and from Init alike. Rows of the lease table are never deleted, only
// expired: one small row per lock name ever used. Do not delete them by hand
// while clients run (an acquisition in flight could then insert a token
// drawn before the newest one); to free a lock by hand, run
// UPDATE baton_lock SET expires_at = '-infinity' WHERE name = '...', which
// is what ForceRelease (baton release --force) does. The waiters table is
// UNLOGGED: after a crash of the server it is empty, and each waiter queues
// again at its next re-check. Its rows are slots: each Locker reuses its
// own for its next wait on the same lock, so a wait updates a row (a HOT
// update, no new index entry) rather than inserting and deleting one,
// which left a dead index entry per wait for every later statement to
// walk until VACUUM came, and halved a contended lock's speed within
// seconds. A slot on which a statement failed is not used again: a copy of
// that statement arriving late must not run on another wait's row. An
// ended place keeps its row, on the 64 locks its Locker waited
// on last; Close deletes a Locker's rows. Rows whose place ended over an
// hour ago (a crashed Locker's) are deleted, on every lock, by a Locker's
// first Acquire, TryAcquire or Observe and by the Close of a Locker that
// waited. A waiters table of an older baton, keyed (name, ticket), is
// replaced (dropped and created again) by a Locker's first Acquire,
// TryAcquire or Observe and by Init when the user owns it; otherwise that
// call says so, and its owner runs Init or DROP TABLE baton_lock_waiters.
// Lockers of that older baton fail on the new table (no constraint
// matches their ON CONFLICT): stop them first. Inspect leaves such a table
// as it is, and counts its waiters; ForceRelease of a held lock fails on
// it, saying what to do.
//
// # The statements
//
// Every statement judges time by clock_timestamp(), the database's clock at
// the moment the row is examined (after any wait for its lock); the client
// sends the TTL as an interval ($3), never a point in time. The row's lock
// (taken by ON CONFLICT DO UPDATE, by UPDATE and by SELECT ... FOR UPDATE)
// serializes everything done to one lock and its queue, and tokens are drawn
// only while it is held, so they follow the order in which the lock is held.
//
// Acquire, one round trip: lock the row, then in one statement take it if
// it is free or expired and no live waiter is queued ahead of us, or claim
// it if a release handed it to our ticket $4 and nobody freed it since
// (a lease freed by its release, by our leaving or by force is never
// brought back by a late claim); otherwise, when waiting, queue
// (or keep our place) in our Locker's row: its channel $6 and slot $9.
// Locking first gives the statement a snapshot taken
// under the row's lock, so it never counts a waiter that has already left:
// that is READ COMMITTED's, which New requires of the pool's transactions
// (under REPEATABLE READ the snapshot comes before the wait, and the
// statement fails with a serialization error) and Dial sets.
// It also returns who holds the lock and how long the holder's lease and
// the places ahead have left, as intervals by the database's clock, which
// is when a waiter looks again:
//
//	SELECT FROM baton_lock WHERE name = $1 FOR UPDATE;
//	WITH ahead AS (
//		SELECT count(*) AS n, min(expires_at) AS soonest, (array_agg(holder ORDER BY ticket))[1] AS first
//		FROM baton_lock_waiters
//		WHERE name = $1 AND expires_at > clock_timestamp() AND ($4 = 0 OR ticket < $4)
//	), acq AS (
//		INSERT INTO baton_lock AS l (name, holder, token, ticket, acquired_at, expires_at, holder_clock)
//		SELECT $1, $2, nextval('baton_lock_token'), CASE WHEN ahead.n = 0 THEN $4 ELSE -1 END,
//			clock_timestamp(), clock_timestamp() + $3, $8
//		FROM ahead
//		ON CONFLICT (name) DO UPDATE SET
//			holder = EXCLUDED.holder,
//			token = CASE WHEN claim THEN l.token ELSE greatest(nextval('baton_lock_token'), l.token + 1) END,
//			ticket = CASE WHEN claim THEN l.ticket ELSE EXCLUDED.ticket END,
//			acquired_at = CASE WHEN claim THEN l.acquired_at ELSE clock_timestamp() END,
//			expires_at = clock_timestamp() + $3,
//			holder_clock = EXCLUDED.holder_clock
//		WHERE (l.expires_at <= clock_timestamp() AND EXCLUDED.ticket >= 0) -- free, nobody ahead
//			OR claim -- handed to us: $4 <> 0 AND l.ticket = $4 AND isfinite(l.expires_at)
//		RETURNING l.token
//	), deq AS (
//		UPDATE baton_lock_waiters SET expires_at = clock_timestamp()
//		WHERE name = $1 AND channel = $6 AND slot = $9 AND expires_at > clock_timestamp()
//			AND EXISTS (SELECT FROM acq)
//	), reg AS (
//		INSERT INTO baton_lock_waiters (name, channel, slot, ticket, waiter, holder, ttl, holder_clock, expires_at)
//		SELECT $1, $6, $9, coalesce(nullif($4, 0), nextval('baton_lock_ticket')), $7, $2, $3, $8, clock_timestamp() + $3
//		WHERE $5 AND NOT EXISTS (SELECT FROM acq)
//		ON CONFLICT (name, channel, slot) DO UPDATE SET ticket = EXCLUDED.ticket, waiter = EXCLUDED.waiter,
//			holder = EXCLUDED.holder, ttl = EXCLUDED.ttl, holder_clock = EXCLUDED.holder_clock, expires_at = EXCLUDED.expires_at
//		RETURNING ticket
//	)
//	SELECT (SELECT token FROM acq), (SELECT ticket FROM reg), cur.holder, cur.token,
//		CASE WHEN cur.expires_at > clock_timestamp() THEN extract(epoch FROM cur.expires_at - clock_timestamp()) END,
//		ahead.n, extract(epoch FROM ahead.soonest - clock_timestamp()), ahead.first
//	FROM ahead LEFT JOIN baton_lock cur ON cur.name = $1
//
// Renew, one statement, every RenewEvery (default TTL/3); no row means the
// lease is lost:
//
//	UPDATE baton_lock SET expires_at = clock_timestamp() + $3
//	WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp()
//
// Release, one round trip and one transaction: free the row if it still
// holds our token (locking it either way), and hand it to the first live
// waiter, who is NOTIFYed on its own channel with the token it now holds.
// The NOTIFY names the waiter's attempt that the hand-off came after (each
// attempt writes a new waiter key), and the waiter takes only one that
// names its last attempt for a hold: an older one, held up on its way
// while a later attempt ran, was claimed by that attempt, or freed since.
//
//	WITH cur AS (
//		SELECT name, token = $2 AND expires_at <> '-infinity' AS live FROM baton_lock WHERE name = $1 FOR UPDATE
//	)
//	UPDATE baton_lock t SET expires_at = CASE WHEN t.token = $2 THEN '-infinity' ELSE t.expires_at END
//	FROM cur WHERE t.name = cur.name
//	RETURNING cur.live;
//	WITH head AS (
//		SELECT ticket, channel, slot, waiter, holder, ttl, holder_clock FROM baton_lock_waiters
//		WHERE name = $1 AND expires_at > clock_timestamp() ORDER BY ticket LIMIT 1
//	), handed AS (
//		UPDATE baton_lock l SET holder = head.holder, token = greatest(nextval('baton_lock_token'), l.token + 1), ticket = head.ticket,
//			acquired_at = clock_timestamp(), expires_at = clock_timestamp() + head.ttl, holder_clock = head.holder_clock
//		FROM head WHERE l.name = $1 AND l.expires_at <= clock_timestamp()
//		RETURNING l.token, head.channel, head.slot, head.waiter
//	), gone AS (
//		UPDATE baton_lock_waiters w SET expires_at = clock_timestamp()
//		FROM handed WHERE w.name = $1 AND w.channel = handed.channel AND w.slot = handed.slot
//	)
//	SELECT pg_notify(channel, waiter || ' ' || token) FROM handed;
//
// A waiter that gives up locks the row, ends its place, frees the lock if
// it was handed to its ticket meanwhile, and hands it on (the last
// statement above). It does so also when it never heard whether its first
// statement queued it (no answer): its place is its Locker's row (channel
// and slot), and a lock handed to that place is found by the waiter key
// its statement wrote there:
//
//	UPDATE baton_lock_waiters SET expires_at = clock_timestamp() WHERE name = $1 AND channel = $2 AND slot = $3;
//	UPDATE baton_lock SET expires_at = '-infinity'
//	WHERE name = $1 AND ticket > 0 AND ticket IN ($2, (SELECT w.ticket FROM baton_lock_waiters w
//		WHERE w.name = $1 AND w.channel = $3 AND w.slot = $4 AND w.waiter = $5));
//
// A forced release locks the row, expires it and hands
// it on. A Locker's first Acquire, TryAcquire or Observe sweeps rows of the
// waiters table whose place ended over an hour ago (WHERE expires_at < clock_timestamp() - interval '1
// hour'); Close deletes the Locker's rows and those (WHERE channel = $1 OR
// expires_at < clock_timestamp() - interval '1 hour'); a Locker past 64
// locks deletes its ended rows on the one it waited on least
// recently (WHERE name = $1 AND channel = $2 AND expires_at <=
// clock_timestamp()). baton status reads the live rows, with TTL LEFT
// computed by the database (expires_at - now()) and the number of live
// waiters; CheckLease runs SELECT EXISTS (... WHERE name = $1 AND token =
// $2 AND expires_at > clock_timestamp()) in the caller's transaction.
//
// # Waiting
//
// Each Locker that has to wait opens one extra connection, which LISTENs on
// the Locker's own channel, and closes it in Close. A release hands the lock
// to the first live waiter in ticket order and notifies only that waiter:
// one release, one NOTIFY, one waiter woken, holding the lock without a
// round trip of its own (no herd; the other waiters send nothing). Waiters
// get the lock in the order they queued, and TryAcquire does not jump the
// queue: on a lock that is free but has waiters it fails, naming the first
// in line. Each waiter also looks again on its own: when the holder's lease
// ends by the database's clock (the interval the database last reported,
// so the expiry of a crashed or frozen holder is noticed as it happens) or
// when the place of the waiter ahead of it lapses, and at least every
// RenewEvery, which keeps its own place alive; a first waiter that gives
// up notifies the one now first, which looks at once (and from then on
// waits for the holder's lease to end). That look claims a lock
// handed to it whose NOTIFY was lost (the listener reconnecting), and a
// place whose waiter died lapses within one TTL, as does a lock handed to
// it. The listening connection, quiet for 3s, is sent SELECT 1; one not
// answered within the request timeout (a connection a NAT or firewall, or
// a proxy whose server side died, left open and silent, which TCP
// keepalive takes minutes to end, or never) is replaced, and every waiter
// looks again. PostgreSQL (up to 17 at least) signals every backend LISTENing in the
// database on each NOTIFY, so each waiting Locker's listener wakes on the
// server once per release, to find nothing for it; that costs server CPU,
// not statements.
//
// A Locker's first Acquire that finds the lock taken opens that
// connection, once its attempt has queued it, and then looks again at
// once: that look claims a hand-off made before the LISTEN, whose NOTIFY
// nobody heard. An Acquire that gets the lock at its first attempt opens
// nothing. A waiter whose ctx ends while the connection opens for another
// does not wait for it.
//
// Acquire returns at most the release timeout after its ctx ends, having
// left the queue when the server answers in time. A statement in flight
// then is not cut off (the server could still commit it): it and what
// follows it (giving back a lease it granted, leaving the queue) go on
// without the caller, each bounded by its timeout, and Close waits for
// them.
//
// # Observing elections
//
// Observe (baton.Locker.Observe) reports the terms of an election, the
// holders of the lock of its name. The triggers above NOTIFY the channel
// baton.observe.OID (OID: the lease table's) when a transaction that gave
// a lock to a new holder or freed it commits. Deferred to the COMMIT, the
// function reads the row as it is then: a release that hands the lock to a
// waiter (two UPDATEs, one transaction) notifies once, with the new holder,
// and PostgreSQL delivers identical payloads of one transaction once. The
// row's lock orders its writers and notifications arrive in commit order,
// so observers get the changes of a lock in the order they were made.
// Renewals (expires_at moving forward) fire nothing.
//
// Each observer has a connection of its own (made with the pool's
// settings, closed when its context ends or the Locker is closed). It
// LISTENs on the table's channel and on one of its own, then reads the
// row in one transaction that share-locks it and ends by notifying its
// own channel, the mark:
//
//	SELECT true FROM baton_lock WHERE name = $1 FOR SHARE;
//	SELECT l.name IS NOT NULL, coalesce(l.holder, ''), coalesce(l.token, 0), coalesce(l.ticket, 0),
//		CASE WHEN isfinite(l.acquired_at) THEN l.acquired_at END,
//		coalesce(l.expires_at = '-infinity', false), -- freed, not expired
//		CASE WHEN l.expires_at > clock_timestamp() THEN extract(epoch FROM l.expires_at - clock_timestamp())::float8 END,
//		w.n, extract(epoch FROM w.soonest - clock_timestamp())::float8
//	FROM (
//		SELECT count(*) AS n, min(expires_at) AS soonest FROM baton_lock_waiters
//		WHERE name = $1 AND expires_at > clock_timestamp()
//	) w LEFT JOIN baton_lock l ON l.name = $1;
//	SELECT pg_notify($1, $2); -- the observer's own channel
//
// With the row locked, every change that committed before the mark is in
// the read and every later one is notified after the mark, so between a
// read and the notifications nothing is missed or counted twice. The
// observer reads the row so at the start, after each change it is
// notified of, when the leader's lease ends by the database's clock (the
// interval the database reported, never the client's clock), and at
// least every minute. The terms:
//
//   - A lock freed (released, released by force, expired by hand) with
//     nobody in line: no leader.
//   - An expiry writes nothing: the read at the lease's end finds it
//     expired, and with no live waiter queued, that is no leader. With a
//     waiter queued, the lock is passing to the first of them, who takes
//     it when it looks again, at once when it is alive; the observer reads
//     again soon (after 10ms, then less often, up to 1s) and reports that
//     waiter as the next leader directly, as for a hand-off at a release.
//     A crashed leader is thus followed by the next in line with no empty
//     term between, as on etcd. A first waiter that never takes it
//     (frozen, or gone) keeps the old term alive until its place lapses,
//     within its TTL.
//   - A lock taken by someone who never queued (its ticket column is 0)
//     was free with nobody in line just before: a term with no leader
//     comes first, even when no read saw the lock free. One that went to
//     a waiter (a ticket) follows its previous holder directly.
//   - Term.Since is acquired_at, by the database's clock, as baton status
//     shows it; Token is the lease's token, Key its key.
//
// What observers do not get:
//
//   - While an observer's connection is down nothing is reported. It
//     connects again (after 50ms, then up to 2s apart; when the database
//     has not answered for one TTL, the observation ends, closing its
//     channel) and reports what it then finds, by the rules above: a
//     release or an expiry as no leader, a holder who took the lock
//     directly after a term with no leader. Terms that began and ended
//     while it was away are not seen, nor an empty term between two
//     holders who took the lock from the queue.
//   - Every change of holder in a table is sent to every observer of that
//     table, which keeps those of its own lock, and PostgreSQL signals
//     every listening connection of the database on each NOTIFY. Each
//     observer reads (and share-locks) its row once per change and once
//     per lease's end, and needs the Locker's privileges (FOR SHARE needs
//     UPDATE) on the primary.
//   - With the triggers, every change of holder NOTIFYs: should
//     PostgreSQL's notification queue fill up (a listening session
//     elsewhere in the database that stops reading, for hours), those
//     commits fail, as hand-offs already would. Observers read
//     notifications as they come, whether or not their channel is read:
//     terms wait for a slow reader in memory, not in that queue, up to
//     1,024 of them (then the oldest go).
//   - A holder longer than 500 characters (written by hand: Lockers'
//     are at most 200 bytes) is cut in the NOTIFY; reads show it whole.
//
// # What is guaranteed
//
//   - At most one holder per lock at a time, as the database sees it: the
//     row's lock serializes every acquisition, and a row is taken only when
//     it is free, expired by the database's clock, or handed to the taker.
//   - Tokens strictly increase across holders of one lock: they are drawn
//     from the token sequence under the row's lock, and a sequence never
//     hands out a smaller value on one primary, crashes included (it skips
//     values instead); and never below the lock's last token plus one, so
//     that a sequence set back (restored, or left behind by a logical
//     replication cutover, which copies no sequence values) cannot send a
//     lock's tokens backwards. A sequence that a Locker's first
//     acquisition or Init has to make again (dropped, or a table restored
//     alone) starts above every token
//     and ticket in the tables. A ticket sequence set back while waiters'
//     tickets above it live is not caught: a new waiter could then claim
//     a lease handed to another; set it forward (setval) before Lockers
//     use it. A lock service whose rows and sequences are both gone (a
//     database rebuilt) starts its tokens over, and a fence that saw the
//     old ones refuses the new: FencedLease.Raise reports that as a
//     baton.StaleTokenError with Ahead.
//   - Expiry is the database's business alone: the client never sends a
//     time the database compares, so a client whose clock is wrong can
//     neither extend a lease nor take one early. holder_clock records what
//     the holder believed the time was, to spot such a client.
//   - A holder learns it lost the lease when a renewal is refused (the row
//     holds another token or has expired), or when its local deadline (the
//     send time of the last confirmed renewal + TTL - drift, on its
//     monotonic clock) passes without one. Its work context is cancelled
//     then: before the database can free the lock, when the clocks of the
//     client and the database run at the same rate.
//   - A lease is a row, not a session: a holder whose connection drops and
//     who reconnects before its local deadline keeps its lease; one cut off
//     for good loses it within one TTL. A frozen holder's lock is taken
//     over as soon as its lease expires by the database's clock: its open
//     connection does not keep it, unlike pg_advisory_lock.
//
// # What is not
//
//   - Replication: tokens, grants and renewals are only as durable as the
//     commit. After a failover to an asynchronous standby, the newest
//     commits may be gone: a sequence can hand out values it already
//     handed out (tokens go backwards, as a Redis replica's counter can),
//     and a lock can be granted twice. The guarantees hold on one primary,
//     or with synchronous replication (synchronous_commit = on or
//     remote_apply, with synchronous_standby_names). Run the lock tables
//     with synchronous_commit = on (the default): with it off, a crash can
//     lose a renewal the holder was told had committed.
//   - The database's clock: a jump of the server's wall clock moves every
//     expiry (forward ends leases early, while their holders still work
//     until their next renewal is refused, at most RenewEvery later;
//     backward extends them). Keep the server's clock slewed by NTP, never
//     stepped, and fence writes that matter.
//   - A lease cannot stop a paused holder from writing after it ended;
//     nothing checked before a write can. Write through a fence
//     (fence/postgres), in the same transaction as CheckLease where the
//     fence lives in this database: the fence refuses tokens older than the
//     newest it has seen, and CheckLease also refuses writes once the
//     lease has expired by the database's clock, before the next holder has
//     raised the fence (the guide's first gap).
//   - A statement cut off by the request timeout may still have committed:
//     an acquisition nobody heard back from ends within one TTL. Sooner
//     only where it was granted to a place in the queue: the waiter that
//     gave up leaves the queue, which frees what was handed to it. A
//     lock granted at once, with nobody queued, keeps no trace of which
//     attempt took it, so it stays taken until its TTL runs out (nobody
//     holds it meanwhile; the lock is only late). pgx sends a cancel
//     request when it gives up on a statement, and for a client cut off
//     from the server, so that the cancel cannot get through either, Dial
//     sets statement_timeout to half the request timeout (New leaves that
//     to the pool's settings; see New): the server ends any statement that
//     has run that long. An acquisition, which the client gives up only at
//     the request timeout, therefore does not commit after its client gave
//     up on it. A renewal is given up sooner, at the lease's local
//     deadline (under a second after its send at MinTTL): one held up on
//     the server can still commit up to statement_timeout after it began,
//     after the holder stopped, and keep the row taken for another TTL
//     from then. That is safe (the holder's work context was cancelled at
//     the deadline, and tokens order any later holder's writes), and
//     Release of a lease lost by its local deadline frees its row all the
//     same, by its token, so never another holder's; a renewal that comes
//     after that finds the row freed and extends nothing. What the
//     network delays before the server reads it is bounded by neither:
//     such a copy, arriving late, can take a free lock (or, for a waiter,
//     a place in the queue) for an acquisition that failed, which then
//     lapses within one TTL (a place handed the lock just before it
//     lapses: within two). It cannot take a lock that is held, reserved
//     for a waiter, or freed since it was handed to that acquisition.
//
// # TTL
//
// At least MinTTL (1s). The holder renews every TTL/3 by default and gives
// up at its local deadline, so a renewal must make its round trip and
// commit well within a third of the TTL, also on a busy client.
//
// # Benchmarks
//
// go test -run '^$' -bench . -count 5 ./postgres/ on the 2-core development
// machine, a shared VM (PostgreSQL 15 as the tests run it, with fsync and
// synchronous_commit off; the spread between runs is ±20%, up to a third
// over a session, so compare the two columns of one run). Medians; pg_advisory_lock is session-level,
// each client on its own connection:
//
//	                                  baton            pg_advisory_lock
//	uncontended cycle                 2,022 cycles/s   6,511 cycles/s
//	8 contenders (2026-12-01)         1,531 cycles/s   7,781 cycles/s
//	  fewest / most cycles of one     0.97 / 1.02      0.99 / 1.01   (of a fair share)
//	holder frozen with SIGSTOP, TTL 1s:
//	  lock taken after its expiry     2-3 ms           never (0 of 6 within 3s)
//	  lock taken after the freeze     ~990 ms
//
// Against ZooKeeper's lock recipe (go-zookeeper's zk.Lock, 8 contenders on
// a server on the same machine), in alternating rounds so that the
// machine's slow spells fall on both (the bench module's
// BenchmarkPostgresVsZooKeeper): 1.03x over fifteen runs in three sets
// (set medians 1.00x, 1.02x and 1.07x, that one 1,010 against 947
// cycles/s; single runs 0.97x to 1.10x). (With observers' triggers on the
// table, which Init or an Observe adds, expect about a sixth less under
// contention and half uncontended.) A cycle of baton's is two round trips of a few statements that write WAL
// (the lease row; the queue when contended), and under contention every
// release also wakes each waiting Locker's listener on the server; an
// advisory lock writes nothing and is handed on inside the server's lock
// manager, but lives and dies with its session, which is why a frozen
// holder keeps it. No waiter starves: the queue is FIFO.
package postgres
