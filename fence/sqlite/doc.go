// Package sqlite keeps fences in an SQLite database file, through
// database/sql and the pure-Go modernc.org/sqlite driver: the storage-side
// check that makes a stale lock holder harmless, for programs whose data
// lives in SQLite. Several processes on one machine may share the file.
//
// # What is guaranteed
//
// A write made through the Store (Check or WithTx in the caller's
// transaction, Insert, MarkDone) is committed only if its token is at least
// as new as the newest token the fence has accepted for its resource, and
// the fence and the write commit together or not at all. "At least as new",
// not "newer", because one holder makes many writes with one token.
//
// # How
//
// The fence table holds one row per resource:
//
//	CREATE TABLE IF NOT EXISTS baton_fence (
//		resource   TEXT    NOT NULL PRIMARY KEY,
//		last_token INTEGER NOT NULL,
//		updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) -- when last_token was first accepted
//	) WITHOUT ROWID;
//
// and the check is the guide's rule as one upsert, run first in the
// writing transaction:
//
//	INSERT INTO baton_fence AS cur (resource, last_token, updated_at) VALUES (?1, ?2, strftime(...))
//	ON CONFLICT (resource) DO UPDATE SET last_token = excluded.last_token,
//		updated_at = CASE WHEN CAST(cur.last_token AS INTEGER) < CAST(excluded.last_token AS INTEGER)
//			THEN excluded.updated_at ELSE cur.updated_at END
//	WHERE CAST(cur.last_token AS INTEGER) <= CAST(excluded.last_token AS INTEGER)
//
// (the casts keep a table not made by Init, whose last_token holds text,
// comparing numbers, not strings)
//
// One changed row means the token was accepted; none means it is stale,
// and the Store reads the newest token to return a *baton.StaleTokenError.
// SQLite lets one connection write at a time: the check is a write, so
// from it until the transaction ends no other connection or process can
// raise the fence, and a raise that committed earlier makes the check fail.
// Open begins every transaction with BEGIN IMMEDIATE, taking the write lock
// at once, and waits up to the busy timeout (default 5s) for it; WAL
// journaling, which Open sets when it may create (fence init does), lets
// readers go on meanwhile. A handle opened with DSN, for a
// program that keeps its own tables in the file and builds its Store with
// New, gets the same settings. On a handle without them, a transaction
// that reads before its Check fails at once (SQLITE_BUSY_SNAPSHOT, which no
// busy timeout waits out) when another connection wrote meanwhile; the
// error says to begin it with BEGIN IMMEDIATE.
//
// Insert cannot be one statement as in fence/postgres: SQLite has no
// data-modifying common table expressions, and one INSERT writes one
// table. It runs the upsert and the row's INSERT ... ON CONFLICT DO NOTHING
// in one immediate transaction instead; in-process, the extra statement
// costs no round trip. MarkDone does the same with the runs table:
//
//	CREATE TABLE IF NOT EXISTS baton_runs (
//		resource TEXT    NOT NULL,
//		run_id   TEXT    NOT NULL,
//		token    INTEGER NOT NULL,
//		done_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
//		PRIMARY KEY (resource, run_id)
//	) WITHOUT ROWID;
//
// # What is not guaranteed
//
//   - Writes that bypass the Store are not fenced: another table written
//     outside WithTx, another database, an email, a payment.
//   - Until the new holder's first check, the fence still accepts the old
//     holder's token; FencedLocker.Run raises the fence before its work to
//     make that gap as short as possible.
//   - Only processes that can lock the file share the fence: SQLite's locks
//     do not work reliably on network file systems (NFS, SMB), so keep the
//     file on a local disk. synchronous stays FULL so that an accepted raise
//     survives a power loss.
//   - One writer at a time: a fenced transaction that stalls holds the
//     write lock, and every other writer waits for it up to the busy
//     timeout, then fails with an error wrapping baton.ErrUnavailable.
//     That includes the Store's own writes (Raise, Insert, MarkDone, a
//     nested WithTx) made inside WithTx's fn, which run on another
//     connection and wait for fn's transaction: make fn's writes with its
//     tx. With SetMaxOpenConns(1), even the Store's reads inside fn wait,
//     until their context ends.
//   - A failed statement may end the transaction it ran in: when one is
//     interrupted (its context ended) or meets an I/O error, a full disk
//     or no memory, SQLite rolls back the whole transaction, fence check
//     included, while database/sql still takes it for open. A WithTx fn,
//     or a caller of Check, that goes on after such an error runs its
//     later statements each on its own, committed outside the fence. So
//     return a failed statement's error, and run nothing after it; WithTx
//     then rolls back. If fn returns nil instead, WithTx's commit finds no
//     transaction and returns an error saying that those later writes may
//     have been committed.
//
// # Errors
//
// A write lock not obtained within the busy timeout, and a file that
// cannot be read or written now (I/O errors, a full disk, a read-only
// file), return errors wrapping baton.ErrUnavailable (a
// *baton.UnavailableError naming the file): trying again may work. A path
// that names no file in an existing directory, a directory, or a file
// that is no database is a mistake in the path: its error names the file
// and what to check, and is not unavailable. A missing file (without
// WithCreate) or table is a *MissingTableError; a table of the store's
// name that lacks a column its statements use, or the PRIMARY KEY or
// UNIQUE constraint their ON CONFLICT needs, is a *ForeignTableError;
// invalid names, tokens and options are *baton.OptionError. When ctx
// ends, the error wraps context.Cause(ctx).
package sqlite
