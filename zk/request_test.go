package zk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
)

// TestFail_SessionExpired: a request that failed because the session
// expired is a loss, and says which: both sentinels match.
func TestFail_SessionExpired(t *testing.T) {
	b := &backend{}
	err := b.fail(context.Background(), "acquire x", zkgo.ErrSessionExpired)
	if !errors.Is(err, baton.ErrLeaseLost) || !errors.Is(err, ErrSessionExpired) {
		t.Errorf("fail(session expired) = %v; want it to match baton.ErrLeaseLost and zk.ErrSessionExpired", err)
	}
}

// TestIsConnErr: go-zookeeper's connection errors, and the socket's that
// it hands a request whose write failed, say the request may not have
// been answered; the server's answers and the caller's deadline do not.
func TestIsConnErr(t *testing.T) {
	write := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{zkgo.ErrConnectionClosed, true},
		{zkgo.ErrNoServer, true},
		{zkgo.ErrClosing, true},
		{errNoAnswer, true},
		{write, true},
		{fmt.Errorf("list: %w", write), true},
		{syscall.ECONNRESET, true},
		{io.EOF, true},
		{net.ErrClosed, true},
		{zkgo.ErrNoNode, false},
		{zkgo.ErrSessionExpired, false},
		{zkgo.ErrNoAuth, false},
		{context.DeadlineExceeded, false}, // a net.Error, but the caller's
		{context.Canceled, false},
	} {
		if got := isConnErr(c.err); got != c.want {
			t.Errorf("isConnErr(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}

// TestCreateAndList_Closing: a create refused because Close has begun
// (never sent) ends the acquisition's create at once, where it waited for
// the create to be on its way for ever.
func TestCreateAndList_Closing(t *testing.T) {
	cfg, err := newConfig([]baton.Option{baton.WithTTL(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{cfg: cfg}
	b.calls.drain() // what Close does first
	done := make(chan error, 1)
	go func() {
		_, _, err := b.createAndList(context.Background(), DefaultRoot+"/x", nil, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, baton.ErrClosed) {
			t.Errorf("createAndList after Close began: %v; want an error saying the Locker is closing", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("createAndList after Close began still waits 10s on")
	}
}
