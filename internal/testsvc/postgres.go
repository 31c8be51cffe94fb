package testsvc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL start-up and shutdown limits.
const (
	pgStartTimeout = 30 * time.Second      // initdb excluded
	pgPollEvery    = 50 * time.Millisecond // readiness poll interval
	pgStopTimeout  = 10 * time.Second      // SIGINT, then SIGKILL
	pgOpTimeout    = 30 * time.Second      // CREATE/DROP DATABASE
	pgBinDirs      = "/usr/lib/postgresql/*/bin"
	pgPackage      = "postgresql"
	pgSuperuser    = "postgres"
)

// pgInitTimeout bounds initdb, which takes a few seconds.
var pgInitTimeout = 2 * time.Minute

// Postgres is one PostgreSQL server shared by every test of a test binary.
// Its zero value is ready to use: the server starts on the first call to
// Database or Admin, in a temp dir, on a free loopback port, with trust
// authentication for the superuser "postgres". Declare one in a test file
// and stop it from TestMain:
//
//	var pg testsvc.Postgres
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		pg.Stop()
//		os.Exit(code)
//	}
//
// Each test then asks for its own empty database with pg.Database(t).
//
// When the process runs as root, initdb and postgres run as the OS user
// "postgres", since PostgreSQL refuses to run as root. The server is started
// with PR_SET_PDEATHSIG, so it dies with the test binary even if Stop is
// never called.
type Postgres struct {
	once sync.Once
	srv  *pgServer
	err  error // why the server could not start

	mu      sync.Mutex
	stopped bool

	seq atomic.Int64 // numbers database names
}

// pgServer is a running postmaster.
type pgServer struct {
	dir  string // temp dir: data dir, socket, log
	port int
	proc *process
}

// Database creates a fresh, empty database for tb, drops it (WITH (FORCE),
// so open connections do not block it) when tb ends, and returns its DSN,
// a postgres:// URL without a password. It starts the server on first use.
// If PostgreSQL is not installed, tb is skipped, or fails under
// BATON_REQUIRE_SERVICES=1; if it is installed and does not start, tb fails.
func (p *Postgres) Database(tb testing.TB) string {
	tb.Helper()
	srv := p.server(tb)
	name := dbName(tb.Name(), p.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	if err := srv.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		tb.Fatalf("create test database %q on %s: %v", name, srv.addr(), err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
		defer cancel()
		if err := srv.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("drop test database %q on %s: %v", name, srv.addr(), err)
		}
	})
	return srv.dsn(name)
}

// Admin returns the DSN of the server's "postgres" database, for a test that
// must act from outside its own database, such as terminating a backend with
// pg_terminate_backend. It starts the server on first use, and skips or
// fails tb like Database.
func (p *Postgres) Admin(tb testing.TB) string {
	tb.Helper()
	return p.server(tb).dsn("postgres")
}

// Stop stops the server, if it was started, and removes its temp dir. It
// sends SIGINT (fast shutdown: open connections are ended) and sends
// SIGKILL if the server has not exited within 10 seconds. Database and Admin
// fail after Stop. Stop is safe to call more than once.
func (p *Postgres) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	p.once.Do(func() { p.err = errors.New("server stopped before first use") })
	if p.srv != nil {
		p.srv.stop()
		os.RemoveAll(p.srv.dir)
	}
}

// server starts the server once and returns it, or skips or fails tb.
func (p *Postgres) server(tb testing.TB) *pgServer {
	tb.Helper()
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		tb.Fatal("testsvc.Postgres used after Stop")
	}
	p.once.Do(func() { p.srv, p.err = startPostgres() })
	if p.err != nil {
		// Skip only when it is not installed: a start that fails is a
		// failure to see, not a skip that says to install it.
		if errors.As(p.err, new(*MissingError)) {
			Unavailable(tb, "PostgreSQL", p.err)
		}
		tb.Fatalf("PostgreSQL did not start: %v", p.err)
	}
	return p.srv
}

func (s *pgServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *pgServer) dsn(db string) string {
	return "postgres://" + pgSuperuser + "@" + s.addr() + "/" + db + "?sslmode=disable"
}

// admin runs one statement in the "postgres" database.
func (s *pgServer) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// dbName makes a database name from a test name: lower case, [a-z0-9_],
// numbered so that it is unique within the binary, at most 63 bytes.
func dbName(test string, n int64) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := fmt.Sprintf("t%d_%s", n, b.String())
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// startPostgres runs initdb into a new temp dir and starts postgres on a
// free port, trying another port if the first is taken.
func startPostgres() (*pgServer, error) {
	pb, err := lookPostgres()
	if err != nil {
		return nil, err
	}
	dir, err := pb.initTemp()
	if err != nil {
		return nil, err
	}
	srv, err := onFreePort("PostgreSQL", func(port, try int) (*pgServer, error) {
		return pb.run(dir, port, try)
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return srv, nil
}

// pgBinaries are PostgreSQL's binaries, and the credential to run them
// with (see pgCredential).
type pgBinaries struct {
	initdb, postgres string
	cred             *syscall.Credential
}

func lookPostgres() (pgBinaries, error) {
	initdb, err1 := LookBinary("initdb", pgPackage, pgBinDirs)
	postgres, err2 := LookBinary("postgres", pgPackage, pgBinDirs)
	if err := errors.Join(err1, err2); err != nil {
		return pgBinaries{}, err
	}
	cred, err := pgCredential()
	return pgBinaries{initdb: initdb, postgres: postgres, cred: cred}, err
}

// initTemp runs initdb into a new temp dir's data, as the binaries'
// user, and returns the dir; the caller removes it.
func (pb pgBinaries) initTemp() (string, error) {
	dir, err := os.MkdirTemp("", "baton-postgres-")
	if err != nil {
		return "", fmt.Errorf("make temp dir for PostgreSQL: %w", err)
	}
	if cred := pb.cred; cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("give %s to the postgres user: %w", dir, err)
		}
		if err := passable(filepath.Dir(dir), cred); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgInitTimeout)
	defer cancel()
	cmd := boundedCommand(ctx, pb.initdb, "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", pgSuperuser,
		"--no-sync", "-E", "UTF8", "--locale=C")
	cmd.Dir = dir
	cmd.SysProcAttr.Credential = pb.cred
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		os.RemoveAll(dir)
		return "", fmt.Errorf("%s hung: not done within %v, killed: %w; its output:\n%s", pb.initdb, pgInitTimeout, ctx.Err(), tail(out, logTailLines))
	case err != nil:
		os.RemoveAll(dir)
		return "", fmt.Errorf("%s failed: %w\n%s", pb.initdb, err, tail(out, logTailLines))
	}
	return dir, nil
}

// passable returns nil when cred's user, with no supplementary groups (as
// the binaries run), may pass through dir and every directory above it,
// by their mode bits; otherwise an error that names the first one that
// stops it, and what to do. TMPDIR is where the data dir goes, and one
// closed to others (a 0700 dir of root's) stops initdb with an error that
// does not say why.
func passable(dir string, cred *syscall.Credential) error {
	var blocked []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("PostgreSQL data dir: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil // not a Unix file system: let initdb say
		}
		search := fs.FileMode(0o001) // others
		switch {
		case st.Uid == cred.Uid:
			search = 0o100
		case st.Gid == cred.Gid:
			search = 0o010
		}
		if fi.Mode().Perm()&search == 0 {
			blocked = append(blocked, fmt.Sprintf("%s (mode %v, owner %d:%d)", d, fi.Mode().Perm(), st.Uid, st.Gid))
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	if len(blocked) > 0 {
		// The one nearest the root is the first one in the way.
		return fmt.Errorf("PostgreSQL runs as user %s (uid %d), which cannot pass through %s on the way to its data dir under %s: set TMPDIR to a directory it can reach, such as /tmp",
			pgSuperuser, cred.Uid, blocked[len(blocked)-1], dir)
	}
	return nil
}

// run starts the postmaster on the data directory in dir (from initTemp)
// on port, and waits until it accepts a connection.
func (pb pgBinaries) run(dir string, port, try int) (*pgServer, error) {
	cmd := exec.Command(pb.postgres,
		"-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(port),
		"-k", dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
	)
	cmd.Dir = dir
	// Not a process group of its own: signals go to the postmaster, which
	// passes them on to its backends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pb.cred, Pdeathsig: syscall.SIGQUIT}
	proc, err := startProcess(fmt.Sprintf("postgres on port %d", port), cmd, filepath.Join(dir, fmt.Sprintf("postgres-%d.log", try)))
	if err != nil {
		return nil, err
	}
	srv := &pgServer{dir: dir, port: port, proc: proc}
	// Ours, not another test's server given the same free port a moment
	// before: by its data directory. The look at /proc that waitReady
	// makes for the other servers needs CAP_SYS_PTRACE for a server run
	// as another user, as PostgreSQL is when the tests run as root.
	data := filepath.Join(dir, "data")
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, srv.dsn("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var got string
		if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&got); err != nil {
			return err
		}
		if filepath.Clean(got) != data {
			return fmt.Errorf("%w: port %d is answered by another PostgreSQL (data directory %s, ours %s)", errPortTaken, port, got, data)
		}
		return nil
	}
	if err := proc.waitReady(0, pgStartTimeout, pgPollEvery, ready); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// stop sends SIGINT (fast shutdown) and waits, sending SIGKILL after
// pgStopTimeout.
func (s *pgServer) stop() { s.proc.stop(syscall.SIGINT, pgStopTimeout) }

// pgCredential returns the credential to run PostgreSQL's binaries with:
// the "postgres" OS user when running as root, nil (the current user)
// otherwise.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to: need the OS user \"postgres\" to run it as (installed with the Debian package %s): %w", pgPackage, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres has uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres has gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil // and no supplementary groups
}
