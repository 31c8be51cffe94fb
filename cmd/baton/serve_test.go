package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/etcdserver"
	"github.com/baton-go/baton/internal/syncbuf"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestServe_Cluster runs a three-member `baton serve` cluster on loopback,
// kills the member that leads, and checks that baton run against the other
// two still acquires, with a higher token.
func TestServe_Cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	// Every member serves on its own ports: what answers them is ours.
	ms := startServeMembers(t, 3)
	all := "etcd://" + ms[0].client + "," + ms[1].client + "," + ms[2].client
	waitFor(t, 60*time.Second, func() bool { return runInProcess("status", "--backend", all).code == 0 }, func() string { return "cluster not serving" })

	token := func(backend string) int64 {
		t.Helper()
		r := runBaton(t, "run", "--backend", backend, "invoices", "--", "sh", "-c", `echo "$BATON_TOKEN"`)
		tok, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
		if r.code != 0 || err != nil {
			t.Fatalf("run against %s: exit %d, stdout %q, stderr %q", backend, r.code, r.stdout, r.stderr)
		}
		return tok
	}
	before := token(all)

	// Find and kill the leader.
	c := testsvc.Client(t, "http://"+ms[0].client)
	leader := -1
	for i, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.Status(ctx, "http://"+m.client)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member says it leads")
	}
	if err := syscall.Kill(ms[leader].proc.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ms[leader].proc.done
	var rest []string
	for i, m := range ms {
		if i != leader {
			rest = append(rest, m.client)
		}
	}
	remaining := "etcd://" + strings.Join(rest, ",")
	waitFor(t, 30*time.Second, func() bool { return runInProcess("status", "--backend", remaining).code == 0 }, func() string { return "no new leader" })
	after := token(remaining)
	t.Logf("killed leader %s; token %d before, %d after", ms[leader].name, before, after)
	if after <= before {
		t.Fatalf("token after the leader died %d <= %d before", after, before)
	}

	// The dead leader restarted on its own data rejoins from the members
	// stored there, without --initial-cluster, as etcd's members do; under
	// another name it is refused, before etcd renames it.
	m := ms[leader]
	peer := strings.TrimPrefix(m.peer, "http://")
	r := runBaton(t, "serve", "--name", "other", "--data-dir", m.dir, "--listen", m.client, "--peer-listen", peer)
	if r.code != exitUsage || !strings.Contains(r.stderr, fmt.Sprintf("holds member %q of a 3-member cluster, not \"other\"", m.name)) {
		t.Fatalf("a member's data under another name: exit %d, stderr %q; want %d, whose data it is", r.code, r.stderr, exitUsage)
	}
	oneLine(t, r)
	stopServe(t, startServe(t, m.dir, "--name", m.name, "--data-dir", m.dir, "--listen", m.client, "--peer-listen", peer))
}

// TestServe_PortInUse: a port already taken gets one error that says
// what to do.
func TestServe_PortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pp, _ := testsvc.FreePort()
	r := runInProcess("serve", "--data-dir", t.TempDir(), "--listen", ln.Addr().String(), "--peer-listen", fmt.Sprintf("127.0.0.1:%d", pp))
	if r.code != 1 || !strings.Contains(r.stderr, "address already in use") || !strings.Contains(r.stderr, "--listen") {
		t.Fatalf("serve on a port in use: exit %d, stderr %q; want 1 and what to do", r.code, r.stderr)
	}
	oneLine(t, r)
	// The peer port: etcd logged its own ERROR line about it first.
	cp, _ := testsvc.FreePort()
	r = runInProcess("serve", "--data-dir", t.TempDir(), "--listen", fmt.Sprintf("127.0.0.1:%d", cp), "--peer-listen", ln.Addr().String())
	if r.code != 1 || !strings.Contains(r.stderr, "address already in use") || !strings.Contains(r.stderr, "--peer-listen") {
		t.Fatalf("serve on a peer port in use: exit %d, stderr %q; want 1 and what to do", r.code, r.stderr)
	}
	oneLine(t, r)
}

// TestServe_StopsWhileWaitingForPeers: a cluster member whose peers are
// not up stops on SIGTERM, as serve's help says. Before, it hung in etcd's
// Close (etcd issue 9533), deaf to signals, until SIGKILL.
func TestServe_StopsWhileWaitingForPeers(t *testing.T) {
	var ps [4]int
	for i := range ps {
		p, err := testsvc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	cluster := fmt.Sprintf("m1=http://127.0.0.1:%d,m2=http://127.0.0.1:%d,m3=http://127.0.0.1:%d", ps[1], ps[2], ps[3])
	p := startBaton(t, "serve", "--name", "m1", "--data-dir", t.TempDir(),
		"--listen", fmt.Sprintf("127.0.0.1:%d", ps[0]), "--peer-listen", fmt.Sprintf("127.0.0.1:%d", ps[1]), "--initial-cluster", cluster)
	// Waiting for its peers: its client port is up, it answers nothing.
	waitFor(t, 30*time.Second, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ps[0]))
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, func() string { return p.stderr.String() })
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve waiting for its peers did not stop within 15s of SIGTERM; stderr %q", p.stderr.String())
	}
	// Interrupted while starting: 130, as every wait baton makes; and it
	// said what it waited for (with no bound of its own: it waits for its
	// peers as long as they take, as etcd does).
	if r := p.wait(t); r.code != exitInterrupted || !strings.Contains(r.stdout, "waits for a quorum") || !strings.Contains(r.stderr, "interrupted while starting") {
		t.Fatalf("serve stopped while waiting for its peers: exit %d, stdout %q, stderr %q; want 130, having said it waits for a quorum", r.code, r.stdout, r.stderr)
	}
}

// serveMember is one `baton serve` process started by startServeMembers.
type serveMember struct {
	name, client, peer, dir string // peer is http://127.0.0.1:PORT
	proc                    *execResult
}

// startServeMembers starts n `baton serve` processes on free loopback
// ports, each with a new data dir (a cluster of members m1, m2, ... when
// n > 1), and waits until every one says it serves clients, which it
// says only once it has bound its ports: then, while it runs, what answers
// them is this member, not another package's server. A port found free
// can be taken by another process before serve binds it: a member that
// exits saying an address is in use has them all started again on new
// ports, as testsvc does for its servers; any other exit fails t.
func startServeMembers(t *testing.T, n int) []*serveMember {
	t.Helper()
	return startServeMembersOn(t, n, testsvc.FreePort)
}

// startServeMembersOn is startServeMembers with the free ports from
// freePort.
func startServeMembersOn(t *testing.T, n int, freePort func() (int, error)) []*serveMember {
	t.Helper()
	const tries = 3
	var taken []string // stderr of each member that lost a port
	for range tries {
		ms := make([]*serveMember, n)
		var initial []string
		for i := range ms {
			cp, err1 := freePort()
			pp, err2 := freePort()
			if err := errors.Join(err1, err2); err != nil {
				t.Fatalf("free ports for baton serve: %v", err)
			}
			ms[i] = &serveMember{name: "default", client: fmt.Sprintf("127.0.0.1:%d", cp), peer: fmt.Sprintf("http://127.0.0.1:%d", pp), dir: t.TempDir()}
			if n > 1 {
				ms[i].name = fmt.Sprintf("m%d", i+1)
			}
			initial = append(initial, ms[i].name+"="+ms[i].peer)
		}
		for _, m := range ms {
			args := []string{"serve", "--data-dir", m.dir, "--listen", m.client, "--peer-listen", m.peer}
			if n > 1 {
				args = append(args, "--name", m.name, "--initial-cluster", strings.Join(initial, ","))
			}
			m.proc = startBaton(t, args...)
		}
		lost := ""
		waitFor(t, 60*time.Second, func() bool {
			serving := 0
			for _, m := range ms {
				if code, ok := m.proc.exited(); ok {
					if code == exitFailure && strings.Contains(m.proc.stderr.String(), "address already in use") {
						lost = m.proc.stderr.String()
						return true
					}
					t.Fatalf("baton serve %s exited %d before serving: stderr %q", m.name, code, m.proc.stderr.String())
				}
				if strings.Contains(m.proc.stdout.String(), "serving clients") {
					serving++
				}
			}
			return serving == n
		}, func() string {
			var out []string
			for _, m := range ms {
				out = append(out, fmt.Sprintf("%s: stdout %q, stderr %q", m.name, m.proc.stdout.String(), m.proc.stderr.String()))
			}
			return "not every baton serve says it serves clients: " + strings.Join(out, "; ")
		})
		if lost == "" {
			return ms
		}
		taken = append(taken, strings.TrimSpace(lost))
		t.Logf("baton serve lost a port to another process; starting again on new ports: %s", lost)
		for _, m := range ms {
			_ = syscall.Kill(-m.proc.cmd.Process.Pid, syscall.SIGKILL)
			<-m.proc.done
		}
	}
	t.Fatalf("baton serve lost a port to another process on each of %d tries: %s", tries, strings.Join(taken, "; "))
	return nil
}

// TestServe_StartMembers_PortTaken: a port found free that another
// process binds first (here a listener of the test's own, given as the
// first free port) makes that serve exit; startServeMembers starts it
// again on new ports, and hands back a member that serves on its own
// ports, not the port another process answers.
func TestServe_StartMembers_PortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	calls := 0
	freePort := func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return testsvc.FreePort()
	}
	m := startServeMembersOn(t, 1, freePort)[0]
	if m.client == ln.Addr().String() || calls != 4 {
		t.Fatalf("serve on %s after %d free ports; want a second start on new ports, not %s", m.client, calls, ln.Addr())
	}
	if r := runInProcess("status", "--backend", "etcd://"+m.client); r.code != 0 {
		t.Fatalf("status of the restarted serve: exit %d, stderr %q", r.code, r.stderr)
	}
	stopServe(t, m.proc)
}

// serveAddrs returns two free loopback addresses, for --listen and
// --peer-listen.
func serveAddrs(t *testing.T) (client, peer string) {
	t.Helper()
	cp, err1 := testsvc.FreePort()
	pp, err2 := testsvc.FreePort()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return fmt.Sprintf("127.0.0.1:%d", cp), fmt.Sprintf("127.0.0.1:%d", pp)
}

// startServe starts baton serve in dir (the process's working directory)
// and waits until it says it serves.
func startServe(t *testing.T, dir string, args ...string) *execResult {
	t.Helper()
	cmd := batonCmd(append([]string{"serve"}, args...)...)
	cmd.Dir = dir
	p := startCmd(t, cmd)
	waitFor(t, 30*time.Second, func() bool {
		if _, ok := p.exited(); ok {
			t.Fatalf("serve %v exited %d: %s", args, p.code, p.stderr.String())
		}
		return strings.Contains(p.stdout.String(), "serving clients")
	}, func() string { return "serve not serving: " + p.stderr.String() })
	return p
}

// stopServe stops a baton serve with SIGTERM and checks that it exits 0.
func stopServe(t *testing.T, p *execResult) {
	t.Helper()
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	if r := p.wait(t); r.code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestServe_DataDirInUse: a second serve on a data directory that a running
// serve holds says so at once. Before, it waited for etcd's database lock
// for ever, silent and deaf to SIGTERM.
func TestServe_DataDirInUse(t *testing.T) {
	dir := t.TempDir()
	c1, p1 := serveAddrs(t)
	startServe(t, dir, "--data-dir", dir, "--listen", c1, "--peer-listen", p1)
	c2, p2 := serveAddrs(t)
	r := runBaton(t, "serve", "--data-dir", dir, "--listen", c2, "--peer-listen", p2)
	if r.code != 1 || !strings.Contains(r.stderr, "in use") || !strings.Contains(r.stderr, "--data-dir") {
		t.Fatalf("second serve on %s: exit %d, stderr %q; want 1, in use, and what to do", dir, r.code, r.stderr)
	}
	oneLine(t, r)
}

// TestServe_MemberOnSingleNodeData: a data directory that a single node
// served, given to a member of a three-member cluster, is refused. etcd
// ignores --initial-cluster once a directory has data: the member would
// lead a cluster of its own, and a lock held in the real cluster could be
// granted again there.
func TestServe_MemberOnSingleNodeData(t *testing.T) {
	dir := t.TempDir()
	c, p := serveAddrs(t)
	stopServe(t, startServe(t, dir, "--data-dir", dir, "--listen", c, "--peer-listen", p))

	_, p2 := serveAddrs(t)
	_, p3 := serveAddrs(t)
	cluster := fmt.Sprintf("m1=http://%s,m2=http://%s,m3=http://%s", p, p2, p3)
	r := runBaton(t, "serve", "--name", "m1", "--data-dir", dir, "--listen", c, "--peer-listen", p, "--initial-cluster", cluster)
	if r.code != 2 || !strings.Contains(r.stderr, "one-member cluster") || !strings.Contains(r.stderr, "--data-dir") {
		t.Fatalf("member on a single node's data: exit %d, stderr %q; want 2, why, and what to do", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "serving clients") {
		t.Fatalf("it served before it refused: %q", r.stdout)
	}
	oneLine(t, r)
}

// TestServe_DataDirNotThisMembers: a data directory of another member
// (a name given that is not the one it holds) is refused, before etcd
// renames that member; one whose write-ahead log is damaged is one line
// saying so, where etcd panicked with a stack trace.
func TestServe_DataDirNotThisMembers(t *testing.T) {
	dir := t.TempDir()
	c, p := serveAddrs(t)
	stopServe(t, startServe(t, dir, "--data-dir", dir, "--listen", c, "--peer-listen", p))

	r := runBaton(t, "serve", "--name", "other", "--data-dir", dir, "--listen", c, "--peer-listen", p)
	if r.code != exitUsage || !strings.Contains(r.stderr, `holds member "default" of a 1-member cluster, not "other"`) {
		t.Fatalf("another member's data: exit %d, stderr %q; want %d, whose data it is", r.code, r.stderr, exitUsage)
	}
	oneLine(t, r)

	wals, err := filepath.Glob(filepath.Join(dir, "member", "wal", "*.wal"))
	if err != nil || len(wals) == 0 {
		t.Fatalf("no write-ahead log in %s: %v", dir, err)
	}
	for _, w := range wals {
		if err := os.Truncate(w, 0); err != nil {
			t.Fatal(err)
		}
	}
	r = runBaton(t, "serve", "--data-dir", dir, "--listen", c, "--peer-listen", p)
	if r.code != exitFailure || !strings.Contains(r.stderr, "is damaged") || strings.Contains(r.stderr, "goroutine") {
		t.Fatalf("a damaged log: exit %d, stderr %q; want %d, one line saying so", r.code, r.stderr, exitFailure)
	}
	oneLine(t, r)
}

// TestServe_DefaultDataDirPerName: without --data-dir, a member named m1
// keeps its data in baton-data-m1, and the default member in baton-data.
// A member whose baton-data-NAME is empty while baton-data holds data (a
// single node's, or this member's from an older baton, which kept every
// member's there) must choose with --data-dir: taking the single node's
// would make it lead alone, and starting afresh beside its own log would
// make it forget its votes.
func TestServe_DefaultDataDirPerName(t *testing.T) {
	cwd := t.TempDir()
	c, p := serveAddrs(t)
	s := startServe(t, cwd, "--name", "m1", "--listen", c, "--peer-listen", p)
	if !strings.Contains(s.stdout.String(), "(data in baton-data-m1)") {
		t.Errorf("serve --name m1 says %q; want its data in baton-data-m1", s.stdout.String())
	}
	stopServe(t, s)
	c, p = serveAddrs(t)
	stopServe(t, startServe(t, cwd, "--listen", c, "--peer-listen", p))
	for _, d := range []string{"baton-data", "baton-data-m1"} {
		if _, err := os.Stat(filepath.Join(cwd, d, "member")); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	// m1 has its own dir now; m2 has none, and baton-data has data.
	c, p = serveAddrs(t)
	stopServe(t, startServe(t, cwd, "--name", "m1", "--listen", c, "--peer-listen", p))
	cmd := batonCmd("serve", "--name", "m2", "--listen", c, "--peer-listen", p)
	cmd.Dir = cwd
	r := startCmd(t, cmd).wait(t)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--data-dir baton-data-m2") {
		t.Fatalf("serve --name m2 beside a baton-data with data: exit %d, stderr %q; want %d and the choice", r.code, r.stderr, exitUsage)
	}
	oneLine(t, r)
}

// TestServe_BadFlags: an empty name and port 0 are usage errors. Each runs
// in a process of its own, bounded: before, serve ran on them.
func TestServe_BadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--name", ""},
		{"--listen", "127.0.0.1:0"},
		{"--peer-listen", "http://127.0.0.1:0"},
		{"--listen", "127.0.0.1:70000"},
		// --initial-cluster, checked before etcd, whose words name flags
		// baton does not have (and exit 1).
		{"--initial-cluster", "garbage"},
		{"--initial-cluster", "m2=http://127.0.0.1:2391"},
		{"--peer-listen", "127.0.0.1:2390", "--initial-cluster", "default=http://127.0.0.1:2391"},
		{"--listen", "127.0.0.1:2390", "--peer-listen", "127.0.0.1:2390"},
		// etcd said so in its own words, exit 1, after serve had said the
		// member waits for a quorum.
		{"--initial-cluster", "default=http://127.0.0.1:2380,m2=127.0.0.1:2380"},
		{"--initial-cluster", "default=http://127.0.0.1:2380,default=http://127.0.0.1:2381"},
		{"--data-dir", ""}, // after the test's own: an empty one wins
	} {
		r := runBaton(t, append([]string{"serve", "--data-dir", t.TempDir()}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("serve %q: exit %d, stderr %q; want 2 naming %s", args, r.code, r.stderr, args[0])
			continue
		}
		oneLine(t, r)
	} // A name that cannot be part of the default data dir's name.
	cmd := batonCmd("serve", "--name", "../m1")
	cmd.Dir = t.TempDir()
	r := startCmd(t, cmd).wait(t)
	if r.code != 2 || !strings.Contains(r.stderr, "--data-dir") {
		t.Errorf("serve --name ../m1 without --data-dir: exit %d, stderr %q; want 2, and to pass --data-dir", r.code, r.stderr)
	}
}

// TestSayLater: the hint a cluster member prints when its quorum is slow
// comes after the delay, and never once stopped: a member that started
// (or failed) in time says nothing more.
func TestSayLater(t *testing.T) {
	var b syncbuf.Buffer
	sayLater(&b, time.Hour, "late")()
	if b.String() != "" {
		t.Fatalf("printed %q after stop", b.String())
	}
	stop := sayLater(&b, 0, "now")
	waitFor(t, 10*time.Second, func() bool { return b.String() == "now\n" }, func() string { return b.String() })
	stop()
}

// TestCheckCluster_Normalizes: --initial-cluster is handed to etcd as it
// was checked, each URL written as for --peer-listen: etcd refused
// host:port ("first path segment in URL cannot contain colon") and a
// trailing slash ("URL must not contain a path") after the check had let
// them through.
func TestCheckCluster_Normalizes(t *testing.T) {
	c := etcdserver.Config{Name: "m1", ClientURL: "http://127.0.0.1:2379", PeerURL: "http://127.0.0.1:2380",
		InitialCluster: "m1=127.0.0.1:2380,m2=http://10.0.0.2:2380/,m3=http://[::1]:2380"}
	cluster, peers, err := checkCluster(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := "m1=http://127.0.0.1:2380,m2=http://10.0.0.2:2380,m3=http://[::1]:2380"; cluster != want {
		t.Errorf("cluster %q, want %q", cluster, want)
	}
	if strings.Join(peers, " ") != "m2 m3" {
		t.Errorf("peers %q, want m2 m3", peers)
	}
}

// TestCheckCluster_Duplicates: --initial-cluster with a member named twice,
// or two members at one peer URL, is refused, each saying which.
func TestCheckCluster_Duplicates(t *testing.T) {
	for cluster, want := range map[string]string{
		"m1=127.0.0.1:2380,m1=127.0.0.1:2381": `names member "m1" twice`,
		"m1=127.0.0.1:2380,m2=127.0.0.1:2380": `members "m1" and "m2" the same peer URL`,
	} {
		c := etcdserver.Config{Name: "m1", ClientURL: "http://127.0.0.1:2379", PeerURL: "http://127.0.0.1:2380", InitialCluster: cluster}
		if _, _, err := checkCluster(c); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkCluster(%s) = %v, want it to say %s", cluster, err, want)
		}
	}
}
