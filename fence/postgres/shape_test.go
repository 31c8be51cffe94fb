package postgres_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/postgres"
)

// TestStore_Open_ForeignTable: a table of the store's name that its
// statements cannot use is refused by Open, with WithCreate or without,
// in one line naming the table and what it lacks, not by every later
// Check or Raise with "column does not exist" (42703) or "no unique or
// exclusion constraint matching the ON CONFLICT specification" (42P10).
func TestStore_Open_ForeignTable(t *testing.T) {
	dsn, admin, ctx := freshDatabase(t)
	for _, tc := range []struct {
		name   string
		ddl    string // creates the table named table
		table  string
		runs   bool   // table is the runs table
		column string // ForeignTableError.Column
		says   string // in the message
	}{{
		name: "guide's job_fence",
		ddl: `CREATE TABLE job_fence (job text PRIMARY KEY, last_token bigint NOT NULL);
			INSERT INTO job_fence VALUES ('invoices', 0)`,
		table: "job_fence", column: "resource", says: `has no column "resource"`,
	}, {
		name:  "no updated_at",
		ddl:   `CREATE TABLE no_updated (resource text PRIMARY KEY, last_token bigint NOT NULL)`,
		table: "no_updated", column: "updated_at", says: `has no column "updated_at"`,
	}, {
		name:  "resource not unique",
		ddl:   `CREATE TABLE not_unique (resource text NOT NULL, last_token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
		table: "not_unique", column: "resource", says: "no primary key or unique constraint on exactly (resource)",
	}, {
		name: "unique index partial",
		ddl: `CREATE TABLE partial_key (resource text NOT NULL, last_token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
			CREATE UNIQUE INDEX ON partial_key (resource) WHERE last_token > 0`,
		table: "partial_key", column: "resource", says: "no primary key or unique constraint",
	}, {
		name:  "unique deferrable",
		ddl:   `CREATE TABLE deferred_key (resource text UNIQUE DEFERRABLE, last_token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
		table: "deferred_key", column: "resource", says: "no primary key or unique constraint",
	}, {
		name:  "unique on more than resource",
		ddl:   `CREATE TABLE wide_key (resource text, last_token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (resource, last_token))`,
		table: "wide_key", column: "resource", says: "no primary key or unique constraint",
	}, {
		name:  "last_token integer",
		ddl:   `CREATE TABLE int_token (resource text PRIMARY KEY, last_token integer NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
		table: "int_token", column: "last_token", says: `has column "last_token" of type integer, not bigint`,
	}, {
		name:  "updated_at without time zone",
		ddl:   `CREATE TABLE local_time (resource text PRIMARY KEY, last_token bigint NOT NULL, updated_at timestamp NOT NULL DEFAULT now())`,
		table: "local_time", column: "updated_at", says: "of type timestamp without time zone",
	}, {
		name:  "updated_at without default",
		ddl:   `CREATE TABLE no_default (resource text PRIMARY KEY, last_token bigint NOT NULL, updated_at timestamptz)`,
		table: "no_default", column: "updated_at", says: `has column "updated_at" without a default`,
	}, {
		name:  "extra column NOT NULL without default",
		ddl:   `CREATE TABLE must_set (resource text PRIMARY KEY, last_token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), owner text NOT NULL)`,
		table: "must_set", column: "owner", says: `has column "owner" NOT NULL without a default`,
	}, {
		name:  "resource too short for a name",
		ddl:   `CREATE TABLE short_name (resource varchar(16) PRIMARY KEY, last_token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
		table: "short_name", column: "resource", says: `has column "resource" of type character varying(16), not text`,
	}, {
		name:  "runs without key",
		ddl:   `CREATE TABLE runs_no_key (resource text NOT NULL, run_id text NOT NULL, token bigint NOT NULL, done_at timestamptz NOT NULL DEFAULT now())`,
		table: "runs_no_key", runs: true, column: "resource, run_id", says: "no primary key or unique constraint on exactly (resource, run_id)",
	}, {
		name:  "runs without done_at",
		ddl:   `CREATE TABLE runs_no_done (resource text, run_id text, token bigint NOT NULL, PRIMARY KEY (resource, run_id))`,
		table: "runs_no_done", runs: true, column: "done_at", says: `has no column "done_at"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			mustExec(t, admin, tc.ddl)
			opt, option := postgres.WithTable(tc.table), "WithTable"
			if tc.runs {
				opt, option = postgres.WithRunsTable(tc.table), "WithRunsTable"
			}
			for _, create := range []bool{true, false} {
				s, err := postgres.Open(ctx, dsn, opt, postgres.WithCreate(create))
				if err == nil {
					s.Close()
					t.Fatalf("Open(create %v) on table %s succeeded", create, tc.table)
				}
				var fe *postgres.ForeignTableError
				if !errors.As(err, &fe) || fe.Table != tc.table || fe.Column != tc.column || fe.Runs != tc.runs {
					t.Fatalf("Open(create %v): %v; want a *ForeignTableError for %s, column %q", create, err, tc.table, tc.column)
				}
				msg := err.Error()
				for _, want := range []string{`table "` + tc.table + `" in `, "/" + dbName(dsn), tc.says, option, "baton fence init --store URL"} {
					if !strings.Contains(msg, want) {
						t.Errorf("Open(create %v): %q does not say %q", create, msg, want)
					}
				}
				if strings.Contains(msg, "\n") || errors.Is(err, baton.ErrUnavailable) {
					t.Errorf("Open(create %v): %q; want one line, not unavailable", create, msg)
				}
			}
		})
	}
	if n := count(t, admin, `SELECT count(*) FROM job_fence`); n != 1 {
		t.Errorf("job_fence has %d rows after the refused Opens; want its 1, untouched", n)
	}
	// The runs cases' fence table, baton_fence, was missing: an Open
	// that refuses the runs table makes none.
	if n := count(t, admin, `SELECT count(*) FROM pg_class WHERE relname IN ('baton_fence', 'baton_runs')`); n != 0 {
		t.Errorf("%d of baton's tables made by Opens that refused a table", n)
	}
}

// TestStore_Open_TableWithExtraColumns: tables of baton's shape with more
// columns (nullable, defaulted, an identity), a varchar name, and a unique
// index instead of a primary key (on the runs key in the other order) are
// the store's to use.
func TestStore_Open_TableWithExtraColumns(t *testing.T) {
	dsn, admin, ctx := freshDatabase(t)
	mustExec(t, admin, `CREATE TABLE my_fence (
		id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		resource   varchar(200) NOT NULL UNIQUE,
		last_token bigint NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now(),
		note       text,
		owner      text NOT NULL DEFAULT 'ops'
	)`)
	mustExec(t, admin, `CREATE TABLE my_runs (
		resource text NOT NULL,
		run_id   text NOT NULL,
		token    bigint NOT NULL,
		done_at  timestamptz NOT NULL DEFAULT now(),
		host     text
	)`)
	mustExec(t, admin, `CREATE UNIQUE INDEX ON my_runs (run_id, resource)`)
	opts := []postgres.Option{postgres.WithTable("my_fence"), postgres.WithRunsTable("my_runs")}
	for _, create := range []bool{false, true} {
		s, err := postgres.Open(ctx, dsn, append(opts, postgres.WithCreate(create))...)
		if err != nil {
			t.Fatalf("Open(create %v): %v", create, err)
		}
		s.Close()
	}
	s, err := postgres.Open(ctx, dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := s.Raise(ctx, "invoices", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(ctx, "invoices", 4); !errors.Is(err, baton.ErrStaleToken) {
		t.Errorf("Raise(4) after 5: %v; want a stale token", err)
	}
	if err := s.MarkDone(ctx, "invoices", "2026-10", 6); err != nil {
		t.Fatal(err)
	}
	if done, err := s.Done(ctx, "invoices", "2026-10"); err != nil || !done {
		t.Errorf("Done = %v, %v; want true", done, err)
	}
	if got, err := s.List(ctx); err != nil || len(got) != 1 || got[0].Token != 6 {
		t.Errorf("List = %v, %v; want invoices at 6", got, err)
	}
	if n := count(t, admin, `SELECT count(*) FROM my_fence WHERE owner = 'ops' AND note IS NULL`); n != 1 {
		t.Errorf("%d rows of my_fence with its defaults; want 1", n)
	}
}
