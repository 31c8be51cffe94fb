package testsvc

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func startShell(t *testing.T, script string) *process {
	t.Helper()
	p, err := startProcess("sh", exec.Command("/bin/sh", "-c", script), filepath.Join(t.TempDir(), "sh.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	return p
}

func notReady() error { return errors.New("not yet") }

func TestProcess_WaitReady_ExitWithPortTaken(t *testing.T) {
	p := startShell(t, "echo starting; echo 'bind: Address already in use' >&2; exit 1")
	err := p.waitReady(0, 10*time.Second, 10*time.Millisecond, notReady)
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("err = %v, want errPortTaken", err)
	}
	if !strings.Contains(err.Error(), "exited during start-up") || !strings.Contains(err.Error(), "starting\nbind: Address already in use") {
		t.Errorf("error does not quote the log's tail: %v", err)
	}
}

func TestProcess_WaitReady_ExitOther(t *testing.T) {
	p := startShell(t, "echo 'no config'; exit 2")
	err := p.waitReady(0, 10*time.Second, 10*time.Millisecond, notReady)
	if err == nil || errors.Is(err, errPortTaken) || !strings.Contains(err.Error(), "no config") {
		t.Fatalf("err = %v, want an exit quoting the log, not errPortTaken", err)
	}
}

func TestProcess_WaitReady_Timeout(t *testing.T) {
	p := startShell(t, "echo waiting; exec sleep 60")
	err := p.waitReady(0, 100*time.Millisecond, 10*time.Millisecond, notReady)
	if err == nil || !strings.Contains(err.Error(), "not ready within") || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("err = %v, want a timeout naming the last error", err)
	}
	if !p.running() {
		t.Fatal("a timeout stopped the process; the caller decides")
	}
	p.kill()
	if p.running() {
		t.Fatal("running after kill")
	}
	p.kill() // harmless
}

// TestProcess_WaitReady_AnsweredByAnother: a server that answers on the
// port while the process does not listen on it is another's, such as
// another test's server given the same free port a moment before, and is
// errPortTaken at once, not taken for ours. The process's own listening
// socket is told apart from others on the same machine.
func TestProcess_WaitReady_AnsweredByAnother(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	answers := func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}

	p := startShell(t, "exec sleep 60")
	err = p.waitReady(port, 10*time.Second, 10*time.Millisecond, answers)
	if !errors.Is(err, errPortTaken) || !strings.Contains(err.Error(), "answered by another process") {
		t.Fatalf("err = %v, want errPortTaken: the port is answered by another process", err)
	}

	// This test binary is the process that listens: wrap it.
	self := &process{what: "test binary", cmd: &exec.Cmd{Process: &os.Process{Pid: os.Getpid()}}}
	if ours, err := self.listensOn(port); err != nil || !ours {
		t.Fatalf("listensOn(%d) = %v, %v for the process that listens; want true", port, ours, err)
	}
	if ours, err := p.listensOn(port); err != nil || ours {
		t.Fatalf("listensOn(%d) = %v, %v for a process that does not; want false", port, ours, err)
	}
}

func TestListeners(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0
`
	if got := listeners(table, 8080); len(got) != 1 || got[0] != "4242" {
		t.Errorf("listeners on 8080 = %q, want [4242]: the listening socket, not the connection", got)
	}
	if got := listeners(table, 8081); len(got) != 1 || got[0] != "4444" {
		t.Errorf("listeners on 8081 = %q, want [4444]", got)
	}
	if got := listeners(table, 80); len(got) != 0 {
		t.Errorf("listeners on 80 = %q, want none", got)
	}
}

// TestProcess_StopPaused stops a paused process: stop resumes it first, so
// it acts on SIGTERM instead of waiting for the SIGKILL after the timeout.
func TestProcess_StopPaused(t *testing.T) {
	p := startShell(t, "exec sleep 60")
	p.pause()
	p.pause() // harmless
	start := time.Now()
	p.stop(syscall.SIGTERM, 30*time.Second)
	if p.running() {
		t.Fatal("running after stop")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stop took %v: SIGTERM was not acted on", d)
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
		t.Errorf("exit status %v, want killed by SIGTERM", p.cmd.ProcessState)
	}
	p.stop(syscall.SIGTERM, time.Second) // harmless
}

func TestOnFreePort(t *testing.T) {
	var ports []int
	taken := func(port, try int) (int, error) {
		ports = append(ports, port)
		if try != len(ports)-1 {
			t.Errorf("try %d on call %d", try, len(ports))
		}
		return 0, errPortTaken
	}
	if _, err := onFreePort("x", taken); !errors.Is(err, errPortTaken) || len(ports) != portTries {
		t.Errorf("%d tries, err %v; want %d, errPortTaken", len(ports), err, portTries)
	}

	calls := 0
	other := errors.New("bad config")
	if _, err := onFreePort("x", func(int, int) (int, error) { calls++; return 0, other }); !errors.Is(err, other) || calls != 1 {
		t.Errorf("%d tries, err %v; want 1, the error", calls, err)
	}

	got, err := onFreePort("x", func(port, try int) (int, error) {
		if try == 0 {
			return 0, errPortTaken
		}
		return port, nil
	})
	if err != nil || got == 0 {
		t.Errorf("second try: %d, %v", got, err)
	}
}

func TestEtcdBinary(t *testing.T) {
	e := StartEtcdBinary(t)
	if e.Version == "" || e.Version == "embedded" {
		t.Errorf("version %q", e.Version)
	}
	c := Client(t, e.Endpoint)
	if _, err := c.Put(t.Context(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	e.Stop() // harmless
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb", 5, "a\nb"},
		{"", 3, ""},
	} {
		if got := tail([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestPortTaken starts redis-server and the etcd binary on a port that is
// already bound: each start-up must fail as errPortTaken, so that
// onFreePort tries another port.
func TestPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	t.Run("redis", func(t *testing.T) {
		bin, err := LookBinary("redis-server", redisPackage)
		if err != nil {
			Unavailable(t, "redis-server", err)
		}
		if _, err := runRedis(bin, t.TempDir(), port, 0, nil); !errors.Is(err, errPortTaken) {
			t.Errorf("err = %v, want errPortTaken", err)
		}
	})
	t.Run("etcd", func(t *testing.T) {
		bin, err := LookBinary("etcd", "etcd-server")
		if err != nil {
			Unavailable(t, "etcd binary", err)
		}
		if _, err := startEtcdBinary(bin, t.TempDir(), port); !errors.Is(err, errPortTaken) {
			t.Errorf("err = %v, want errPortTaken", err)
		}
	})
}
