// Package etcdserver runs an embedded etcd server (go.etcd.io/etcd/server/v3/embed)
// for `baton serve`, `baton demo` and the tests: a single node by default,
// or one member of a cluster.
package etcdserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config says where the server keeps its data and listens. Zero values take
// the defaults documented on each field.
type Config struct {
	// Name is the member name. Default "default".
	Name string
	// Dir is the data directory. Required.
	Dir string
	// ClientURL is where clients connect, such as http://127.0.0.1:2379.
	// Required.
	ClientURL string
	// PeerURL is where other members connect. Required.
	PeerURL string
	// InitialCluster lists name=peerURL pairs, comma-separated. Default:
	// this member alone.
	InitialCluster string
	// ClusterState is "new" or "existing". Default "new".
	ClusterState string
	// Logger receives etcd's own logs, up to a stop: a stopping server logs
	// every closed listener as an error. Default: none.
	Logger *zap.Logger
	// StartTimeout bounds the wait for the server to be ready. Default
	// 30s.
	StartTimeout time.Duration
	// WaitForQuorum lifts StartTimeout: only ctx bounds the wait (a
	// cluster member started by hand waits for its peers as long as they
	// take, as etcd does).
	WaitForQuorum bool
}

// ErrDirInUse says that another process holds the data directory: another
// baton serve, or a test's server.
var ErrDirInUse = errors.New("data directory in use by another process")

// AloneError says that the data directory holds a one-member cluster while
// Config.InitialCluster names more members. etcd ignores InitialCluster once
// a directory has data, so the member would lead a cluster of its own, beside
// the one its peers form, and each could grant the same lock.
type AloneError struct {
	Dir    string // the data directory
	Member string // the one member its cluster has
	Named  int    // how many members InitialCluster names
}

func (e *AloneError) Error() string {
	return fmt.Sprintf("data directory %s holds a one-member cluster (member %q), but the initial cluster names %d members: etcd would ignore them and this member would serve alone, beside its peers", e.Dir, e.Member, e.Named)
}

// DamagedError says that etcd could not read the data directory: it
// panicked reading it (an empty or cut write-ahead log, a directory a
// start killed at once left without a member).
type DamagedError struct {
	Dir   string
	Cause any // what etcd panicked with
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("data directory %s is damaged: etcd failed reading it (%v)", e.Dir, e.Cause)
}

// MemberError says that the data directory holds another member's data
// than Config names: started anyway, etcd would rename that member in its
// cluster and serve its identity under the new name.
type MemberError struct {
	Dir     string
	Member  string // the member whose data the directory holds
	Members int    // how many members its cluster has
	Name    string // the name Config gives
}

func (e *MemberError) Error() string {
	return fmt.Sprintf("data directory %s holds member %q of a %d-member cluster, not %q", e.Dir, e.Member, e.Members, e.Name)
}

// Server is a running embedded etcd.
type Server struct {
	e         *embed.Etcd
	clientURL string
	dir       *os.File     // locked while the server runs
	muted     *atomic.Bool // etcd's logs, from the stop on
}

// Start starts the server and waits until it serves clients, ctx ends or
// StartTimeout passes.
func Start(ctx context.Context, c Config) (*Server, error) {
	cfg := embed.NewConfig()
	if c.Name != "" {
		cfg.Name = c.Name
	}
	if c.Dir == "" {
		return nil, errors.New("etcd server: a data directory is required")
	}
	cfg.Dir = c.Dir
	cu, err := parseURL("client URL", c.ClientURL)
	if err != nil {
		return nil, err
	}
	pu, err := parseURL("peer URL", c.PeerURL)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if c.InitialCluster != "" {
		cfg.InitialCluster = c.InitialCluster
	}
	if c.ClusterState != "" {
		cfg.ClusterState = c.ClusterState
	}
	cfg.InitialClusterToken = "baton"
	cfg.ListenMetricsUrls = nil
	cfg.EnableGRPCGateway = false
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	muted := &atomic.Bool{}
	hold := &held{holding: true}
	lg = lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return muteCore{heldCore{c, hold}, muted} }))
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("etcd server config: %w", err)
	}

	dir, fresh, err := lockDir(c.Dir) // fresh: made by this Start, which removes it if it fails
	if err != nil {
		return nil, err
	}
	_, err = os.Stat(filepath.Join(c.Dir, "member", "wal"))
	hadData := err == nil
	e, err := startEtcd(cfg, hadData)
	// A start that failed says why in its error, on one line: etcd's own
	// lines about it (a port in use, ERROR) are dropped; after one that
	// worked, they are written, and from then on every line as it comes.
	hold.release(err == nil)
	if err != nil {
		var damaged *DamagedError
		if !errors.As(err, &damaged) {
			if fresh {
				_ = os.RemoveAll(c.Dir) // nothing but what the failed start wrote; while locked, so no other start is in it
			}
			dir.Close()
		} // else etcd's own database lock may still be held in this process: ours stays, so another Start says ErrDirInUse, not waits
		return nil, fmt.Errorf("start etcd server: %w", err)
	}
	stop := func() {
		muted.Store(true)
		e.Server.Stop() // Close alone hangs on a member that never became ready (etcd issue 9533)
		e.Close()
		dir.Close()
	}
	// The members are known here, from the data, before the server has a
	// leader: no client has been answered yet.
	members, _ := types.NewURLsMap(cfg.InitialCluster) // Validate parsed it
	if named := len(members); hadData && c.InitialCluster != "" && named > 1 {
		if ms := e.Server.Cluster().Members(); len(ms) == 1 {
			stop()
			return nil, &AloneError{Dir: c.Dir, Member: ms[0].Name, Named: named}
		}
	}
	// (A member restarted on its own data rejoins from the members stored
	// there, whatever InitialCluster says, as etcd does.)
	if hadData {
		if m := e.Server.Cluster().Member(e.Server.MemberID()); m != nil && m.Name != "" && m.Name != cfg.Name {
			stop()
			return nil, &MemberError{Dir: c.Dir, Member: m.Name, Members: len(e.Server.Cluster().Members()), Name: cfg.Name}
		}
	}
	timeout := c.StartTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	var late <-chan time.Time
	if !c.WaitForQuorum {
		t := time.NewTimer(timeout)
		defer t.Stop()
		late = t.C
	}
	select {
	case <-e.Server.ReadyNotify():
		return &Server{e: e, clientURL: cu.String(), dir: dir, muted: muted}, nil
	case err := <-e.Err():
		stop()
		return nil, fmt.Errorf("etcd server failed while starting: %w", err)
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("etcd server start: %w", context.Cause(ctx))
	case <-late:
		stop()
		return nil, fmt.Errorf("etcd server not ready after %v (a cluster member waits for a quorum of its peers)", timeout)
	}
}

// startEtcd is embed.StartEtcd, with a panic of etcd's turned into an
// error: a *DamagedError when the data directory had data (etcd
// dereferences what a damaged log left nil). What the failed start opened
// goes with the process. (Some damage etcd reports with a fatal log,
// which exits.)
func startEtcd(cfg *embed.Config, hadData bool) (e *embed.Etcd, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("etcd failed starting in %s: %v", cfg.Dir, r)
			if hadData {
				err = &DamagedError{Dir: cfg.Dir, Cause: r}
			}
		}
	}()
	return embed.StartEtcd(cfg)
}

func parseURL(what, s string) (*url.URL, error) {
	if s == "" {
		return nil, fmt.Errorf("etcd server: a %s is required", what)
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("etcd server: %s %q: want http://host:port", what, s)
	}
	return u, nil
}

// lockDir creates dir if need be (created says it did) and locks it for
// this process. etcd takes
// no lock a second server would notice at once: it waits for the database
// file's lock, for ever, deaf to its context.
func lockDir(dir string) (_ *os.File, created bool, _ error) {
	err := os.Mkdir(dir, 0o700)
	created = err == nil
	if errors.Is(err, fs.ErrNotExist) { // a parent is missing too
		err = os.MkdirAll(dir, 0o700)
		created = err == nil
	}
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
			return nil, false, fmt.Errorf("etcd server: data directory: %w", cmp.Or(serr, fmt.Errorf("%s is not a directory", dir)))
		}
		err = nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("etcd server: data directory: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, false, fmt.Errorf("etcd server: data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, fmt.Errorf("etcd server: %s: %w", dir, ErrDirInUse)
		}
		return nil, false, fmt.Errorf("etcd server: lock data directory %s: %w", dir, err)
	}
	return f, created, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. A
// server started on it may still lose a race for it; callers retry.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// StartLocal starts a single member on free loopback ports, with its data
// in a new directory under dir. A port found free can be taken by another
// process before etcd binds it: then it tries again, on other ports, three
// times in all.
func StartLocal(ctx context.Context, dir string) (*Server, error) {
	var err error
	for try := range 3 {
		cp, err1 := FreePort()
		pp, err2 := FreePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("etcd server: find free ports: %w", err)
		}
		var srv *Server
		srv, err = Start(ctx, Config{
			Dir:       filepath.Join(dir, fmt.Sprintf("etcd-%d", try)),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cp),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", pp),
		})
		if !errors.Is(err, syscall.EADDRINUSE) {
			return srv, err
		}
	}
	return nil, err
}

// Endpoint returns the client URL.
func (s *Server) Endpoint() string { return s.clientURL }

// Err returns a channel that receives the server's fatal error, if any.
func (s *Server) Err() <-chan error { return s.e.Err() }

// Stopped is closed when the server has stopped.
func (s *Server) Stopped() <-chan struct{} { return s.e.Server.StopNotify() }

// IsLeader reports whether this member leads its cluster.
func (s *Server) IsLeader() bool { return s.e.Server.Leader() == s.e.Server.MemberID() }

// Close stops the server, waits for it, and frees the data directory.
func (s *Server) Close() {
	s.muted.Store(true)
	s.e.Close()
	s.dir.Close()
}

// heldCore holds the entries written to it while h holds them, to be
// written or dropped together (see held.release); entries that end the
// process (DPanic and up) it writes at once.
type heldCore struct {
	zapcore.Core
	h *held
}

func (c heldCore) With(f []zapcore.Field) zapcore.Core { return heldCore{c.Core.With(f), c.h} }

func (c heldCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c heldCore) Write(e zapcore.Entry, f []zapcore.Field) error {
	if e.Level < zapcore.DPanicLevel && c.h.hold(c.Core, e, f) {
		return nil
	}
	return c.Core.Write(e, f)
}

// held keeps log entries while holding is set.
type held struct {
	mu      sync.Mutex
	holding bool
	entries []heldEntry
}

type heldEntry struct {
	core   zapcore.Core
	entry  zapcore.Entry
	fields []zapcore.Field
}

// hold keeps an entry for core, and reports whether it did.
func (h *held) hold(core zapcore.Core, e zapcore.Entry, f []zapcore.Field) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding {
		h.entries = append(h.entries, heldEntry{core, e, f})
	}
	return h.holding
}

// release writes the entries kept (write) or drops them, and keeps no more.
func (h *held) release(write bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if write {
		for _, x := range h.entries {
			_ = x.core.Write(x.entry, x.fields)
		}
	}
	h.entries, h.holding = nil, false
}

// muteCore drops every entry once muted is set.
type muteCore struct {
	zapcore.Core
	muted *atomic.Bool
}

func (c muteCore) Enabled(l zapcore.Level) bool { return !c.muted.Load() && c.Core.Enabled(l) }

func (c muteCore) With(f []zapcore.Field) zapcore.Core { return muteCore{c.Core.With(f), c.muted} }

func (c muteCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.muted.Load() {
		return ce
	}
	return c.Core.Check(e, ce)
}
