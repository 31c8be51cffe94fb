package testsvc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestRedis_Lifecycle(t *testing.T) {
	r := StartRedis(t)
	if err := r.Ping(time.Second); err != nil {
		t.Fatalf("PING after start: %v", err)
	}

	r.Pause()
	if err := r.Ping(200 * time.Millisecond); err == nil {
		t.Fatal("a paused server answered PING")
	}
	r.Resume()
	if err := r.Ping(time.Second); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	r.Kill()
	select {
	case <-r.Exited():
	default:
		t.Fatal("Kill returned before the process exited")
	}
	if err := r.Ping(200 * time.Millisecond); err == nil {
		t.Fatal("a killed server answered PING")
	}
	r.Stop() // harmless after Kill
}

func TestRedis_Nodes(t *testing.T) {
	nodes := StartRedisNodes(t, 3)
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Addr] {
			t.Fatalf("two nodes on %s", n.Addr)
		}
		seen[n.Addr] = true
		if err := n.Ping(time.Second); err != nil {
			t.Errorf("node %s: %v", n.Addr, err)
		}
	}
	nodes[0].Stop()
	if err := nodes[0].Ping(200 * time.Millisecond); err == nil {
		t.Error("a stopped node answered PING")
	}
	if err := nodes[1].Ping(time.Second); err != nil {
		t.Errorf("stopping one node affected another: %v", err)
	}
	if v, err := RedisVersion(); err != nil || v == "" {
		t.Errorf("RedisVersion = %q, %v", v, err)
	} else {
		t.Logf("redis-server %s", v)
	}
}

// TestRedis_PinnedCPUs: with BATON_SERVER_CPUS set, a server runs on those
// CPUs alone, under its own pid (Pause and Kill signal it).
func TestRedis_PinnedCPUs(t *testing.T) {
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	// The first CPU this process may run on, the server's alone.
	allowed := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s+(\d+)`).FindSubmatch(self)
	if allowed == nil {
		t.Fatalf("no Cpus_allowed_list in /proc/self/status:\n%s", self)
	}
	cpu := string(allowed[1])
	t.Setenv(CPUsEnv, cpu)
	r := StartRedis(t)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "Name:\tredis-server") || !regexp.MustCompile(`(?m)^Cpus_allowed_list:\s+`+cpu+`$`).Match(status) {
		t.Fatalf("pid %d with %s=%s:\n%s", r.Pid(), CPUsEnv, cpu, status)
	}
}

func TestPinCPUs(t *testing.T) {
	cmd := exec.Command("redis-server", "--port", "0")
	if err := pinCPUs(cmd, ""); err != nil || cmd.Args[0] != "redis-server" {
		t.Fatalf("unset: %v, args %q", err, cmd.Args)
	}
	for _, bad := range []string{"one", "1;rm", "-c 1"} {
		err := pinCPUs(exec.Command("redis-server"), bad)
		if err == nil || !strings.Contains(err.Error(), CPUsEnv) {
			t.Errorf("%q: %v; want an error naming %s", bad, err, CPUsEnv)
		}
	}
}

// TestRedis_PortTakenByAnother: a redis-server started on a port another
// test's server took a moment before is not taken for ready because that
// other server answers: its start fails as a port taken (and the caller
// tries another port). Two parallel starts had both come back with the
// same address, one server for two nodes.
func TestRedis_PortTakenByAnother(t *testing.T) {
	first := StartRedis(t)
	bin, err := LookBinary("redis-server", redisPackage)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runRedis(bin, t.TempDir(), first.Port, 0, nil)
	if err == nil {
		r.Kill()
		t.Fatalf("a second redis-server on %s came back ready", first.Addr)
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("second start on a taken port: %v; want errPortTaken", err)
	}
}

// TestRedisVersion_Hung: a redis-server --version that never answers (here
// a script whose child keeps its output open) is given up on after the
// bound, with an error naming what hung, instead of hanging the test
// binary.
func TestRedisVersion_Hung(t *testing.T) {
	dir := t.TempDir()
	// The shell's child sleeps on with the shell's stdout: killing the
	// shell alone would leave the output open.
	script := "#!/bin/sh\nsleep 30\necho 'Redis server v=0.0.0'\n"
	if err := os.WriteFile(filepath.Join(dir, "redis-server"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	defer func(d time.Duration) { redisVersionTimeout = d }(redisVersionTimeout)
	redisVersionTimeout = 200 * time.Millisecond
	type answer struct {
		v   string
		err error
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		v, err := RedisVersion()
		done <- answer{v, err}
	}()
	select {
	case a := <-done:
		if a.err == nil || !strings.Contains(a.err.Error(), "redis-server --version hung") {
			t.Fatalf("RedisVersion = %q, %v; want an error saying redis-server --version hung", a.v, a.err)
		}
		t.Logf("%v after %v", a.err, time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("RedisVersion still waiting 10s into a 200ms bound")
	}
}
