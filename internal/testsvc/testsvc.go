// Package testsvc starts real servers for tests: embedded etcd in-process,
// and etcd 3.4, PostgreSQL, Redis and ZooKeeper from Debian's binaries, each
// on loopback, on free ports, in a temp dir, stopped and removed after.
//
// A test that needs a server whose binary is missing skips with a message
// naming the Debian package, or fails when BATON_REQUIRE_SERVICES=1 (as
// `make test` and CI set it), so a missing server never passes silently.
package testsvc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/baton-go/baton/internal/etcdserver"
)

// RequireEnv is the variable that turns a missing server from a skip into a
// failure.
const RequireEnv = "BATON_REQUIRE_SERVICES"

// Required reports whether missing servers must fail tests.
func Required() bool {
	v, _ := strconv.ParseBool(os.Getenv(RequireEnv))
	return v
}

// Unavailable skips tb, or fails it under BATON_REQUIRE_SERVICES=1, saying
// which server is missing and why.
func Unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("%s unavailable: %v", what, err)
	if Required() {
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
func FreePort() (int, error) { return etcdserver.FreePort() }
