// Package postgres keeps fences in PostgreSQL: the storage-side check that
// makes a stale lock holder harmless, done in the same transaction as the
// writes it protects.
//
// # What is guaranteed
//
// A write made through the Store (Check or WithTx in the caller's
// transaction, Insert, MarkDone) is committed only if its token is at least
// as new as the newest token the fence has accepted for its resource, and
// the fence and the write commit together or not at all. So once a holder
// with token 42 has raised the fence, no write with token 41 commits,
// however long its holder was frozen; and a write with token 41 that
// committed did so before the fence moved to 42. "At least as new", not
// "newer", because one holder makes many writes with one token.
//
// # How
//
// The fence table holds one row per resource:
//
//	CREATE TABLE IF NOT EXISTS baton_fence (
//		resource   text        PRIMARY KEY,
//		last_token bigint      NOT NULL,
//		updated_at timestamptz NOT NULL DEFAULT now() -- when last_token was first accepted
//	);
//
// The check runs first in the writing transaction. When the fence already
// holds exactly the token, the usual case once a holder has made its first
// write, it share-locks the row:
//
//	SELECT 1 FROM baton_fence
//	WHERE resource = $1
//		AND CASE WHEN last_token = $2 THEN pg_advisory_xact_lock_shared(<queue key>) IS NOT NULL END
//	FOR SHARE
//
// Otherwise (a new token, a stale one, or no row yet) it applies the guide's
// "at least as new" rule as one upsert:
//
//	INSERT INTO baton_fence AS cur (resource, last_token)
//	SELECT $1, $2 FROM (
//		SELECT pg_advisory_xact_lock(<queue key>)
//		WHERE NOT EXISTS (SELECT 1 FROM baton_fence WHERE resource = $1 AND last_token > $2)
//	) AS queue
//	ON CONFLICT (resource) DO UPDATE SET last_token = EXCLUDED.last_token,
//		updated_at = CASE WHEN cur.last_token < EXCLUDED.last_token THEN now() ELSE cur.updated_at END
//	WHERE cur.last_token <= EXCLUDED.last_token
//
// The queue key is a 64-bit hash of the table's OID and the resource
// (hashtextextended, so PostgreSQL 11 or later). The advisory locks on it
// queue a raise fairly against the checks: see below.
//
// One affected row means the token was accepted; none means it is stale,
// and the Store reads the newest token to return a *baton.StaleTokenError
// (which matches baton.ErrStaleToken).
//
// This is safe under READ COMMITTED, PostgreSQL's default, without
// retries. Both statements lock the fence row until the
// transaction ends (a raise of a token already stale, refused before it
// waits, locks nothing), and both judge the row's newest committed version, not
// their snapshot: if another transaction holds a conflicting lock they wait
// for it to end, and if it changed the row they re-evaluate their condition
// against the new version (PostgreSQL's documented behaviour for SELECT FOR
// SHARE and for INSERT ... ON CONFLICT DO UPDATE under READ COMMITTED). A
// raise takes an exclusive row lock, which conflicts with the share locks.
// So two raises cannot both pass against the same old value, the stored
// token only grows, and a transaction that passed the check keeps the row
// locked until it commits or rolls back: no newer token is accepted while
// its writes are uncommitted, and no older token passes once a newer one
// has committed. Transactions with the current token share the lock and run
// side by side; a raise waits for those under way, and those that begin
// after it wait for the raise (and are then refused as stale). Row locks
// alone would not queue them: PostgreSQL grants a FOR SHARE at once while
// the row holds only share locks, even with a raise waiting, so an older
// holder whose fenced transactions overlapped one another kept the raise
// out for as long as it went on writing (TestStore_Raise_NotStarved: 5s,
// and 295 more of its transactions). The queue lock is an advisory lock
// of the transaction, whose waiters PostgreSQL serves in order: a check
// takes it shared just before its row lock, a raise exclusively before
// its own, unless the fence already holds a newer token (the raise is
// then refused without waiting, as it would be after). Insert's and
// MarkDone's first statement share-locks the row without it (a second,
// which raises the fence, comes only for a new or stale token): they keep
// a raise waiting for their own run at most, and one made from inside an
// open fenced transaction of the same resource must not wait for a raise
// that waits for that transaction. For the same reason,
// make a transaction's fenced writes in it: a WithTx or Check of the
// same resource on another connection, inside an open WithTx, waits
// behind a queued raise, which waits for the open transaction, until a
// ctx ends. A transaction that checks several resources had best check
// them in one order, before its writes: two that check the same two in
// opposite orders while raises of both are queued wait for each other
// until PostgreSQL's deadlock detector reorders the queue, after its
// deadlock_timeout (1s by default). The rest is READ
// COMMITTED's behaviour, and WithTx begins its transactions at READ COMMITTED whatever
// the default. Under REPEATABLE READ or SERIALIZABLE the order would hold
// too, but a transaction whose check raised the fence would read with a
// snapshot taken before the raise waited for the older holder, without
// what that one committed meanwhile: Check refuses a raise of the fence
// in such a transaction (an error matching baton.ErrInvalidOption, for the
// caller to roll back); raise it before the transaction begins, and the
// transaction's checks only share the row's lock. A stale token is
// refused as stale there too, or with a serialization error (SQLSTATE
// 40001) when the newer raise came after the snapshot; either way nothing
// is written.
//
// The guide's idempotent write comes with it: Row and InsertOnce issue
// INSERT ... ON CONFLICT (key) DO NOTHING, so a redo by the next holder
// cannot create a duplicate. Insert checks the fence and inserts a row in
// one statement, and one round trip when the fence holds the token (see its
// documentation for the SQL); MarkDone records a finished run the same way
// in the runs table:
//
//	CREATE TABLE IF NOT EXISTS baton_runs (
//		resource text        NOT NULL,
//		run_id   text        NOT NULL,
//		token    bigint      NOT NULL,
//		done_at  timestamptz NOT NULL DEFAULT now(),
//		PRIMARY KEY (resource, run_id)
//	);
//
// New (and so Open) creates the tables that are missing, unless
// WithCreate(false), and checks the tables, as Init does after creating
// them, with one statement that reads the catalogs: each must have the
// columns above, with those types (varchar will do for text), a default
// for updated_at and done_at, and a primary key or unique constraint on
// exactly the upserts' key (resource; resource and run_id), neither
// partial nor deferrable, for ON CONFLICT. Other columns are fine, if
// they are nullable or have a default. A table of the same name made by something else, such as the
// guide's job_fence (job, last_token), is refused there with a
// *ForeignTableError naming what it lacks, rather than failing every
// raise with "column does not exist". A table altered after New is not
// checked again.
//
// # Round trips
//
// WithTx costs no round trip for the check when the fence already holds
// the token: on a *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn it sends BEGIN
// and the share-locking SELECT together, as one pgx batch
// (pgx.Batch.BeginTx), so a holder's transaction goes over the wire as
//
//	BEGIN; SELECT 1 FROM baton_fence WHERE resource = $1 AND <last_token = $2, then the queue lock> FOR SHARE
//	fn's statements, one round trip each
//	COMMIT
//
// the same number of round trips as the transaction without the fence. The
// server runs the two in order, the SELECT inside the transaction BEGIN
// opened, so the share lock is held until COMMIT or ROLLBACK exactly as
// when they are sent one by one. If BEGIN fails the server skips the
// SELECT, and either failure ends WithTx without calling fn. When the
// SELECT finds no row, the upsert follows in a round trip of its own, still
// before fn is called (and for a stale token, reading the newest token and
// ROLLBACK). So fn never runs, and none of its statements executes, in a
// transaction whose token was refused; that is why the check rides with
// BEGIN rather than with fn's first statement.
//
// Insert makes one round trip when the fence holds the token, like a plain
// INSERT. What it costs beyond a plain INSERT is server work that the
// guarantee needs: finding the fence row and share-locking it, a row lock
// that PostgreSQL records in the row itself and in the WAL. Without the
// lock a raise could commit between the check and the insert's commit;
// without the lookup there is no check.
//
// # What is not guaranteed
//
//   - Writes that bypass the Store are not fenced: another table, another
//     database, an email, a payment. Make the fenced table the record of what
//     happened, and drive side effects from it with a single runner.
//   - Until the new holder's first check, the fence still accepts the old
//     holder's token (the guide's first gap). FencedLocker.Run raises the
//     fence before its work starts to make that gap as short as possible.
//   - The fence is only as durable as the database. A failover to an
//     asynchronous standby can lose the newest raise, and with it the
//     refusal of older tokens; use synchronous replication
//     (synchronous_commit = on or remote_apply with synchronous standbys)
//     where that matters.
//   - A fenced transaction holds the fence row's lock until it ends. One
//     that stalls (a frozen client, a slow statement) delays the next
//     holder's raise until it ends, and the transaction that raises the
//     fence to a new token makes that holder's other transactions wait for
//     it. Bound the wait with lock_timeout on the writers (a waiting check
//     then fails with SQLSTATE 55P03, an error wrapping
//     baton.ErrUnavailable, and can be retried) and
//     idle_in_transaction_session_timeout on the server, which ends a frozen
//     client's transaction and so releases the lock.
//
// # Errors
//
// A server that cannot be reached and a connection lost in the middle of a
// transaction return errors wrapping baton.ErrUnavailable (a
// *baton.UnavailableError naming host:port/database, never the password);
// a transaction whose connection was lost before COMMIT wrote nothing. So
// do a statement PostgreSQL gives up on (lock_timeout, statement_timeout,
// a serialization failure, a deadlock: nothing of it was written). The
// store sets no time limit of its own: bound a request with its ctx. A
// missing table is a *MissingTableError,
// one the store cannot use a *ForeignTableError (both from New and Init); a
// login, database or run-time parameter the server refuses when New or
// Open first connects, and invalid names and tokens, are
// *baton.OptionError (a refusal later, a password rotated under a
// running Store, is unavailable: it may pass). When ctx ends, the error wraps
// context.Cause(ctx).
package postgres
