package testsvc

import (
	"errors"
	"os"
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
