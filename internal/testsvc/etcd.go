package testsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-go/baton/internal/etcdserver"
)

// etcd binary start-up and shutdown limits.
const (
	etcdStartTimeout = 30 * time.Second
	etcdPollEvery    = 50 * time.Millisecond
	etcdStopTimeout  = 10 * time.Second // SIGTERM, then SIGKILL
)

// Etcd is an etcd server for one test: embedded in-process, or the Debian
// etcd binary in a child process.
type Etcd struct {
	// Endpoint is the client URL, http://127.0.0.1:PORT.
	Endpoint string
	// Version is the server's version as it reports it.
	Version string

	stop func()
	proc *process // the binary's; nil when embedded
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
	srv, err := etcdserver.StartLocal(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	return &Etcd{Endpoint: srv.Endpoint(), Version: "embedded", stop: srv.Close}, nil
}

// StartEtcdCluster starts a cluster of n embedded etcd members on free
// loopback ports in temp dirs, each stopped when tb ends (or before, by its
// Stop).
func StartEtcdCluster(tb testing.TB, n int) []*Etcd {
	tb.Helper()
	var lastErr error
	for range 3 {
		ms, err := startCluster(tb.TempDir(), n)
		if err == nil {
			for _, m := range ms {
				tb.Cleanup(m.Stop)
			}
			return ms
		}
		lastErr = err // most likely a port taken in the meantime
	}
	tb.Fatalf("embedded etcd cluster of %d did not start: %v", n, lastErr)
	return nil
}

func startCluster(dir string, n int) ([]*Etcd, error) {
	cfgs := make([]etcdserver.Config, n)
	var initial []string
	for i := range cfgs {
		cp, err1 := FreePort()
		pp, err2 := FreePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		name := fmt.Sprintf("m%d", i+1)
		cfgs[i] = etcdserver.Config{Name: name, Dir: filepath.Join(dir, name),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cp), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", pp)}
		initial = append(initial, name+"="+cfgs[i].PeerURL)
	}
	// Each member waits for a quorum of the others: start them together.
	srvs := make([]*etcdserver.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(initial, ",")
		wg.Go(func() { srvs[i], errs[i] = etcdserver.Start(context.Background(), cfgs[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range srvs {
			if s != nil {
				s.Close()
			}
		}
		return nil, err
	}
	ms := make([]*Etcd, n)
	for i, s := range srvs {
		ms[i] = &Etcd{Endpoint: s.Endpoint(), Version: "embedded", stop: s.Close}
	}
	return ms, nil
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
	dir := tb.TempDir()
	e, err := onFreePort("etcd", func(port, try int) (*Etcd, error) {
		return startEtcdBinary(bin, filepath.Join(dir, fmt.Sprintf("etcd-%d", try)), port)
	})
	if err != nil {
		tb.Fatalf("etcd binary did not start: %v", err)
	}
	tb.Cleanup(e.Stop)
	return e
}

// startEtcdBinary starts the etcd binary with its data and log in dir, its
// client URL on port and its peer URL on another free port, and waits
// until it answers.
func startEtcdBinary(bin, dir string, port int) (*Etcd, error) {
	pp, err := FreePort()
	if err != nil {
		return nil, fmt.Errorf("find a free port for etcd: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", port)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	cmd := exec.Command(bin,
		"--name", "default",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer,
		"--log-level", "warn", "--logger", "zap",
	)
	proc, err := startProcess("etcd on "+client, cmd, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	stop := func() { proc.stop(syscall.SIGTERM, etcdStopTimeout) }
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		stop()
		return nil, err
	}
	defer c.Close()
	var version string
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := c.Status(ctx, client)
		if err != nil {
			return err
		}
		version = st.Version
		return nil
	}
	if err := proc.waitReady(port, etcdStartTimeout, etcdPollEvery, ready); err != nil {
		stop()
		return nil, err
	}
	return &Etcd{Endpoint: client, Version: version, stop: stop, proc: proc}, nil
}

// Pause freezes the etcd binary with SIGSTOP, as a server stalled past its
// clients' TTLs: they get no answer, and once it is resumed it revokes the
// leases that ran out meanwhile. Only a server from StartEtcdBinary can be
// paused (tb fails otherwise); Stop resumes it first.
func (e *Etcd) Pause(tb testing.TB) {
	tb.Helper()
	if e.proc == nil {
		tb.Fatal("testsvc: an embedded etcd server cannot be paused: start it with StartEtcdBinary")
	}
	e.proc.pause()
}

// Resume thaws a paused server with SIGCONT.
func (e *Etcd) Resume() {
	if e.proc != nil {
		e.proc.resume()
	}
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
