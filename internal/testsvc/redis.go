package testsvc

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
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
	redisPortTries    = 3
	redisPollEvery    = 10 * time.Millisecond
)

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

	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd.Wait returned

	mu     sync.Mutex
	paused bool
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
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", err
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no version in %q", out)
}

func startRedis(bin, dir string, args []string) (*Redis, error) {
	var errs []error
	for try := range redisPortTries {
		port, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("find a free port for redis-server: %w", err)
		}
		r, err := runRedis(bin, dir, port, try, args)
		if err == nil {
			return r, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func runRedis(bin, dir string, port, try int, args []string) (*Redis, error) {
	logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", try))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create redis-server log: %w", err)
	}
	defer logFile.Close() // the child has its own copy
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
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so a signal meant for the test binary's group
	// does not reach it, and it dies with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the result is in cmd.ProcessState
		close(r.exited)
	}()
	if err := r.waitReady(logPath); err != nil {
		r.Kill()
		return nil, err
	}
	return r, nil
}

// waitReady polls with PING until the server answers, exits, or the start
// timeout passes.
func (r *Redis) waitReady(logPath string) error {
	deadline := time.Now().Add(redisStartTimeout)
	var last error
	for {
		if last = r.Ping(time.Second); last == nil {
			return nil
		}
		select {
		case <-r.exited:
			log, _ := os.ReadFile(logPath)
			err := fmt.Errorf("redis-server on port %d exited during start-up (%v); log %s:\n%s", r.Port, r.cmd.ProcessState, logPath, tail(log, 10))
			if strings.Contains(string(log), "Address already in use") {
				return fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server on port %d did not answer PING within %v (last error: %v); log:\n%s", r.Port, redisStartTimeout, last, tail(log, 10))
		}
		time.Sleep(redisPollEvery)
	}
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
func (r *Redis) Pid() int { return r.cmd.Process.Pid }

// Exited returns a channel closed when the process has exited.
func (r *Redis) Exited() <-chan struct{} { return r.exited }

// Stop shuts the server down (SIGTERM; SIGKILL after 10s) and waits for it
// to exit. It is safe to call more than once, and after Kill.
func (r *Redis) Stop() {
	select {
	case <-r.exited:
		return
	default:
	}
	r.Resume() // a stopped process cannot act on SIGTERM
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(redisStopTimeout)
	defer t.Stop()
	select {
	case <-r.exited:
	case <-t.C:
		r.Kill()
	}
}

// Kill crashes the server (SIGKILL) and waits for it to exit: its clients'
// connections are reset and everything it held is gone.
func (r *Redis) Kill() {
	select {
	case <-r.exited:
		return
	default:
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
}

// Pause freezes the server with SIGSTOP: connections stay open and nothing
// is answered until Resume.
func (r *Redis) Pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.paused {
		_ = r.cmd.Process.Signal(syscall.SIGSTOP)
		r.paused = true
	}
}

// Resume thaws a paused server with SIGCONT.
func (r *Redis) Resume() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paused {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		r.paused = false
	}
}
