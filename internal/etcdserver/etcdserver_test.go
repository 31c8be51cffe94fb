package etcdserver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMuteCore(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	muted := &atomic.Bool{}
	lg := zap.New(muteCore{obs, muted}).With(zap.String("member", "m1"))
	lg.Info("before")
	muted.Store(true)
	lg.Error("closed listener")
	lg.With(zap.Int("n", 1)).Warn("after, derived")
	if got := logs.AllUntimed(); len(got) != 1 || got[0].Message != "before" || got[0].ContextMap()["member"] != "m1" {
		t.Fatalf("logged %v; want only the entry before the mute, with its fields", got)
	}
}

// startOnTakenPort starts a server with its data in dir on a client port
// another listener holds, which must fail; it returns the error.
func startOnTakenPort(t *testing.T, dir string) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pp, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start(t.Context(), Config{Dir: dir, ClientURL: "http://" + ln.Addr().String(), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", pp)})
	if err == nil {
		srv.Close()
		t.Fatal("started on a port that was taken")
	}
	return err
}

// TestStart_PortTaken: a port taken between FreePort and Start fails with
// an error matching syscall.EADDRINUSE, which baton demo retries on, and
// the data directory the failed start made is removed.
func TestStart_PortTaken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := startOnTakenPort(t, dir); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Start on a taken port = %v; want an error matching EADDRINUSE", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data directory the failed start made is still there (%v); want it removed", err)
	}
}

// TestStart_Failed_KeepsExistingDir: a failed start removes no data
// directory it did not make, even an empty one.
func TestStart_Failed_KeepsExistingDir(t *testing.T) {
	dir := t.TempDir()
	startOnTakenPort(t, dir)
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the data directory given, which existed before the failed start: %v; want it kept", err)
	}
}
