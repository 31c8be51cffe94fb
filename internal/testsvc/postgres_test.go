package testsvc

import (
	"context"
	"errors"
	"os"
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
