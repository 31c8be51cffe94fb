package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/internal/etcdserver"
	"github.com/baton-go/baton/internal/zapslog"
)

func newServe(g *globals) *cobra.Command {
	var c etcdserver.Config
	var listen, peer string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an embedded etcd server: a single node, or one member of a cluster",
		Long: `serve runs an etcd server inside baton, for a machine that has none: a single
node by default, or one member of a cluster. baton run's default backend,
etcd://127.0.0.1:2379, is what it serves by default. It stops cleanly on
SIGTERM, SIGINT or SIGHUP (SIGHUP only when it was not ignored at start, as
under nohup).`,
		Example: `  # a single node, data in ./baton-data
  baton serve

  # member 1 of a three-member cluster
  baton serve --name m1 --data-dir /var/lib/baton/m1 \
    --listen http://10.0.0.1:2379 --peer-listen http://10.0.0.1:2380 \
    --initial-cluster m1=http://10.0.0.1:2380,m2=http://10.0.0.2:2380,m3=http://10.0.0.3:2380`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if c.ClientURL, err = listenURL("--listen", listen); err != nil {
				return err
			}
			if c.PeerURL, err = listenURL("--peer-listen", peer); err != nil {
				return err
			}
			if c.ClusterState != "new" && c.ClusterState != "existing" {
				return usageError("--initial-cluster-state %q: use new or existing", c.ClusterState)
			}
			log := g.logger(cmd.ErrOrStderr())
			var mute func()
			c.Logger, mute = zapslog.New(log.Handler())
			srv, err := etcdserver.Start(cmd.Context(), c)
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%w: another process (another baton serve, an etcd) listens there; stop it, or pick free ports with --listen and --peer-listen", err)
			}
			if err != nil {
				return err
			}
			defer func() {
				mute()
				srv.Close()
			}()
			fmt.Fprintf(cmd.OutOrStdout(), "baton serve: etcd member %q serving clients on %s (data in %s); stop with Ctrl-C\n", c.Name, strings.TrimPrefix(c.ClientURL, "http://"), c.Dir)
			select {
			case <-cmd.Context().Done():
				log.Info("stopping", "reason", "signal")
				return nil
			case err := <-srv.Err():
				return fmt.Errorf("etcd server failed: %w", err)
			case <-srv.Stopped():
				return fmt.Errorf("etcd server stopped")
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Dir, "data-dir", "baton-data", "directory for the server's data")
	f.StringVar(&listen, "listen", "http://127.0.0.1:2379", "where clients connect (host:port or http://host:port)")
	f.StringVar(&c.Name, "name", "default", "this member's name")
	f.StringVar(&peer, "peer-listen", "http://127.0.0.1:2380", "where the other members connect")
	f.StringVar(&c.InitialCluster, "initial-cluster", "", "all members as name=peer-URL,... (default: this member alone)")
	f.StringVar(&c.ClusterState, "initial-cluster-state", "new", "new, or existing to join a running cluster")
	return cmd
}

// listenURL accepts host:port or http://host:port.
func listenURL(flag, s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Port() == "" || u.Path != "" && u.Path != "/" {
		return "", usageError("%s %q: want host:port or http://host:port", flag, s)
	}
	return "http://" + u.Host, nil
}
