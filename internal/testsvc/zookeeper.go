package testsvc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

// ZooKeeper start-up and shutdown limits, and where Debian's package keeps
// its jars.
const (
	zkTickTime       = 500 * time.Millisecond // sessions 1s .. 10s
	zkStartTimeout   = 60 * time.Second       // JVM start-up on a loaded machine
	zkPollEvery      = 50 * time.Millisecond
	zkStopTimeout    = 10 * time.Second // SIGTERM, then SIGKILL
	zkPackage        = "zookeeper"
	zkJar            = "/usr/share/java/zookeeper.jar"
	zkLogJar         = "/usr/share/java/slf4j-simple.jar" // optional: server logs
	zkMainClass      = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
	zkFourLetterWait = 2 * time.Second
	// zkExitBindFailed is ZooKeeper's exit code when it cannot bind its
	// election or quorum port (ExitCode.UNABLE_TO_BIND_QUORUM_PORT): it
	// retries the election port three times, a second apart, then exits.
	zkExitBindFailed = 14
)

// ZooKeeper is one standalone ZooKeeper server shared by every test of a
// test binary, started from Debian's zookeeper package (Java and the jars
// under /usr/share/java). Its zero value is ready to use: the server starts
// on the first call to Addr or Server, in a temp dir, on a free loopback
// port, with tickTime 500ms (so sessions may last 1s to 10s), every
// four-letter command allowed and the admin server off. Declare one in a
// test file and stop it from TestMain:
//
//	var zkServer testsvc.ZooKeeper
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		zkServer.Stop()
//		os.Exit(code)
//	}
//
// The JVM takes a second or two to start, which is why tests share it. The
// server is started with PR_SET_PDEATHSIG, so it dies with the test binary
// even if Stop is never called.
type ZooKeeper struct {
	once sync.Once
	dir  string // temp dir, removed by Stop
	srv  *ZKServer
	err  error

	mu      sync.Mutex
	stopped bool
}

// Addr returns the server's client address, 127.0.0.1:PORT, starting the
// server on first use. If Java or the jars are missing, tb is skipped, or
// fails under BATON_REQUIRE_SERVICES=1; a server that does not start
// fails tb.
func (z *ZooKeeper) Addr(tb testing.TB) string {
	tb.Helper()
	return z.Server(tb).Addr
}

// Server returns the shared server, starting it on first use; see Addr.
func (z *ZooKeeper) Server(tb testing.TB) *ZKServer {
	tb.Helper()
	z.mu.Lock()
	stopped := z.stopped
	z.mu.Unlock()
	if stopped {
		tb.Fatal("testsvc.ZooKeeper used after Stop")
	}
	z.once.Do(func() {
		z.dir, z.err = os.MkdirTemp("", "baton-zookeeper-")
		if z.err == nil {
			z.srv, z.err = startStandalone(z.dir, "")
			if z.err != nil {
				os.RemoveAll(z.dir)
			}
		}
	})
	if z.err != nil {
		if errors.As(z.err, new(*MissingError)) {
			Unavailable(tb, "ZooKeeper", z.err)
		}
		tb.Fatalf("ZooKeeper did not start: %v", z.err)
	}
	return z.srv
}

// Stop stops the server, if it was started, and removes its temp dir. It is
// safe to call more than once.
func (z *ZooKeeper) Stop() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.stopped {
		return
	}
	z.stopped = true
	z.once.Do(func() { z.err = errors.New("server stopped before first use") })
	if z.srv != nil {
		z.srv.Stop()
		os.RemoveAll(z.dir)
	}
}

// StartZooKeeperWith starts a standalone server for tb alone (tickTime
// 500ms, free loopback port, temp dir), with more zoo.cfg lines in cfg,
// such as "minSessionTimeout=6000\n", stopped when tb ends. Prefer a
// shared ZooKeeper unless the test needs its own settings, or stops,
// kills or restarts the server.
func StartZooKeeperWith(tb testing.TB, cfg string) *ZKServer {
	tb.Helper()
	srv, err := startStandalone(tb.TempDir(), cfg)
	if err != nil {
		if errors.As(err, new(*MissingError)) {
			Unavailable(tb, "ZooKeeper", err)
		}
		tb.Fatalf("ZooKeeper did not start: %v", err)
	}
	tb.Cleanup(srv.Stop)
	return srv
}

// ZKServer is one ZooKeeper server process: standalone, or a member of an
// ensemble. It can be stopped, killed and started again with the same
// ports and data.
type ZKServer struct {
	// ID is the server's myid in an ensemble, 0 when standalone.
	ID int
	// Addr is the client address, 127.0.0.1:PORT.
	Addr string

	java, dir, cfg string
	port           int // the client port
	// An ensemble member's ports for the other members: followers connect
	// to the leader's quorum port, and every member listens on its
	// election port; 0 when standalone.
	quorumPort, electionPort int

	mu     sync.Mutex
	proc   *process // the current run; nil before the first Start
	starts int
}

// zkJava finds java and the ZooKeeper jar, or says which package is missing.
func zkJava() (string, error) {
	java, err := LookBinary("java", "default-jre-headless", "/usr/lib/jvm/*/bin")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(zkJar); err != nil {
		return "", &MissingError{Binary: zkJar, Package: zkPackage}
	}
	return java, nil
}

// zkConfig is a zoo.cfg for one server.
func zkConfig(dataDir string, clientPort int, members []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\n", zkTickTime.Milliseconds())
	b.WriteString("initLimit=20\nsyncLimit=10\n")
	fmt.Fprintf(&b, "dataDir=%s\n", dataDir)
	fmt.Fprintf(&b, "clientPort=%d\nclientPortAddress=127.0.0.1\n", clientPort)
	b.WriteString("4lw.commands.whitelist=*\nadmin.enableServer=false\nmaxClientCnxns=0\n")
	b.WriteString("reconfigEnabled=false\nstandaloneEnabled=true\n")
	for _, m := range members {
		b.WriteString(m + "\n")
	}
	return b.String()
}

// startStandalone writes a config into dir and starts a standalone server
// on a free port, trying another port when the first is taken.
func startStandalone(dir, extra string) (*ZKServer, error) {
	java, err := zkJava()
	if err != nil {
		return nil, err
	}
	return onFreePort("ZooKeeper", func(port, try int) (*ZKServer, error) {
		sdir := filepath.Join(dir, fmt.Sprintf("zk-%d", try))
		s := &ZKServer{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, java: java, dir: sdir, cfg: filepath.Join(sdir, "zoo.cfg")}
		if err := s.writeConfig(zkConfig(filepath.Join(sdir, "data"), port, nil) + extra); err != nil {
			return nil, err
		}
		if err := s.Start(); err != nil {
			return nil, err
		}
		return s, nil
	})
}

func (s *ZKServer) writeConfig(cfg string) error {
	if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
		return fmt.Errorf("ZooKeeper data dir: %w", err)
	}
	if s.ID > 0 {
		if err := os.WriteFile(filepath.Join(s.dir, "data", "myid"), []byte(strconv.Itoa(s.ID)+"\n"), 0o644); err != nil {
			return fmt.Errorf("ZooKeeper myid: %w", err)
		}
	}
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("ZooKeeper config: %w", err)
	}
	return nil
}

// Start starts the server process (again, after Stop or Kill) and waits
// until it serves clients: for a standalone server, until it answers the
// srvr command with its mode; for an ensemble member, until it is running
// (call ZKEnsemble.WaitServing to wait for a quorum).
func (s *ZKServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && s.proc.running() {
		return fmt.Errorf("ZooKeeper server %s is already running", s.Addr)
	}
	s.starts++
	cp := zkJar
	if _, err := os.Stat(zkLogJar); err == nil {
		cp += ":" + zkLogJar
	}
	cmd := exec.Command(s.java,
		"-Xmx256m", "-XX:+UseSerialGC",
		"-Djava.net.preferIPv4Stack=true",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.forceSync=no", // test data need not survive a power cut
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
		"-cp", cp, zkMainClass, s.cfg)
	cmd.Dir = s.dir
	proc, err := startProcess("ZooKeeper on "+s.Addr, cmd, filepath.Join(s.dir, fmt.Sprintf("zookeeper-%d.log", s.starts)))
	if err != nil {
		return err
	}
	s.proc = proc
	if err := proc.waitReady(s.port, zkStartTimeout, zkPollEvery, s.serving); err != nil {
		if !proc.running() && proc.cmd.ProcessState.ExitCode() == zkExitBindFailed && !errors.Is(err, errPortTaken) {
			err = fmt.Errorf("%w (exit code %d: a quorum or election port could not be bound): %w", errPortTaken, zkExitBindFailed, err)
		}
		proc.kill()
		return err
	}
	return nil
}

// serving returns nil once the server answers srvr: a standalone server
// with its mode, an ensemble member with anything.
func (s *ZKServer) serving() error {
	out, err := FourLetter(s.Addr, "srvr")
	switch {
	case err != nil:
		return err
	case s.ID > 0 || strings.Contains(out, "Mode:"):
		return nil
	default:
		return errors.New(firstLine(out))
	}
}

// Stop stops the server with SIGTERM, and SIGKILL after 10s. It is safe to
// call more than once, and on a server that is not running.
func (s *ZKServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop(syscall.SIGTERM, zkStopTimeout)
	}
}

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// for the process to exit.
func (s *ZKServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
}

// Pause freezes the server with SIGSTOP: its connections, to clients and
// to the other members, stay open and nothing is answered until Resume.
func (s *ZKServer) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.pause()
	}
}

// Resume thaws a paused server with SIGCONT.
func (s *ZKServer) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.resume()
	}
}

// Running reports whether the server process is running.
func (s *ZKServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && s.proc.running()
}

// LogTail returns the last lines of the server's current log, for a test
// that wants to show what the server said.
func (s *ZKServer) LogTail(lines int) string {
	s.mu.Lock()
	proc := s.proc
	s.mu.Unlock()
	if proc == nil {
		return ""
	}
	return proc.logTail(lines)
}

// FourLetter sends a four-letter command (srvr, cons, wchc, wchp, ...) to
// the server and returns its answer.
func (s *ZKServer) FourLetter(cmd string) (string, error) { return FourLetter(s.Addr, cmd) }

// Mode returns the server's role from srvr: "standalone", "leader" or
// "follower"; an error when it is not serving.
func (s *ZKServer) Mode() (string, error) {
	out, err := s.FourLetter("srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("ZooKeeper %s is not serving: %s", s.Addr, firstLine(out))
}

// FourLetter sends a four-letter command to the ZooKeeper server at addr
// and returns its whole answer. The server must allow the command
// (4lw.commands.whitelist; the servers started here allow all).
func FourLetter(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, zkFourLetterWait)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(zkFourLetterWait))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), fmt.Errorf("%s on %s: %w", cmd, addr, err)
	}
	return string(b), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// ZKEnsemble is a ZooKeeper ensemble of servers on loopback, each in its
// own process with its own data dir, for a failover test. Only the test
// that needs one should start one: three JVMs are heavy on a small machine.
type ZKEnsemble struct {
	Servers []*ZKServer // Servers[i].ID == i+1

	links map[[2]int]*Proxy // [from, to] IDs: see StartZKEnsembleLinked
}

// StartZKEnsemble starts n servers (n odd, usually 3) on free loopback
// ports, waits until they have a leader, and stops them when tb ends. It
// skips like StartZooKeeperWith when Java or the jars are missing.
func StartZKEnsemble(tb testing.TB, n int) *ZKEnsemble {
	tb.Helper()
	return startZKEnsemble(tb, n, false)
}

// StartZKEnsembleLinked is StartZKEnsemble with each member's connection
// to another's quorum port (a follower's to its leader) through a Proxy of
// its own, for a test that cuts one link and no other: see Link. Leader
// election goes directly.
func StartZKEnsembleLinked(tb testing.TB, n int) *ZKEnsemble {
	tb.Helper()
	return startZKEnsemble(tb, n, true)
}

// Link returns the proxy that carries from's connections to to's quorum
// port: those of a follower to its leader. It fails tb on an ensemble
// started without links.
func (e *ZKEnsemble) Link(tb testing.TB, from, to *ZKServer) *Proxy {
	tb.Helper()
	p := e.links[[2]int{from.ID, to.ID}]
	if p == nil {
		tb.Fatalf("no link from ZooKeeper server %d to %d: start the ensemble with StartZKEnsembleLinked", from.ID, to.ID)
	}
	return p
}

func startZKEnsemble(tb testing.TB, n int, linked bool) *ZKEnsemble {
	tb.Helper()
	java, err := zkJava()
	if err != nil {
		Unavailable(tb, "ZooKeeper", err)
	}
	// New ports while a member lost one to another process; any other
	// failure is final.
	var errs []error
	for range portTries {
		var link func(target string) *Proxy
		if linked {
			link = func(target string) *Proxy { return NewProxy(tb, target) }
		}
		ports, err := ensemblePorts(n)
		if err != nil {
			tb.Fatalf("ZooKeeper ensemble: %v", err)
		}
		e, err := startEnsemble(tb.TempDir(), java, ports, link)
		if err == nil {
			tb.Cleanup(e.Stop)
			return e
		}
		errs = append(errs, err)
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	tb.Fatalf("ZooKeeper ensemble did not start: %v", errors.Join(errs...))
	return nil
}

// ensemblePorts returns n members' free loopback ports: client, quorum
// and election, in that order.
func ensemblePorts(n int) ([][3]int, error) {
	ports := make([][3]int, n)
	for i := range n {
		for j := range 3 {
			p, err := FreePort()
			if err != nil {
				return nil, fmt.Errorf("find free ports: %w", err)
			}
			ports[i][j] = p
		}
	}
	return ports, nil
}

// startEnsemble writes the configs and starts one server for each member's
// ports (client, quorum, election). With link, each member's config gives
// the others' quorum ports as proxies made by link, one per pair.
func startEnsemble(dir, java string, ports [][3]int, link func(target string) *Proxy) (*ZKEnsemble, error) {
	e := &ZKEnsemble{links: map[[2]int]*Proxy{}}
	n := len(ports)
	for i := range n {
		var members []string
		for j := range n {
			quorum := "127.0.0.1:" + strconv.Itoa(ports[j][1])
			if link != nil && j != i {
				p := link(quorum)
				e.links[[2]int{i + 1, j + 1}] = p
				quorum = p.Addr()
			}
			members = append(members, fmt.Sprintf("server.%d=%s:%d", j+1, quorum, ports[j][2]))
		}
		sdir := filepath.Join(dir, fmt.Sprintf("zk%d", i+1))
		s := &ZKServer{ID: i + 1, Addr: "127.0.0.1:" + strconv.Itoa(ports[i][0]), port: ports[i][0], java: java, dir: sdir,
			cfg: filepath.Join(sdir, "zoo.cfg"), quorumPort: ports[i][1], electionPort: ports[i][2]}
		if err := s.writeConfig(zkConfig(filepath.Join(sdir, "data"), ports[i][0], members)); err != nil {
			return nil, err
		}
		e.Servers = append(e.Servers, s)
	}
	// Start all, then wait: the members find each other while starting.
	errc := make(chan error, n)
	for _, s := range e.Servers {
		go func() { errc <- s.Start() }()
	}
	var errs []error
	for range n {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		e.Stop()
		return nil, err
	}
	if err := e.waitStarted(zkStartTimeout); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// waitStarted waits until the new ensemble is whole: every member running,
// serving clients as leader or follower, and listening itself on its
// election port, and one member leading and listening on its quorum port.
// WaitServing's look at running members alone is not enough here: a member
// whose election port another process took (between FreePort and the JVM
// binding it) answers srvr, may even lead, and exits with code 14 seconds
// later, when it gives up on the port. Such a member, exited or still
// trying (its log says the bind failed), is errPortTaken, for the caller
// to start the ensemble again on new ports.
func (e *ZKEnsemble) waitStarted(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leaders, whole := 0, 0
		var last error
		for _, s := range e.Servers {
			s.mu.Lock()
			proc := s.proc
			s.mu.Unlock()
			if err := zkBindErr(s, proc); err != nil {
				return err
			}
			m, err := s.Mode()
			if err != nil {
				last = err
				continue
			}
			ports := []int{s.electionPort}
			switch m {
			case "leader":
				leaders++
				ports = append(ports, s.quorumPort)
			case "follower":
			default:
				last = fmt.Errorf("ZooKeeper server %d is %s, want leader or follower", s.ID, m)
				continue
			}
			if err := listensOnAll(proc, ports); err != nil {
				last = fmt.Errorf("ZooKeeper server %d: %w", s.ID, err)
				continue
			}
			whole++
		}
		if whole == len(e.Servers) && leaders == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ZooKeeper ensemble not whole within %v: %d of %d members serving on their own ports, %d leaders (last: %v)", timeout, whole, len(e.Servers), leaders, last)
		}
		time.Sleep(zkPollEvery)
	}
}

// zkBindErr returns errPortTaken, quoting the log, when a member's process
// exited with ZooKeeper's code for a port it could not bind or its log says
// a bind failed; another error when it exited for another reason; nil while
// it runs with no bind failure logged.
func zkBindErr(s *ZKServer, proc *process) error {
	if proc == nil {
		return fmt.Errorf("ZooKeeper server %d was not started", s.ID)
	}
	if !proc.running() {
		err := proc.exitErr() // errPortTaken when its log says so
		if proc.cmd.ProcessState.ExitCode() == zkExitBindFailed && !errors.Is(err, errPortTaken) {
			err = fmt.Errorf("%w (exit code %d: a quorum or election port could not be bound): %w", errPortTaken, zkExitBindFailed, err)
		}
		return err
	}
	log, _ := os.ReadFile(proc.logPath)
	if zkBindFailed(log) {
		return fmt.Errorf("%w: %s could not bind its quorum or election port; log %s:\n%s", errPortTaken, proc.what, proc.logPath, tail(log, logTailLines))
	}
	return nil
}

// zkBindFailed reports whether a ZooKeeper log says that a port could not
// be bound: the election port's listener logs "Address already in use" at
// each try and "Leaving listener thread" when it gives up; a leader whose
// quorum port is taken logs "Couldn't bind to".
func zkBindFailed(log []byte) bool {
	log = bytes.ToLower(log)
	for _, say := range []string{"address already in use", "leaving listener thread for address", "couldn't bind to"} {
		if bytes.Contains(log, []byte(say)) {
			return true
		}
	}
	return false
}

// listensOnAll returns nil when proc itself listens on every one of ports.
func listensOnAll(proc *process, ports []int) error {
	for _, port := range ports {
		ours, err := proc.listensOn(port)
		switch {
		case err != nil:
			return fmt.Errorf("tell whether it listens on port %d: %w", port, err)
		case !ours:
			return fmt.Errorf("does not listen on port %d (yet)", port)
		}
	}
	return nil
}

// Addrs returns every member's client address.
func (e *ZKEnsemble) Addrs() []string {
	out := make([]string, len(e.Servers))
	for i, s := range e.Servers {
		out[i] = s.Addr
	}
	return out
}

// ByAddr returns the member whose client address is addr (as
// zk.Conn.Server reports it), or nil.
func (e *ZKEnsemble) ByAddr(addr string) *ZKServer {
	for _, s := range e.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Leader returns the member that currently leads.
func (e *ZKEnsemble) Leader() (*ZKServer, error) {
	for _, s := range e.Servers {
		if m, err := s.Mode(); err == nil && m == "leader" {
			return s, nil
		}
	}
	return nil, errors.New("no ZooKeeper member says it leads")
}

// WaitServing waits until every running member serves clients as leader or
// follower, and exactly one leads.
func (e *ZKEnsemble) WaitServing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leaders, serving, running := 0, 0, 0
		var last error
		for _, s := range e.Servers {
			if !s.Running() {
				continue
			}
			running++
			m, err := s.Mode()
			if err != nil {
				last = err
				continue
			}
			serving++
			if m == "leader" {
				leaders++
			}
		}
		if running > 0 && serving == running && leaders == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ZooKeeper ensemble: %d of %d running members serving, %d leaders, after %v (last: %v)", serving, running, leaders, timeout, last)
		}
		time.Sleep(zkPollEvery)
	}
}

// Stop stops every member.
func (e *ZKEnsemble) Stop() {
	var wg sync.WaitGroup
	for _, s := range e.Servers {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
}
