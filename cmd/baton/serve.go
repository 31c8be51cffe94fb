package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

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
SIGTERM, SIGINT, SIGQUIT or SIGHUP; SIGHUP or SIGINT ignored when it started
stays ignored (SIGHUP under nohup; SIGINT for a job a script started with &:
stop that one with SIGTERM). Go keeps only those two ignored: SIGQUIT, which
a script's & ignores too, stops it. Stopped before it serves, it
exits 130.

A cluster member waits for a quorum of the members --initial-cluster names
for as long as they take to start (it says so), as etcd does;
--initial-cluster must name it (--name) at its --peer-listen URL.`,
		Example: `  # a single node, data in ./baton-data
  baton serve

  # a member's data dir defaults to ./baton-data-NAME; one dir serves one member

  # member 1 of a three-member cluster
  baton serve --name m1 --data-dir /var/lib/baton/m1 \
    --listen http://10.0.0.1:2379 --peer-listen http://10.0.0.1:2380 \
    --initial-cluster m1=http://10.0.0.1:2380,m2=http://10.0.0.2:2380,m3=http://10.0.0.3:2380`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if c.Name == "" {
				return usageError("--name is empty: give this member a name, such as m1")
			}
			if cmd.Flags().Changed("data-dir") && strings.TrimSpace(c.Dir) == "" {
				return usageError(`--data-dir is empty: give a directory, or leave it out for the default`)
			}
			if c.Dir == "" {
				if c.Dir, err = defaultDataDir(c.Name); err != nil {
					return err
				}
			}
			if c.ClientURL, err = listenURL("--listen", listen); err != nil {
				return err
			}
			if c.PeerURL, err = listenURL("--peer-listen", peer); err != nil {
				return err
			}
			if c.ClusterState != "new" && c.ClusterState != "existing" {
				return usageError("--initial-cluster-state %q: use new or existing", c.ClusterState)
			}
			var peers []string
			if c.InitialCluster, peers, err = checkCluster(c); err != nil {
				return err
			}
			log := g.logger(cmd.ErrOrStderr())
			c.Logger = zapslog.New(log.Handler())
			stopHint := func() {}
			if len(peers) > 0 {
				// Its peers may be started by hand on other machines: wait
				// for them as long as they take, as etcd does, and say
				// what to check when that is long.
				c.WaitForQuorum = true
				fmt.Fprintf(cmd.OutOrStdout(), "baton serve: member %q waits for a quorum of the cluster (its peers: %s); stop with Ctrl-C\n", c.Name, strings.Join(peers, ", "))
				stopHint = sayLater(cmd.ErrOrStderr(), slowStart, fmt.Sprintf("baton serve: still waiting for a quorum after %v: if the other members run, check that each has the same --initial-cluster; a data dir from an earlier start keeps the cluster it began with (a member started afresh, with %s moved aside, forgets its votes: remove it from the cluster with etcdctl member remove, then add it again)", slowStart, c.Dir))
			}
			srv, err := etcdserver.Start(cmd.Context(), c)
			stopHint()
			err = interrupted(cmd.Context(), err, "while starting the etcd server")
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%w: another process (another baton serve, an etcd) listens there; stop it, or pick free ports with --listen and --peer-listen", err)
			}
			if errors.Is(err, etcdserver.ErrDirInUse) {
				return fmt.Errorf("%w: another baton serve runs on it; stop it, or give this one its own --data-dir", err)
			}
			var damaged *etcdserver.DamagedError
			if errors.As(err, &damaged) {
				return fmt.Errorf("%w; restore it from a backup, or move it aside to start afresh (a member of a cluster then joins it again as a new member: etcdctl member remove, then member add)", err)
			}
			var member *etcdserver.MemberError
			if errors.As(err, &member) {
				return usageError("%v; start it with that member's --name, --peer-listen and --initial-cluster, or give this one its own --data-dir", err)
			}
			var alone *etcdserver.AloneError
			if errors.As(err, &alone) {
				return usageError("%v; give this member an empty --data-dir (with --initial-cluster-state existing to join a running cluster), or leave out --initial-cluster to serve this data alone", err)
			}
			if err != nil {
				return err
			}
			defer srv.Close()
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
	f.StringVar(&c.Dir, "data-dir", "", `directory for the server's data (default "baton-data", or "baton-data-NAME" with --name NAME; a member whose baton-data-NAME is empty while baton-data holds data must choose)`)
	f.StringVar(&listen, "listen", "http://127.0.0.1:2379", "where clients connect (host:port or http://host:port)")
	f.StringVar(&c.Name, "name", "default", "this member's name")
	f.StringVar(&peer, "peer-listen", "http://127.0.0.1:2380", "where the other members connect")
	f.StringVar(&c.InitialCluster, "initial-cluster", "", "all members as name=peer-URL,... (default: this member alone)")
	f.StringVar(&c.ClusterState, "initial-cluster-state", "new", "new, or existing to join a running cluster")
	return cmd
}

// slowStart is how long a cluster member waits for a quorum before it
// says what to check.
const slowStart = 30 * time.Second

// sayLater prints line on w after d, unless the returned stop is called
// first; stop returns once nothing more will be printed.
func sayLater(w io.Writer, d time.Duration, line string) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			fmt.Fprintln(w, line)
		case <-done:
		}
	}()
	return func() { close(done); <-ended }
}

// checkCluster checks --initial-cluster against --name, --listen and
// --peer-listen before etcd does, whose words name flags baton does not
// have. It returns the cluster with each URL written as etcd takes it
// (host:port and http://host:port/ become http://host:port, as for
// --peer-listen), and the names of this member's peers (none when it
// serves alone).
func checkCluster(c etcdserver.Config) (cluster string, peers []string, err error) {
	if c.ClientURL == c.PeerURL {
		return "", nil, usageError("--listen and --peer-listen are both %s: clients and peers need a port each", c.ClientURL)
	}
	if c.InitialCluster == "" {
		return "", nil, nil
	}
	var members []string
	mine := ""
	named, at := map[string]bool{}, map[string]string{} // names given; peer URL -> name
	for _, m := range strings.Split(c.InitialCluster, ",") {
		name, u, ok := strings.Cut(m, "=")
		peerURL, err := listenURL("--initial-cluster member "+strconv.Quote(name), u)
		if !ok || name == "" || err != nil {
			return "", nil, usageError("--initial-cluster %q: want name=http://host:port,... for every member, this one (%s) included", c.InitialCluster, c.Name)
		}
		if named[name] {
			return "", nil, usageError("--initial-cluster names member %q twice: give each member one name=URL", name)
		}
		if other, ok := at[peerURL]; ok {
			return "", nil, usageError("--initial-cluster gives members %q and %q the same peer URL %s: each member needs its own", other, name, peerURL)
		}
		named[name], at[peerURL] = true, name
		members = append(members, name+"="+peerURL)
		if name == c.Name {
			mine = peerURL
		} else {
			peers = append(peers, name)
		}
	}
	switch {
	case mine == "":
		return "", nil, usageError("--initial-cluster names no member %q (--name): list every member, this one included", c.Name)
	case mine != c.PeerURL:
		return "", nil, usageError("--initial-cluster gives member %q the peer URL %s, and --peer-listen is %s: they must be the same", c.Name, mine, c.PeerURL)
	}
	return strings.Join(members, ","), peers, nil
}

// defaultDataDir is where member name keeps its data without --data-dir:
// baton-data for the default member, baton-data-NAME for the others. An
// older baton kept every member's data in baton-data: a member whose
// baton-data-NAME is empty while baton-data holds data is refused, since
// starting it afresh beside its own log would make it forget its votes.
func defaultDataDir(name string) (string, error) {
	const base = "baton-data"
	if name == "default" {
		return base, nil
	}
	if !dirSafe.MatchString(name) || name == "." || name == ".." {
		return "", usageError("--name %q cannot be part of a directory's name: pass --data-dir", name)
	}
	dir := base + "-" + name
	_, errOwn := os.Stat(filepath.Join(dir, "member"))
	_, errOld := os.Stat(filepath.Join(base, "member"))
	if errors.Is(errOwn, fs.ErrNotExist) && errOld == nil {
		return "", usageError("%s holds an etcd member's data, and %s, where member %q keeps its data by default, has none: if %s is this member's (an older baton kept every member's data there), pass --data-dir %s; to start this member afresh, pass --data-dir %s", base, dir, name, base, base, dir)
	}
	return dir, nil
}

// dirSafe matches the member names that may be part of a directory's name.
var dirSafe = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// listenURL accepts host:port or http://host:port.
func listenURL(flag, s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Port() == "" || u.Path != "" && u.Path != "/" {
		return "", usageError("%s %q: want host:port or http://host:port", flag, s)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return "", usageError("%s %q: the port must be 1 to 65535 (clients and peers need to know it)", flag, s)
	}
	return "http://" + u.Host, nil
}
