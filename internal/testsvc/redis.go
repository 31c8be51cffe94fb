package testsvc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Redis start-up and shutdown limits.
const (
	redisPackage      = "redis-server"
	redisStartTimeout = 10 * time.Second
	redisStopTimeout  = 10 * time.Second
	redisPollEvery    = 10 * time.Millisecond
)

// redisVersionTimeout bounds redis-server --version, which answers at once.
var redisVersionTimeout = 30 * time.Second

// Redis is one redis-server process from Debian's redis-server package, on
// a free loopback port, in its own temp dir, with persistence off
// (--save "" --appendonly no). It is stopped when its test ends. The fault
// methods act on the process itself: Kill is a crash, Pause freezes it
// (SIGSTOP) with its connections open, Resume thaws it.
type Redis struct {
	// Addr is 127.0.0.1:PORT.
	Addr string
	// Port is the TCP port.
	Port int

	proc *process
}

// StartRedis starts one redis-server for tb, with extra arguments appended
// to its command line (such as "--notify-keyspace-events", "Kgx"). It skips
// tb (or fails it under BATON_REQUIRE_SERVICES=1) when redis-server is not
// installed.
func StartRedis(tb testing.TB, args ...string) *Redis {
	tb.Helper()
	bin, err := LookBinary("redis-server", redisPackage)
	if err != nil {
		Unavailable(tb, "redis-server", err)
	}
	r, err := startRedis(bin, tb.TempDir(), args)
	if err != nil {
		tb.Fatalf("redis-server did not start: %v", err)
	}
	tb.Cleanup(r.Stop)
	return r
}

// StartRedisNodes starts n independent redis-servers (no replication
// between them), as Redlock wants, in parallel.
func StartRedisNodes(tb testing.TB, n int) []*Redis {
	tb.Helper()
	bin, err := LookBinary("redis-server", redisPackage)
	if err != nil {
		Unavailable(tb, "redis-server", err)
	}
	nodes := make([]*Redis, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range nodes {
		dir := tb.TempDir()
		wg.Go(func() { nodes[i], errs[i] = startRedis(bin, dir, nil) })
	}
	wg.Wait()
	for _, r := range nodes {
		if r != nil {
			tb.Cleanup(r.Stop)
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("redis-server nodes did not start: %v", err)
	}
	return nodes
}

// RedisAddrs returns the nodes' addresses.
func RedisAddrs(nodes []*Redis) []string {
	out := make([]string, len(nodes))
	for i, r := range nodes {
		out[i] = r.Addr
	}
	return out
}

// RedisVersion returns the installed redis-server's version, such as
// "7.0.15", or an error when it is not installed.
func RedisVersion() (string, error) {
	bin, err := LookBinary("redis-server", redisPackage)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisVersionTimeout)
	defer cancel()
	out, err := boundedCommand(ctx, bin, "--version").Output()
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s --version hung: no answer within %v: %w", bin, redisVersionTimeout, ctx.Err())
	}
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no version in %q", out)
}

func startRedis(bin, dir string, args []string) (*Redis, error) {
	return onFreePort("redis-server", func(port, try int) (*Redis, error) {
		return runRedis(bin, dir, port, try, args)
	})
}

func runRedis(bin, dir string, port, try int, args []string) (*Redis, error) {
	argv := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", "",
	}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Dir = dir
	proc, err := startProcess(fmt.Sprintf("redis-server on port %d", port), cmd, filepath.Join(dir, fmt.Sprintf("redis-%d.log", try)))
	if err != nil {
		return nil, err
	}
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, proc: proc}
	ready := func() error { return r.Ping(time.Second) }
	if err := proc.waitReady(port, redisStartTimeout, redisPollEvery, ready); err != nil {
		r.Kill()
		return nil, err
	}
	return r, nil
}

// Ping sends PING on a new connection and waits up to timeout for +PONG.
func (r *Redis) Ping(timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", r.Addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// URL returns redis://ADDR.
func (r *Redis) URL() string { return "redis://" + r.Addr }

// Pid returns the server's process id.
func (r *Redis) Pid() int { return r.proc.cmd.Process.Pid }

// Exited returns a channel closed when the process has exited.
func (r *Redis) Exited() <-chan struct{} { return r.proc.exited }

// Stop shuts the server down (SIGTERM; SIGKILL after 10s) and waits for it
// to exit. It is safe to call more than once, and after Kill.
func (r *Redis) Stop() { r.proc.stop(syscall.SIGTERM, redisStopTimeout) }

// Kill crashes the server (SIGKILL) and waits for it to exit: its clients'
// connections are reset and everything it held is gone.
func (r *Redis) Kill() { r.proc.kill() }

// Pause freezes the server with SIGSTOP: connections stay open and nothing
// is answered until Resume.
func (r *Redis) Pause() { r.proc.pause() }

// Resume thaws a paused server with SIGCONT.
func (r *Redis) Resume() { r.proc.resume() }
