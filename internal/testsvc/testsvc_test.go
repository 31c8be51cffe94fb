package testsvc

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// recordTB is a testing.TB that records a skip or a failure instead of
// reporting it, for a test of what a helper does with its tb. Like the
// real ones, Skip and Fatal end the goroutine that calls them: call the
// helper through run.
type recordTB struct {
	testing.TB // the test's own, for Cleanup, TempDir, Name

	mu      sync.Mutex
	skipped bool
	failed  bool
	msg     string
}

func (r *recordTB) Helper()                      {}
func (r *recordTB) Skip(args ...any)             { r.end(&r.skipped, fmt.Sprint(args...)) }
func (r *recordTB) Skipf(f string, args ...any)  { r.end(&r.skipped, fmt.Sprintf(f, args...)) }
func (r *recordTB) Fatal(args ...any)            { r.end(&r.failed, fmt.Sprint(args...)) }
func (r *recordTB) Fatalf(f string, args ...any) { r.end(&r.failed, fmt.Sprintf(f, args...)) }

func (r *recordTB) end(flag *bool, msg string) {
	r.mu.Lock()
	*flag, r.msg = true, msg
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls f with r in a goroutine of its own, and returns when f
// returned or skipped or failed r.
func (r *recordTB) run(f func(tb testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
}

func (r *recordTB) result() (skipped, failed bool, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped, r.failed, r.msg
}

// TestRequired: 1 and true require the servers; unset, empty, 0 and false
// do not; any other value is an error that says what to write, never a
// silent false.
func TestRequired(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "true": true, "TRUE": true, "": false, "0": false, "false": false} {
		t.Setenv(RequireEnv, v)
		if got, err := Required(); err != nil || got != want {
			t.Errorf("%s=%q: Required() = %v, %v; want %v", RequireEnv, v, got, err, want)
		}
	}
	for _, v := range []string{"yes", "no", "on", " 1", "required"} {
		t.Setenv(RequireEnv, v)
		_, err := Required()
		if err == nil {
			t.Errorf("%s=%q: no error", RequireEnv, v)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, RequireEnv+"="+strconv.Quote(v)) || !strings.Contains(msg, "set it to 1") {
			t.Errorf("%s=%q: error %q; want one line naming the variable, its value and what to write", RequireEnv, v, msg)
		}
	}
}

// TestUnavailable: a missing server skips, or fails under
// BATON_REQUIRE_SERVICES=1; with a value that is neither, it fails saying
// so, where before "yes" skipped as if unset.
func TestUnavailable(t *testing.T) {
	missing := &MissingError{Binary: "some-server", Package: "some-package"}
	for _, tc := range []struct {
		env        string
		skip, fail bool
		want       string
	}{
		{"", true, false, "run scripts/install-deps.sh"},
		{"0", true, false, "some-package"},
		{"1", false, true, "servers are required"},
		{"yes", false, true, RequireEnv + `="yes" in the environment is neither true nor false`},
	} {
		t.Setenv(RequireEnv, tc.env)
		rec := &recordTB{TB: t}
		rec.run(func(tb testing.TB) { Unavailable(tb, "SomeServer", missing) })
		skipped, failed, msg := rec.result()
		if skipped != tc.skip || failed != tc.fail || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s=%q: skipped %v, failed %v, %q; want skipped %v, failed %v, one line with %q", RequireEnv, tc.env, skipped, failed, msg, tc.skip, tc.fail, tc.want)
		}
	}
}

// TestClosedPort: a connection to the port is refused at once, and no
// other socket can bind it, listening or not, with or without
// SO_REUSEADDR (as Go's and most servers' listeners set it), until the
// test ends.
func TestClosedPort(t *testing.T) {
	var port int
	t.Run("held", func(t *testing.T) {
		port = ClosedPort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		for range 3 {
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil {
				c.Close()
				t.Fatalf("connected to %s", addr)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial %s: %v; want connection refused", addr, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("dial %s took %v to be refused; want at once", addr, d)
			}
		}
		if ln, err := net.Listen("tcp", addr); err == nil { // SO_REUSEADDR
			ln.Close()
			t.Fatalf("another listener bound %s", addr)
		} else if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("listen on %s: %v; want address in use", addr, err)
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("a plain bind of %s: %v; want address in use", addr, err)
		}
	})
	// Closed when the test ended: the port can be bound again.
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("port %d still held after its test ended: %v", port, err)
	}
	ln.Close()
}
