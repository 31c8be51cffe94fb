package testsvc

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestZooKeeper_Standalone starts the shared kind of server, checks it
// serves with the harness's settings, then kills it, restarts it on the
// same port, and stops it.
func TestZooKeeper_Standalone(t *testing.T) {
	var z ZooKeeper
	t.Cleanup(z.Stop)
	srv := z.Server(t)
	if mode, err := srv.Mode(); err != nil || mode != "standalone" {
		t.Fatalf("mode %q, %v; want standalone", mode, err)
	}
	conf, err := srv.FourLetter("conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tickTime=500", "minSessionTimeout=1000", "maxSessionTimeout=10000", "clientPort=" + strings.TrimPrefix(srv.Addr, "127.0.0.1:")} {
		if !strings.Contains(conf, want) {
			t.Errorf("conf lacks %q:\n%s", want, conf)
		}
	}
	if z.Addr(t) != srv.Addr {
		t.Error("a second call started another server")
	}

	srv.Kill()
	if srv.Running() {
		t.Fatal("running after Kill")
	}
	if _, err := FourLetter(srv.Addr, "ruok"); err == nil {
		t.Fatal("a killed server answered")
	}
	start := time.Now()
	if err := srv.Start(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("restarted in %v", time.Since(start).Round(time.Millisecond))
	if out, err := FourLetter(srv.Addr, "ruok"); err != nil || out != "imok" {
		t.Fatalf("ruok after restart: %q, %v", out, err)
	}

	dir := z.dir
	z.Stop()
	if srv.Running() {
		t.Fatal("running after Stop")
	}
	if _, err := FourLetter(srv.Addr, "ruok"); err == nil {
		t.Error("a stopped server answered")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s after Stop: %v, want it removed", dir, err)
	}
	z.Stop() // harmless
}

// TestZKEnsemble_ElectionPortTaken: a member whose election port another
// process took between FreePort and the JVM binding it answers srvr, may
// even lead, and exits (code 14) seconds later, when it gives up on the
// port. The ensemble's start must not succeed with that member: it is
// errPortTaken, for startZKEnsemble to try again on new ports.
func TestZKEnsemble_ElectionPortTaken(t *testing.T) {
	java, err := zkJava()
	if err != nil {
		Unavailable(t, "ZooKeeper", err)
	}
	ports, err := ensemblePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	// Another process holds member 3's election port.
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[2][2]))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	e, err := startEnsemble(t.TempDir(), java, ports, nil)
	if err == nil {
		defer e.Stop()
		took := time.Since(start)
		// What came of it: the member exits once it gives up on the port.
		deadline := time.Now().Add(10 * time.Second)
		for e.Servers[2].Running() && time.Now().Before(deadline) {
			time.Sleep(zkPollEvery)
		}
		t.Fatalf("ensemble start with member 3's election port taken succeeded after %v; member 3 running %v after %v; its log:\n%s",
			took.Round(time.Millisecond), e.Servers[2].Running(), time.Since(start).Round(time.Millisecond), e.Servers[2].LogTail(3))
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("ensemble start with an election port taken: %v; want errPortTaken", err)
	}
	t.Logf("errPortTaken after %v", time.Since(start).Round(time.Millisecond))
}
