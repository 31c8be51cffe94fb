package testsvc

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// lineServer accepts connections on loopback and sends each line it reads
// to lines; it closes a connection when the client ends it.
func lineServer(t *testing.T) (addr string, lines <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	out := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					out <- sc.Text()
				}
			}()
		}
	}()
	return ln.Addr().String(), out
}

// TestProxy_HoldFirst: the held request reaches the server after one sent
// later on another connection, only on Release, and Done says the server
// has closed the connection after reading it.
func TestProxy_HoldFirst(t *testing.T) {
	addr, lines := lineServer(t)
	p := NewProxy(t, addr)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no line reached the server within 10s")
			return ""
		}
	}

	h := p.HoldFirst([]byte("late"))
	first := dial()
	if _, err := first.Write([]byte("late undo\n")); err != nil {
		t.Fatal(err)
	}
	<-h.Caught()
	second := dial()
	if _, err := second.Write([]byte("later attempt\nlate too\n")); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "later attempt" {
		t.Fatalf("server read %q first; want the later request", got)
	}
	if got := next(); got != "late too" {
		t.Fatalf("server read %q; want the second connection's next line (only the first match is held)", got)
	}
	_ = first.Close() // the client gives up on it
	select {
	case <-h.Done():
		t.Fatal("Done before Release")
	default:
	}
	h.Release()
	if got := next(); got != "late undo" {
		t.Fatalf("server read %q after Release; want the held request", got)
	}
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed within 10s of the server closing the connection")
	}
}
