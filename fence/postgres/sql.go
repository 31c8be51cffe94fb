package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

func pgxIdent(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// statements is the SQL a Store runs, built once from its table names.
type statements struct {
	create string // both tables, one simple-protocol round trip
	exists string // $1, $2: quoted names; current_database() and whether each exists
	hold   string // $1 resource, $2 token; a row when the fence holds exactly $2, share-locked
	raise  string // $1 resource, $2 token; one row affected when accepted
	newest string // $1 resource
	list   string
	done   string // $1 resource, $2 run id
	// holdFrom is the FROM clause of the fast single-statement insert:
	// INSERT INTO t (cols) SELECT $3, ... FROM <holdFrom> ON CONFLICT ...
	holdFrom string
	// fencedInsertHead and fencedInsertTail surround the row's
	// INSERT ... SELECT $3, ... FROM f ... in the full single-statement
	// insert; see Store.Insert.
	fencedInsertHead, fencedInsertTail string
}

func newStatements(fence, runs string) statements {
	raise := fmt.Sprintf(raiseSQL, fence)
	return statements{
		create: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	resource   text        PRIMARY KEY,
	last_token bigint      NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS %[2]s (
	resource text        NOT NULL,
	run_id   text        NOT NULL,
	token    bigint      NOT NULL,
	done_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (resource, run_id)
)`, fence, runs),
		exists:           `SELECT current_database(), to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		hold:             fmt.Sprintf(`SELECT 1 FROM %s WHERE resource = $1 AND last_token = $2 FOR SHARE`, fence),
		raise:            raise,
		newest:           fmt.Sprintf(`SELECT last_token FROM %s WHERE resource = $1`, fence),
		list:             fmt.Sprintf(`SELECT array_agg(resource ORDER BY resource), array_agg(last_token ORDER BY resource), array_agg(updated_at ORDER BY resource) FROM %s`, fence),
		done:             fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE resource = $1 AND run_id = $2)`, runs),
		holdFrom:         fmt.Sprintf(`%s WHERE resource = $1 AND last_token = $2 FOR SHARE`, fence),
		fencedInsertHead: "WITH f AS (\n" + raise + "\nRETURNING 1\n), ins AS (\n",
		fencedInsertTail: "\nRETURNING 1\n)\nSELECT (SELECT count(*) FROM f), (SELECT count(*) FROM ins)",
	}
}

// raiseSQL is the fence: insert the resource's first token, or raise the
// stored one to $2 when $2 is at least as new. A stale token matches the
// conflict but not the WHERE clause, so no row is affected (the row is still
// locked until the transaction ends). updated_at changes only with the
// token. %s is the quoted fence table.
const raiseSQL = `INSERT INTO %s AS cur (resource, last_token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET last_token = EXCLUDED.last_token,
	updated_at = CASE WHEN cur.last_token < EXCLUDED.last_token THEN now() ELSE cur.updated_at END
WHERE cur.last_token <= EXCLUDED.last_token`
