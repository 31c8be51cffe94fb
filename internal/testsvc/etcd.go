package testsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-go/baton/internal/etcdserver"
)

// Etcd is an etcd server for one test: embedded in-process, or the Debian
// etcd binary in a child process.
type Etcd struct {
	// Endpoint is the client URL, http://127.0.0.1:PORT.
	Endpoint string
	// Version is the server's version as it reports it.
	Version string

	stop func()
}

// StartEtcd starts an embedded etcd server (the version in go.mod) on free
// loopback ports in a temp dir, stopped when tb ends.
func StartEtcd(tb testing.TB) *Etcd {
	tb.Helper()
	e, err := NewEtcd(tb.TempDir())
	if err != nil {
		tb.Fatalf("embedded etcd did not start: %v", err)
	}
	tb.Cleanup(e.Stop)
	return e
}

// NewEtcd starts an embedded etcd server with its data in dir, for a
// TestMain that shares one server among its tests; Stop it after m.Run.
func NewEtcd(dir string) (*Etcd, error) {
	var lastErr error
	for try := range 3 {
		cp, err1 := FreePort()
		pp, err2 := FreePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		srv, err := etcdserver.Start(context.Background(), etcdserver.Config{
			Dir:       filepath.Join(dir, fmt.Sprintf("etcd-%d", try)),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cp),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", pp),
		})
		if err != nil {
			lastErr = err
			continue // most likely a port taken in the meantime
		}
		return &Etcd{Endpoint: srv.Endpoint(), Version: "embedded", stop: srv.Close}, nil
	}
	return nil, lastErr
}

// StartEtcdBinary starts the etcd binary from Debian's etcd-server package
// (3.4 on Debian 12) on free loopback ports in a temp dir, stopped when tb
// ends. It skips (or fails under BATON_REQUIRE_SERVICES=1) when the binary
// is missing.
func StartEtcdBinary(tb testing.TB) *Etcd {
	tb.Helper()
	bin, err := LookBinary("etcd", "etcd-server")
	if err != nil {
		Unavailable(tb, "etcd binary", err)
	}
	var lastErr error
	for range 3 {
		e, err := startEtcdBinary(tb, bin)
		if err == nil {
			tb.Cleanup(e.Stop)
			return e
		}
		lastErr = err
	}
	tb.Fatalf("etcd binary did not start: %v", lastErr)
	return nil
}

func startEtcdBinary(tb testing.TB, bin string) (*Etcd, error) {
	dir := tb.TempDir()
	cp, err1 := FreePort()
	pp, err2 := FreePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	logPath := filepath.Join(dir, "etcd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin,
		"--name", "default",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer,
		"--log-level", "warn", "--logger", "zap",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	version, err := waitEtcd(client, exited)
	if err != nil {
		stop()
		out, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w; log: %s", err, lastLines(string(out), 5))
	}
	return &Etcd{Endpoint: client, Version: version, stop: stop}, nil
}

// waitEtcd polls the server's status until it answers, the process exits or
// 30 s pass.
func waitEtcd(endpoint string, exited <-chan struct{}) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, endpoint)
		cancel()
		if err == nil {
			return st.Version, nil
		}
		select {
		case <-exited:
			return "", errors.New("etcd exited while starting")
		default:
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("etcd not ready after 30s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Stop stops the server; it is safe to call more than once.
func (e *Etcd) Stop() {
	if e.stop != nil {
		e.stop()
		e.stop = nil
	}
}

// Client returns a client for endpoint (the server's, or a proxy's), closed
// when tb ends.
func Client(tb testing.TB, endpoint string) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("etcd client for %s: %v", endpoint, err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
