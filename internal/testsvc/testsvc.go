// Package testsvc starts real servers for tests: embedded etcd in-process,
// and etcd 3.4, PostgreSQL, Redis and ZooKeeper from Debian's binaries, each
// on loopback, on free ports, in a temp dir, stopped and removed after.
//
// A test that needs a server whose binary is missing skips with a message
// naming the Debian package, or fails when BATON_REQUIRE_SERVICES=1 (as
// `make test` and CI set it), so a missing server never passes silently.
package testsvc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/etcdserver"
)

// RequireEnv is the variable that turns a missing server from a skip into a
// failure.
const RequireEnv = "BATON_REQUIRE_SERVICES"

// Required reports whether missing servers must fail tests: true when
// BATON_REQUIRE_SERVICES is 1 or true, false when it is unset, empty, 0 or
// false (strconv.ParseBool's other spellings too). Any other value, such as
// "yes", is an error: taken for either, it would turn failures into skips
// or the reverse without a word.
func Required() (bool, error) {
	v := os.Getenv(RequireEnv)
	if v == "" {
		return false, nil
	}
	required, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q in the environment is neither true nor false: set it to 1 (a missing server fails its tests) or 0 (they skip), or unset it", RequireEnv, v)
	}
	return required, nil
}

// Unavailable skips tb, or fails it under BATON_REQUIRE_SERVICES=1, saying
// which server is missing and why. A BATON_REQUIRE_SERVICES that is
// neither true nor false fails tb, saying what to set it to.
func Unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("%s unavailable: %v", what, err)
	required, rerr := Required()
	if rerr != nil {
		tb.Fatalf("%v (%s)", rerr, msg)
	}
	if required {
		tb.Fatalf("%s (%s=1: servers are required; run scripts/install-deps.sh)", msg, RequireEnv)
	}
	tb.Skipf("%s; skipping (run scripts/install-deps.sh, or set %s=1 to make this a failure)", msg, RequireEnv)
}

// MissingError says a server's binary was not found and which Debian package
// provides it.
type MissingError struct {
	Binary  string
	Package string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s not found in PATH or the usual places; install the Debian package %s", e.Binary, e.Package)
}

// LookBinary finds name in PATH or in the extra directories (globs allowed).
func LookBinary(name, pkg string, extra ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range extra {
		matches, _ := filepath.Glob(filepath.Join(dir, name))
		for i := len(matches) - 1; i >= 0; i-- { // newest version sorts last
			if fi, err := os.Stat(matches[i]); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return matches[i], nil
			}
		}
	}
	return "", &MissingError{Binary: name, Package: pkg}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before the caller binds it: for a port that
// must stay closed, see ClosedPort.
func FreePort() (int, error) { return etcdserver.FreePort() }

// ClosedPort returns a TCP port on 127.0.0.1 where connections are refused
// at once, for as long as tb runs: the port of a socket bound there but
// not listening, closed when tb ends. Unlike a FreePort port, which
// another process (another package's test server) may bind and listen on
// meanwhile, nothing else can bind it: the socket has no SO_REUSEADDR or
// SO_REUSEPORT, which another bind would need on both sockets, and
// connect does not take a port bound this way as its local port.
func ClosedPort(tb testing.TB) int {
	tb.Helper()
	_, port := boundSocket(tb, "closed port")
	return port
}

// boundSocket returns a TCP socket bound to a port of its own on
// 127.0.0.1, and the port; the socket is closed when tb ends. what names
// the caller's port in a failure.
func boundSocket(tb testing.TB, what string) (fd, port int) {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("%s: socket: %v", what, err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("%s: bind 127.0.0.1:0: %v", what, err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("%s: getsockname: %v", what, err)
	}
	return fd, sa.(*syscall.SockaddrInet4).Port
}

// DroppingPort returns a TCP port on 127.0.0.1 where a dial gets no answer
// (it times out), for as long as tb runs: a socket listening there with a
// backlog of none, whose one queued connection is never accepted, so that
// the kernel drops every later SYN, as a host behind a firewall that
// drops packets would.
func DroppingPort(tb testing.TB) int {
	tb.Helper()
	fd, port := boundSocket(tb, "dropping port")
	if err := syscall.Listen(fd, 0); err != nil {
		tb.Fatalf("dropping port: listen: %v", err)
	}
	// The queue holds one connection: fill it. (Without SYN cookies the
	// kernel may drop this one's SYN already, which serves as well.)
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	var ne net.Error
	switch {
	case err == nil:
		tb.Cleanup(func() { _ = c.Close() })
	case !errors.As(err, &ne) || !ne.Timeout():
		tb.Fatalf("dropping port: fill the queue: %v", err)
	}
	return port
}

// boundedCommand is exec.CommandContext for a short command that must not
// hang a test: the command runs in a process group of its own, killed
// whole when ctx ends (its children too, which may hold its output pipes
// open), and Wait stops waiting for its output waitDelay after that. The
// caller may set more of cmd.SysProcAttr, such as Credential, but must
// keep Setpgid.
func boundedCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	const waitDelay = 5 * time.Second
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	return cmd
}
