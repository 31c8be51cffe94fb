// Package etcdserver runs an embedded etcd server (go.etcd.io/etcd/server/v3/embed)
// for `baton serve`, `baton demo` and the tests: a single node by default,
// or one member of a cluster.
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
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
	// Logger receives etcd's own logs. Default: none.
	Logger *zap.Logger
	// StartTimeout bounds the wait for the server to be ready. Default 30s.
	StartTimeout time.Duration
}

// Server is a running embedded etcd.
type Server struct {
	e         *embed.Etcd
	clientURL string
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
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("etcd server config: %w", err)
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd server: %w", err)
	}
	timeout := c.StartTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return &Server{e: e, clientURL: cu.String()}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd server failed while starting: %w", err)
	case <-ctx.Done():
		e.Server.Stop() // Close alone hangs on a member that never became ready (etcd issue 9533)
		e.Close()
		return nil, fmt.Errorf("etcd server start: %w", context.Cause(ctx))
	case <-t.C:
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcd server not ready after %v (a cluster member waits for a quorum of its peers)", timeout)
	}
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

// Endpoint returns the client URL.
func (s *Server) Endpoint() string { return s.clientURL }

// Err returns a channel that receives the server's fatal error, if any.
func (s *Server) Err() <-chan error { return s.e.Err() }

// Stopped is closed when the server has stopped.
func (s *Server) Stopped() <-chan struct{} { return s.e.Server.StopNotify() }

// IsLeader reports whether this member leads its cluster.
func (s *Server) IsLeader() bool { return s.e.Server.Leader() == s.e.Server.MemberID() }

// Close stops the server and waits for it.
func (s *Server) Close() { s.e.Close() }
