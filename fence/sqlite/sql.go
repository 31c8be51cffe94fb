package sqlite

import (
	"fmt"
	"strings"
)

// nowSQL is the current time as text, in UTC with milliseconds: sortable
// and readable in the sqlite3 shell.
const nowSQL = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`

// timeLayout parses nowSQL's output.
const timeLayout = "2006-01-02T15:04:05.000Z"

// statements is the SQL a Store runs, built once from its table names.
type statements struct {
	createFence, createRuns string
	raise                   string // ?1 resource, ?2 token; one change when accepted
	newest                  string // ?1 resource
	list                    string
	done                    string // ?1 resource, ?2 run id
	markDone                string // ?1 resource, ?2 run id, ?3 token
}

func newStatements(fence, runs string) statements {
	return statements{
		createFence: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	resource   TEXT    NOT NULL PRIMARY KEY,
	last_token INTEGER NOT NULL,
	updated_at TEXT    NOT NULL DEFAULT (%s)
) WITHOUT ROWID`, quoteTable(fence), nowSQL),
		createRuns: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	resource TEXT    NOT NULL,
	run_id   TEXT    NOT NULL,
	token    INTEGER NOT NULL,
	done_at  TEXT    NOT NULL DEFAULT (%s),
	PRIMARY KEY (resource, run_id)
) WITHOUT ROWID`, quoteTable(runs), nowSQL),
		// The comparisons cast: in a table not made by Init, whose
		// last_token has TEXT affinity, tokens are stored as text and
		// would compare as strings ('10' < '9').
		raise: fmt.Sprintf(`INSERT INTO %s AS cur (resource, last_token, updated_at) VALUES (?1, ?2, %s)
ON CONFLICT (resource) DO UPDATE SET last_token = excluded.last_token,
	updated_at = CASE WHEN CAST(cur.last_token AS INTEGER) < CAST(excluded.last_token AS INTEGER) THEN excluded.updated_at ELSE cur.updated_at END
WHERE CAST(cur.last_token AS INTEGER) <= CAST(excluded.last_token AS INTEGER)`, quoteTable(fence), nowSQL),
		newest:   fmt.Sprintf(`SELECT last_token FROM %s WHERE resource = ?1`, quoteTable(fence)),
		list:     fmt.Sprintf(`SELECT resource, last_token, updated_at FROM %s ORDER BY resource`, quoteTable(fence)),
		done:     fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE resource = ?1 AND run_id = ?2)`, quoteTable(runs)),
		markDone: fmt.Sprintf(`INSERT INTO %s (resource, run_id, token) VALUES (?1, ?2, ?3) ON CONFLICT (resource, run_id) DO NOTHING`, quoteTable(runs)),
	}
}

// columnsSQL lists a table's columns, each with its place in the primary
// key (0 when not in it): ?1 the table's name, ?2 its schema.
const columnsSQL = `SELECT name, pk FROM pragma_table_info(?1, ?2)`

// uniqueSQL lists the columns of a table's unique indexes, which its
// UNIQUE constraints and a primary key that is not a rowid alias make:
// ?1 the table's name, ?2 its schema. A partial index, which an ON
// CONFLICT without its WHERE does not use, is left out; an expression in
// an index has a NULL name.
const uniqueSQL = `SELECT il.name, ii.name FROM pragma_index_list(?1, ?2) AS il, pragma_index_info(il.name, ?2) AS ii
WHERE il."unique" AND NOT il.partial ORDER BY il.name, ii.seqno`

// schemaAndName splits a possibly database-qualified table name.
func schemaAndName(table string) (schema, name string) {
	if i := strings.IndexByte(table, '.'); i >= 0 {
		return table[:i], table[i+1:]
	}
	return "main", table
}
