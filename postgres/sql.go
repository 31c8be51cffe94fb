package postgres

import "strings"

// statements is the SQL one Locker runs, built once from its table name.
// Every decision about time is made by the database's clock_timestamp();
// the client sends the TTL as an interval, never a point in time. The doc
// comment of the package shows them with the default names.
//
// One lock is one row of the lease table, and that row's lock (FOR UPDATE,
// or the lock ON CONFLICT DO UPDATE takes) serializes everything done to
// the lock and its queue: acquisitions, renewals, releases, hand-offs and
// waiters leaving. Tokens are drawn from the sequence only while holding
// it, so they follow the order in which the lock is held.
type statements struct {
	// exists says whether the lock tables and sequences exist ($1..$4,
	// their quoted names), and whether the waiters table is one of an
	// older baton (without slots), which create replaces.
	exists    string
	create    string // the tables and sequences, one simple-protocol round trip
	observers string // the observers' function and triggers, likewise

	// attempt takes the lock, claims it when it was handed to us, or
	// queues for it, in one statement:
	//   $1 name, $2 holder, $3 TTL (interval), $4 our ticket (0: none yet),
	//   $5 queue when not acquired, $6 our NOTIFY channel, $7 our waiter
	//   key, $8 the holder's own clock (recorded, never compared), $9 our
	//   slot (the waiters row this acquisition uses).
	// It returns: the token when acquired; our ticket when queued; the
	// holder, its token and the seconds its lease has left by the
	// database's clock (NULL when expired), as of the statement's start;
	// the number of live waiters ahead of us, the seconds until the
	// soonest of their places expires, and the first one's holder.
	attempt string
	renew   string // $1 name, $2 token, $3 TTL; one row when extended
	lockRow string // $1 name; the lock's row, locked for the transaction
	release string // $1 name, $2 token; frees our row, locks it either way, says if it was ours
	// handOff grants a free lock to the first live waiter, takes it off
	// the queue and NOTIFYs it with the token: $1 name.
	handOff string
	leave   string // $1 name, $2 channel, $3 slot; leave the queue
	// tellHead, after a leave: when the waiter at ticket $2 was first in
	// line for $1, NOTIFYs the live waiter now first to look again (token
	// 0), which then waits for the holder's lease to end, not RenewEvery.
	tellHead string
	freeOur  string // $1 name, $2 ticket, $3 channel, $4 slot, $5 key; free a lease handed to ticket, or to the place our attempt with key made (its ticket maybe unheard)
	forget   string // $1 channel; delete a closing Locker's waiters rows, and swept ones
	// forgetName deletes a Locker's ended rows for one lock ($1 name, $2
	// channel); sweep deletes every row whose place ended an hour ago.
	forgetName string
	sweep      string
	// inspect, inspectNames and forceRelease serve baton status and
	// baton release --force.
	inspect      string
	inspectNames string // $1 names (text[])
	liveToken    string // $1 name; the live holder's token, identity and start
	forceRelease string // $1 name, $2 the token read by liveToken

	// The observer's statements (observe.go). observeSetup returns the
	// lease table's OID (NULL when missing), which names the channel its
	// triggers notify, and how many of the two triggers exist: $1 the
	// table's quoted name. observeLock share-locks the row ($1 name), so
	// that no change to it commits until the transaction's end;
	// observeRead then reads it and its live waiters; observeMark
	// notifies the observer itself ($1 channel, $2 payload) at that end.
	observeSetup string
	observeLock  string
	observeRead  string
	observeMark  string
}

func newStatements(n names) statements {
	r := n.replacer()
	return statements{
		exists:       `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regclass($3) IS NOT NULL AND to_regclass($4) IS NOT NULL, to_regclass($2) IS NOT NULL AND NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass($2) AND attname = 'slot' AND NOT attisdropped)`,
		create:       r.Replace(createSQL),
		observers:    strings.ReplaceAll(r.Replace(observersSQL), "{lock_timeout}", "100ms"),
		attempt:      strings.ReplaceAll(r.Replace(attemptSQL), "{claim}", claimSQL),
		renew:        r.Replace(renewSQL),
		lockRow:      r.Replace(lockRowSQL),
		release:      r.Replace(releaseSQL),
		handOff:      r.Replace(handOffSQL),
		leave:        r.Replace(leaveSQL),
		tellHead:     r.Replace(tellHeadSQL),
		freeOur:      r.Replace(freeOurSQL),
		forget:       r.Replace(forgetSQL),
		forgetName:   r.Replace(forgetNameSQL),
		sweep:        r.Replace(sweepSQL),
		inspect:      r.Replace(inspectSQL),
		inspectNames: r.Replace(inspectNamesSQL),
		liveToken:    r.Replace(liveTokenSQL),
		forceRelease: r.Replace(forceReleaseSQL),
		observeSetup: `SELECT to_regclass($1)::oid, (` + triggerCountSQL + `)`,
		observeLock:  r.Replace(observeLockSQL),
		observeRead:  r.Replace(observeReadSQL),
		observeMark:  `SELECT pg_notify($1, $2)`,
	}
}

// replacer fills a statement template with n's quoted names.
func (n names) replacer() *strings.Replacer {
	return strings.NewReplacer(
		"{lease}", n.lease,
		"{waiters}", n.waiters,
		"{token_seq}", "'"+n.tokenSeq+"'", // nextval takes the name as text
		"{ticket_seq}", "'"+n.ticketSeq+"'",
		"{waiters_name}", "'"+n.waiters+"'",
		"{lock_key}", "'"+n.table+"'",
		"{observe_fn}", n.observeFn,
		"{token_seq_name}", n.tokenSeq,
		"{ticket_seq_name}", n.ticketSeq,
	)
}

// createSQL is the schema without the observers' triggers: sequences and
// tables. The advisory lock serializes concurrent creators: two CREATE ...
// IF NOT EXISTS can otherwise both find the name free and one fails on the
// catalog's unique index.
//
// A sequence made here while the tables already hold rows (dropped by
// hand, or a table restored alone with pg_dump -t) starts above every
// token and ticket in them: a ticket equal to the live row's would let a
// new waiter "claim" the live lease, token and all. No one can draw from
// it before this transaction commits, so setval races with no nextval.
//
// A waiters row is a slot of one Locker (channel, slot), reused by that
// Locker's later waits on the same lock: queueing, a hand-off and leaving
// update the row, and an ended place keeps its row with expires_at in the
// past. No update touches an indexed column, so each one is a HOT update
// (fillfactor 50 leaves the page room for it) and the primary key keeps
// one entry per slot. Inserting and deleting a row per wait instead left a
// dead index entry per wait, and every statement that reads the queue
// walked them all until VACUUM came: a contended lock slowed to half its
// speed within seconds. A Locker keeps its rows on the maxKeptLocks locks it
// waited on last, and Close deletes them; rows whose place ended over an
// hour ago (a crashed Locker's) are deleted by a Locker's first call that
// writes (sweepSQL) and when one that waited closes (forgetSQL). A
// waiters table of an older baton, keyed (name, ticket), holds only places
// in queues, so it is replaced; that baton's Lockers then fail on it (no
// constraint matches their ON CONFLICT) and must be stopped first.
const createSQL = `SELECT pg_advisory_xact_lock(hashtext('baton lock schema'), hashtext({lock_key}));
CREATE TABLE IF NOT EXISTS {lease} (
	name         text        PRIMARY KEY,
	holder       text        NOT NULL,
	token        bigint      NOT NULL,
	ticket       bigint      NOT NULL DEFAULT 0,
	acquired_at  timestamptz NOT NULL,
	expires_at   timestamptz NOT NULL,
	holder_clock timestamptz
);
DO $$ BEGIN
	IF to_regclass({waiters_name}) IS NOT NULL AND NOT EXISTS (
			SELECT FROM pg_attribute WHERE attrelid = to_regclass({waiters_name}) AND attname = 'slot' AND NOT attisdropped) THEN
		DROP TABLE {waiters};
	END IF;
END $$;
CREATE UNLOGGED TABLE IF NOT EXISTS {waiters} (
	name         text        NOT NULL,
	channel      text        NOT NULL,
	slot         integer     NOT NULL,
	ticket       bigint      NOT NULL,
	waiter       text        NOT NULL,
	holder       text        NOT NULL,
	ttl          interval    NOT NULL,
	holder_clock timestamptz,
	expires_at   timestamptz NOT NULL,
	PRIMARY KEY (name, channel, slot)
) WITH (fillfactor = 50);
DO $$ BEGIN
	IF to_regclass({token_seq}) IS NULL THEN
		CREATE SEQUENCE {token_seq_name} AS bigint;
		PERFORM setval({token_seq}, m) FROM (SELECT max(token) AS m FROM {lease}) x WHERE m > 0;
	END IF;
	IF to_regclass({ticket_seq}) IS NULL THEN
		CREATE SEQUENCE {ticket_seq_name} AS bigint;
		PERFORM setval({ticket_seq}, m) FROM (SELECT max(t) AS m FROM (SELECT ticket AS t FROM {lease} UNION ALL SELECT ticket FROM {waiters}) u) x WHERE m > 0;
	END IF;
END $$`

// observersSQL adds the observers' function and triggers to the lease
// table. CREATE TRIGGER waits for the table's writers and holds up the new
// ones until it commits; lock_timeout ({lock_timeout}) bounds that wait
// (behind autovacuum, or an UPDATE left open by hand), so that every lock
// in the table is not held up behind it for long: for the first Observe,
// 100ms, well below a renewal's margin at MinTTL (it tries again until
// its request timeout, then fails with ErrUnavailable, and a reconnecting
// observer tries again); for Init, an operator's one-off, 1s. Only Init
// and the first Observe run it: the triggers cost every
// change of holder about a sixth of the contended throughput (and half the
// uncontended), which a lock nobody observes need not pay. The function
// names its table in static SQL, whose plan PL/pgSQL caches: a statement
// planned on each call (EXECUTE) halved the lock's throughput. SET
// search_path FROM CURRENT has it find the table its creator meant,
// whatever the search_path of the session whose change fires it.
const observersSQL = `SET LOCAL lock_timeout = '{lock_timeout}';
SELECT pg_advisory_xact_lock(hashtext('baton lock schema'), hashtext({lock_key}));
CREATE OR REPLACE FUNCTION {observe_fn}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
	change text;
BEGIN
	SELECT json_build_object(
			'name', left(name, 500), 'holder', left(holder, 500), 'token', token, 'ticket', ticket,
			'live', expires_at > clock_timestamp(),
			'since', CASE WHEN isfinite(acquired_at) THEN extract(epoch FROM acquired_at)::float8 END)::text
		INTO change FROM {lease} WHERE name = NEW.name;
	IF change IS NOT NULL THEN
		PERFORM pg_notify('baton.observe.' || TG_RELID, change);
	END IF;
	RETURN NULL;
END $$;
DO $$ BEGIN
	IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = '{lease}'::regclass AND tgname = 'baton_observe_insert') THEN
		CREATE CONSTRAINT TRIGGER baton_observe_insert AFTER INSERT ON {lease}
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {observe_fn}();
	END IF;
	IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = '{lease}'::regclass AND tgname = 'baton_observe_update') THEN
		CREATE CONSTRAINT TRIGGER baton_observe_update AFTER UPDATE ON {lease}
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (NEW.holder <> OLD.holder OR NEW.token <> OLD.token OR NEW.ticket <> OLD.ticket
				OR NEW.expires_at < OLD.expires_at OR OLD.expires_at <= clock_timestamp())
			EXECUTE FUNCTION {observe_fn}();
	END IF;
END $$`

// triggerCountSQL counts the observers' triggers on the table $1.
const triggerCountSQL = `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname IN ('baton_observe_insert', 'baton_observe_update')`

// attemptSQL: see statements.attempt. A claim ({claim}, filled in by
// newStatements) keeps the token of a lease handed to our ticket and
// extends it, live or expired by time, as long as nobody else took the
// lock since; never one that was freed (expires_at '-infinity': a release,
// our own leaving, an operator's force-release), which a late copy of a
// claim would otherwise bring back to life for a waiter that is gone. Such
// a lock, when free, is taken like any other, with a new token.
const attemptSQL = `WITH ahead AS (
	SELECT count(*) AS n, min(expires_at) AS soonest,
		(array_agg(holder ORDER BY ticket))[1] AS first
	FROM {waiters}
	WHERE name = $1 AND expires_at > clock_timestamp()
		AND ($4::bigint = 0 OR ticket < $4::bigint)
), acq AS (
	INSERT INTO {lease} AS l (name, holder, token, ticket, acquired_at, expires_at, holder_clock)
	SELECT $1, $2, nextval({token_seq}), CASE WHEN ahead.n = 0 THEN $4::bigint ELSE -1 END,
		clock_timestamp(), clock_timestamp() + $3::interval, $8::timestamptz
	FROM ahead
	ON CONFLICT (name) DO UPDATE SET
		holder = EXCLUDED.holder,
		token = CASE WHEN {claim} THEN l.token ELSE greatest(nextval({token_seq}), l.token + 1) END,
		ticket = CASE WHEN {claim} THEN l.ticket ELSE EXCLUDED.ticket END,
		acquired_at = CASE WHEN {claim} THEN l.acquired_at ELSE clock_timestamp() END,
		expires_at = clock_timestamp() + $3::interval,
		holder_clock = EXCLUDED.holder_clock
	WHERE (l.expires_at <= clock_timestamp() AND EXCLUDED.ticket >= 0) OR {claim}
	RETURNING l.token
), deq AS (
	UPDATE {waiters} SET expires_at = clock_timestamp()
	WHERE name = $1 AND channel = $6 AND slot = $9 AND expires_at > clock_timestamp()
		AND EXISTS (SELECT FROM acq)
), reg AS (
	INSERT INTO {waiters} (name, channel, slot, ticket, waiter, holder, ttl, holder_clock, expires_at)
	SELECT $1, $6, $9, coalesce(nullif($4::bigint, 0), nextval({ticket_seq})), $7, $2, $3::interval, $8::timestamptz,
		clock_timestamp() + $3::interval
	WHERE $5::bool AND NOT EXISTS (SELECT FROM acq)
	ON CONFLICT (name, channel, slot) DO UPDATE SET ticket = EXCLUDED.ticket, waiter = EXCLUDED.waiter,
		holder = EXCLUDED.holder, ttl = EXCLUDED.ttl, holder_clock = EXCLUDED.holder_clock, expires_at = EXCLUDED.expires_at
	RETURNING ticket
)
SELECT (SELECT token FROM acq), (SELECT ticket FROM reg), cur.holder, cur.token,
	CASE WHEN cur.expires_at > clock_timestamp() THEN extract(epoch FROM cur.expires_at - clock_timestamp())::float8 END,
	ahead.n, extract(epoch FROM ahead.soonest - clock_timestamp())::float8, ahead.first
FROM ahead LEFT JOIN {lease} cur ON cur.name = $1`

// claimSQL says that the lease row l was handed to our ticket $4 and not
// freed since.
const claimSQL = `($4::bigint <> 0 AND l.ticket = $4::bigint AND isfinite(l.expires_at))`

const renewSQL = `UPDATE {lease} SET expires_at = clock_timestamp() + $3::interval
WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp()`

const lockRowSQL = `SELECT FROM {lease} WHERE name = $1 FOR UPDATE`

// releaseSQL frees the row if it holds our token, and locks it either way
// (for the hand-off that follows in the same transaction). It returns
// whether the row was still ours and not freed by force: a row taken by
// another holder (a new token) or forced free is a loss the release found.
// A row that merely expired while still holding our token is not: nobody
// else held the lock (taking it draws a new token), and a release that
// reaches the server late, the work having stopped before the local
// deadline, finds it so. No row is returned when there is none.
const releaseSQL = `WITH cur AS (
	SELECT name, token = $2 AND expires_at <> '-infinity' AS live FROM {lease} WHERE name = $1 FOR UPDATE
)
UPDATE {lease} t SET expires_at = CASE WHEN t.token = $2 THEN '-infinity' ELSE t.expires_at END
FROM cur WHERE t.name = cur.name
RETURNING cur.live`

const handOffSQL = `WITH head AS (
	SELECT ticket, channel, slot, waiter, holder, ttl, holder_clock FROM {waiters}
	WHERE name = $1 AND expires_at > clock_timestamp()
	ORDER BY ticket LIMIT 1
), handed AS (
	UPDATE {lease} l SET holder = head.holder, token = greatest(nextval({token_seq}), l.token + 1), ticket = head.ticket,
		acquired_at = clock_timestamp(), expires_at = clock_timestamp() + head.ttl, holder_clock = head.holder_clock
	FROM head WHERE l.name = $1 AND l.expires_at <= clock_timestamp()
	RETURNING l.token, head.channel, head.slot, head.waiter
), gone AS (
	UPDATE {waiters} w SET expires_at = clock_timestamp()
	FROM handed WHERE w.name = $1 AND w.channel = handed.channel AND w.slot = handed.slot
)
SELECT pg_notify(channel, waiter || ' ' || token) FROM handed`

const leaveSQL = `UPDATE {waiters} SET expires_at = clock_timestamp() WHERE name = $1 AND channel = $2 AND slot = $3`

const tellHeadSQL = `SELECT pg_notify(w.channel, w.waiter || ' 0') FROM {waiters} w
WHERE w.name = $1 AND w.expires_at > clock_timestamp()
	AND NOT EXISTS (SELECT FROM {waiters} a WHERE a.name = $1 AND a.ticket < $2 AND a.expires_at > clock_timestamp())
ORDER BY w.ticket LIMIT 1`

const forgetSQL = `DELETE FROM {waiters} WHERE channel = $1 OR expires_at < clock_timestamp() - interval '1 hour'`

const forgetNameSQL = `DELETE FROM {waiters} WHERE name = $1 AND channel = $2 AND expires_at <= clock_timestamp()`

const sweepSQL = `DELETE FROM {waiters} WHERE expires_at < clock_timestamp() - interval '1 hour'`

const freeOurSQL = `UPDATE {lease} SET expires_at = '-infinity'
WHERE name = $1 AND ticket > 0 AND ticket IN ($2::bigint,
	(SELECT w.ticket FROM {waiters} w WHERE w.name = $1 AND w.channel = $3 AND w.slot = $4 AND w.waiter = $5))`

const inspectSQL = `SELECT t.name, t.holder, t.token, t.acquired_at,
	extract(epoch FROM t.expires_at - now())::float8,
	(SELECT count(*) FROM {waiters} w WHERE w.name = t.name AND w.expires_at > now())
FROM {lease} t WHERE t.expires_at > now() ORDER BY t.name COLLATE "C"`

const inspectNamesSQL = `SELECT n.name, t.holder, t.token, t.acquired_at,
	extract(epoch FROM t.expires_at - now())::float8,
	(SELECT count(*) FROM {waiters} w WHERE w.name = n.name AND w.expires_at > now())
FROM unnest($1::text[]) AS n(name)
LEFT JOIN {lease} t ON t.name = n.name AND t.expires_at > now()
ORDER BY n.name COLLATE "C"`

const liveTokenSQL = `SELECT token, holder, acquired_at FROM {lease} WHERE name = $1 AND expires_at > clock_timestamp()`

// forceReleaseSQL expires the row only while it holds the token read
// before (liveTokenSQL): a statement that runs late, after the client gave
// up on it, cannot end a later holder's lease.
const forceReleaseSQL = `WITH cur AS (
	SELECT name, holder, token, acquired_at, expires_at FROM {lease}
	WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp() FOR UPDATE
)
UPDATE {lease} t SET expires_at = '-infinity' FROM cur WHERE t.name = cur.name
RETURNING cur.holder, cur.token, cur.acquired_at,
	greatest(extract(epoch FROM cur.expires_at - clock_timestamp())::float8, 0),
	(SELECT count(*) FROM {waiters} w WHERE w.name = $1 AND w.expires_at > clock_timestamp())`

// checkSQL is CheckLease's statement on the lease table lease (quoted):
// true while the row holds token $2 and has not expired. It is built per
// call from the lease's key, without the Locker, so it is one concatenation.
func checkSQL(lease string) string {
	return `SELECT EXISTS (SELECT FROM ` + lease + ` WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp())`
}

const observeLockSQL = `SELECT true FROM {lease} WHERE name = $1 FOR SHARE`

const observeReadSQL = `SELECT l.name IS NOT NULL, coalesce(l.holder, ''), coalesce(l.token, 0), coalesce(l.ticket, 0),
	CASE WHEN isfinite(l.acquired_at) THEN l.acquired_at END,
	coalesce(l.expires_at = '-infinity', false),
	CASE WHEN l.expires_at > clock_timestamp() THEN extract(epoch FROM l.expires_at - clock_timestamp())::float8 END,
	w.n, extract(epoch FROM w.soonest - clock_timestamp())::float8
FROM (
	SELECT count(*) AS n, min(expires_at) AS soonest FROM {waiters}
	WHERE name = $1 AND expires_at > clock_timestamp()
) w LEFT JOIN {lease} l ON l.name = $1`
