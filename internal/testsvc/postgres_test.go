package testsvc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPostgres_Database(t *testing.T) {
	var p Postgres
	t.Cleanup(p.Stop)
	ctx := t.Context()

	var names []string
	for _, sub := range []string{"first", "second/with spaces and a very long name that does not fit in sixty-three bytes"} {
		t.Run(sub, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, p.Database(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var name string
			var tables int
			if err := conn.QueryRow(ctx, `SELECT current_database(), (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace)`).Scan(&name, &tables); err != nil {
				t.Fatal(err)
			}
			if tables != 0 {
				t.Errorf("new database %q has %d relations in public, want none", name, tables)
			}
			// Both subtests create the same table: each has its own database.
			if _, err := conn.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		})
	}
	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("databases %q, want two distinct ones", names)
	}

	// The subtests' cleanups dropped their databases.
	admin, err := pgx.Connect(ctx, p.Admin(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var left int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = ANY($1)`, names).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d of the test databases %q are left after their tests ended", left, names)
	}
}

func TestPostgres_Database_DropsWithOpenConnections(t *testing.T) {
	var p Postgres
	t.Cleanup(p.Stop)
	ctx := t.Context()
	var conn *pgx.Conn
	t.Run("leaky", func(t *testing.T) {
		var err error
		// Left open on purpose: DROP DATABASE ... WITH (FORCE) must end it.
		conn, err = pgx.Connect(ctx, p.Database(t))
		if err != nil {
			t.Fatal(err)
		}
	})
	if conn == nil {
		t.Fatal("subtest did not connect")
	}
	defer conn.Close(ctx)
	if err := conn.Ping(ctx); err == nil {
		t.Error("a connection to the dropped test database still works")
	}
}

func TestPostgres_Stop(t *testing.T) {
	var p Postgres
	dsn := p.Admin(t)
	srv := p.srv
	if _, err := os.Stat(srv.dir); err != nil {
		t.Fatalf("server dir: %v", err)
	}

	p.Stop()
	select {
	case <-srv.proc.exited:
	default:
		t.Fatal("postgres still running after Stop")
	}
	if _, err := os.Stat(srv.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server dir %s after Stop: %v, want it removed", srv.dir, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, dsn); err == nil {
		conn.Close(ctx)
		t.Error("connected after Stop")
	}
	p.Stop() // a second Stop is harmless
}

// TestPostgres_PortTakenByAnother: a PostgreSQL started on the port of
// another test's server, which answers a moment before ours gives up on
// the port, is told apart by its data directory: errPortTaken, for
// another port to be tried, not a server handed out twice.
func TestPostgres_PortTakenByAnother(t *testing.T) {
	var p Postgres
	t.Cleanup(p.Stop)
	first := p.server(t)
	pb, err := lookPostgres()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := pb.initTemp()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := pb.run(dir, first.port, 0)
	if err == nil {
		srv.stop()
		t.Fatalf("a second PostgreSQL on %s came back ready", first.addr())
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("second start on a taken port: %v; want errPortTaken", err)
	}
}

// TestPostgres_InitdbHung: an initdb that never finishes (here a script
// whose child keeps its output open, as initdb's postgres children would)
// is killed after the bound, with an error naming it, instead of hanging
// the test binary.
func TestPostgres_InitdbHung(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "initdb")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho creating\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { pgInitTimeout = d }(pgInitTimeout)
	pgInitTimeout = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		dir, err := pgBinaries{initdb: fake}.initTemp()
		if err == nil {
			os.RemoveAll(dir)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), fake+" hung") || !strings.Contains(err.Error(), "creating") {
			t.Fatalf("initTemp with a hung initdb: %v; want an error naming it, with its output", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("initTemp still waiting 10s into a 200ms bound")
	}
}

// TestPostgres_TMPDIRUnreachable: when the tests run as root, PostgreSQL
// runs as user postgres, which must pass through TMPDIR to its data dir.
// A TMPDIR it cannot enter (a 0700 dir of root's) fails the test with one
// line that says to set TMPDIR, before initdb runs; before, initdb's
// error was taken for a missing server, and the test skipped saying to
// install it.
func TestPostgres_TMPDIRUnreachable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: PostgreSQL runs as user postgres only when the tests run as root")
	}
	if _, err := lookPostgres(); err != nil {
		Unavailable(t, "PostgreSQL", err)
	}
	tmp := t.TempDir()
	if err := os.Chmod(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	t.Setenv(RequireEnv, "0") // a start failure must fail all the same
	var p Postgres
	defer p.Stop()
	rec := &recordTB{TB: t}
	rec.run(func(tb testing.TB) { p.Database(tb) })
	skipped, failed, msg := rec.result()
	if skipped || !failed || !strings.Contains(msg, "set TMPDIR") || !strings.Contains(msg, "(mode -rwx------, owner 0:0)") || !strings.Contains(msg, tmp) || strings.Contains(msg, "\n") {
		t.Fatalf("PostgreSQL with TMPDIR=%s (0700, root's): skipped %v, failed %v, %q; want one line failing it, naming the dir and saying to set TMPDIR", tmp, skipped, failed, msg)
	}
	t.Log(msg)
}
