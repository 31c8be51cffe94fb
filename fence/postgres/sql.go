package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

func pgxIdent(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// statements is the SQL a Store runs, built once from its table names.
type statements struct {
	create string // both tables, one simple-protocol round trip
	shape  string // $1, $2: quoted names; current_database() and each table's shape (see shapeSQL)
	hold   string // $1 resource, $2 token; a row when the fence holds exactly $2, share-locked
	raise  string // $1 resource, $2 token; one row affected when accepted
	newest string // $1 resource
	list   string
	done   string // $1 resource, $2 run id
	// heldInsertHead and fencedInsertHead, each with fencedInsertTail,
	// surround the row's INSERT ... SELECT $3, ... FROM f ... in the two
	// single-statement inserts; see Store.Insert. The first's f
	// share-locks the fence's row without the queue lock (see queueKey).
	heldInsertHead, fencedInsertHead, fencedInsertTail string
}

func newStatements(fence, runs string) statements {
	key := queueKey(fence)
	raise := fmt.Sprintf(raiseSQL, fence, key)
	hold := fmt.Sprintf(holdSQL, fence, key)
	return statements{
		create: fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (%s);\nCREATE TABLE IF NOT EXISTS %s (%s)", fence, fenceSpec.ddl, runs, runsSpec.ddl),
		shape: "SELECT current_database(), f.rel IS NOT NULL, f.names, f.types, f.defaulted, f.notnull, f.keyed,\n" +
			"\tr.rel IS NOT NULL, r.names, r.types, r.defaulted, r.notnull, r.keyed\nFROM " +
			fmt.Sprintf(shapeSQL, "$1", fenceSpec.keySQL(), "f") + ",\n" + fmt.Sprintf(shapeSQL, "$2", runsSpec.keySQL(), "r"),
		hold:             "SELECT 1 FROM " + hold,
		raise:            raise,
		newest:           fmt.Sprintf(`SELECT last_token FROM %s WHERE resource = $1`, fence),
		list:             fmt.Sprintf(`SELECT array_agg(resource ORDER BY resource), array_agg(last_token ORDER BY resource), array_agg(updated_at ORDER BY resource) FROM %s`, fence),
		done:             fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE resource = $1 AND run_id = $2)`, runs),
		heldInsertHead:   fmt.Sprintf("WITH f AS (\nSELECT 1 FROM %s WHERE resource = $1 AND last_token = $2 FOR SHARE\n), ins AS (\n", fence),
		fencedInsertHead: "WITH f AS (\n" + raise + "\nRETURNING 1\n), ins AS (\n",
		fencedInsertTail: "\nRETURNING 1\n)\nSELECT (SELECT count(*) FROM f), (SELECT count(*) FROM ins)",
	}
}

// shapeSQL is the row source %[3]s that describes the table whose quoted
// name is the parameter %[1]s: rel, its OID, NULL when there is no such
// table; names, types (as format_type writes them), defaulted (it has a
// DEFAULT, or is an identity or generated column) and notnull, of its
// columns in order, NULL when it has none; and keyed, whether it has a
// unique index that the store's ON CONFLICT (key) can use: on exactly
// the columns of the array %[2]s (sorted), neither partial nor
// deferrable, and valid. Only catalogs, read in the same round trip as
// current_database().
const shapeSQL = `(SELECT t.rel, c.*, EXISTS (
		SELECT FROM pg_index i
		WHERE i.indrelid = t.rel AND i.indisunique AND i.indimmediate AND i.indisvalid AND i.indpred IS NULL
			AND ARRAY(SELECT a.attname::text COLLATE "C" FROM generate_series(0, i.indnkeyatts - 1) AS k
				JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k] ORDER BY 1) = %[2]s
	) AS keyed
	FROM (SELECT to_regclass(%[1]s) AS rel) AS t, LATERAL (
		SELECT array_agg(a.attname::text ORDER BY a.attnum) AS names,
			array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum) AS types,
			array_agg(a.atthasdef OR a.attidentity <> '' ORDER BY a.attnum) AS defaulted,
			array_agg(a.attnotnull ORDER BY a.attnum) AS notnull
		FROM pg_attribute a
		WHERE a.attrelid = t.rel AND a.attnum > 0 AND NOT a.attisdropped
	) AS c) AS %[3]s`

// raiseSQL is the fence: insert the resource's first token, or raise the
// stored one to $2 when $2 is at least as new. A stale token matches the
// conflict but not the WHERE clause, so no row is affected (the row is still
// locked until the transaction ends, unless the guard below found the
// token stale first: then nothing is locked). updated_at changes only
// with the token. It first takes the resource's queue lock (see queueKey)
// exclusively, unless the newest committed token is already newer than
// $2: that one is stale for good (the token only grows), and a
// transaction that took the queue lock shared in a check that found the
// fence raised past it meanwhile must not ask for it exclusively, where
// two such would wait for each other. %[1]s is the quoted fence table,
// %[2]s the queue key.
const raiseSQL = `INSERT INTO %[1]s AS cur (resource, last_token)
SELECT $1, $2 FROM (
	SELECT pg_advisory_xact_lock(%[2]s)
	WHERE NOT EXISTS (SELECT 1 FROM %[1]s WHERE resource = $1 AND last_token > $2)
) AS queue
ON CONFLICT (resource) DO UPDATE SET last_token = EXCLUDED.last_token,
	updated_at = CASE WHEN cur.last_token < EXCLUDED.last_token THEN now() ELSE cur.updated_at END
WHERE cur.last_token <= EXCLUDED.last_token`

// holdSQL follows SELECT 1 FROM, in a transaction, to share-lock the fence row when it holds exactly $2, after taking the
// resource's queue lock shared: only then (CASE evaluates its branch
// only when the row matches), so that a transaction whose token is new,
// and that goes on to raise the fence, holds no share of the queue lock
// that its raise, or a concurrent one's, would wait for. %[1]s is the
// quoted fence table, %[2]s the queue key.
const holdSQL = `%[1]s
WHERE resource = $1
	AND CASE WHEN last_token = $2 THEN pg_advisory_xact_lock_shared(%[2]s) IS NOT NULL END
FOR SHARE`

// queueKey is the SQL expression of the advisory lock key that queues the
// fence's checks and raises of resource $1, fairly. Row locks alone do
// not: a check's FOR SHARE is granted at once while the row holds only
// share locks, even when a raise waits for them, so an older holder
// whose fenced transactions overlap one another kept a newer holder's
// raise waiting for as long as it went on writing. PostgreSQL queues
// requests for an advisory lock (a shared request waits behind an
// exclusive one already waiting): a raise takes it exclusively before
// its row lock, and a check shared, before its share lock on the row, so
// the checks that come after a raise wait for it. The key hashes the
// table's OID with the resource (64 bits: hashtextextended, PostgreSQL
// 11 and later), so stores that name one table two ways (baton_fence,
// public.baton_fence) queue together; two resources that share a key
// only queue together. Locks of the transaction (xact), so they end with
// it, as the row locks do.
//
// The checks of transactions only: a single statement (Insert's first
// try, MarkDone) holds the row for its own run alone, and, made while a
// fenced transaction of the same resource is open on another
// connection, it must not queue behind a raise that waits for that
// transaction (which may be waiting for the statement). A transaction
// that waits for another of the same resource so (a WithTx or Check on
// another connection, inside an open WithTx) waits until a ctx ends
// while a raise is queued: make a transaction's fenced writes in it.
func queueKey(fence string) string {
	return fmt.Sprintf("hashtextextended('baton fence ' || %s::regclass::oid::text || ' ' || $1, 0)", sqlString(fence))
}

// sqlString is s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
