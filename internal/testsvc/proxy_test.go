package testsvc

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// lineServer accepts connections on loopback and sends each line it reads
// to lines. When a client ends a connection, it says so on ended, then
// closes its side once hold is closed.
func lineServer(t *testing.T, hold <-chan struct{}) (addr string, lines, ended <-chan string) {
	t.Helper()
	out := make(chan string, 16)
	eof := make(chan string, 16)
	addr = serve(t, func(c net.Conn) {
		sc := bufio.NewScanner(c)
		last := ""
		for sc.Scan() {
			last = sc.Text()
			out <- last
		}
		eof <- last
		<-hold
	})
	return addr, out, eof
}

// serve accepts connections on loopback until t ends and has handle serve
// each, on a goroutine of its own, closing it after. It returns the
// address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestProxy_HoldFirst: the held request reaches the server after one sent
// later on another connection, only on Release, and Done waits for the
// server to close the connection after reading it.
func TestProxy_HoldFirst(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	addr, lines, ended := lineServer(t, hold)
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
	case last := <-ended:
		if last != "late undo" {
			t.Fatalf("the server saw the end of the connection whose last line was %q", last)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client's end of the held connection did not reach the server within 10s")
	}
	select {
	case <-h.Done():
		t.Fatal("Done while the server still had the connection open")
	default:
	}
	hold <- struct{}{} // the server closes its side
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed within 10s of the server closing the connection")
	}
}

// delayedConn returns a proxy to target with latency d, and a connection
// through it, closed when t ends.
func delayedConn(t *testing.T, target string, d time.Duration) (*Proxy, net.Conn) {
	t.Helper()
	p := NewDelayedProxy(t, target, d)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return p, c
}

// TestProxy_Latency: through a proxy with latency d, an echo's round trip
// takes at least 2d, and what is sent in many writes comes back whole and
// in order.
func TestProxy_Latency(t *testing.T) {
	echo := serve(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
	const d = 20 * time.Millisecond
	p, c := delayedConn(t, echo, d)
	r := bufio.NewReader(c)

	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo: %q, %v", line, err)
	}
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v through a proxy with latency %v: want at least %v", rtt, d, 2*d)
	}
	if got := p.MeanDelay(); got < d {
		t.Fatalf("MeanDelay %v, below the latency %v", got, d)
	}

	var want strings.Builder
	for i := range 200 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		if _, err := c.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Fatalf("echoed bytes differ from those sent:\n got %q\nwant %q", got, want.String())
	}
}

// TestProxy_Latency_ReadsOn: a chunk sent while an earlier one waits out
// its latency arrives its own latency after it was sent, not a latency
// after the earlier one arrived: the proxy reads on while chunks wait. Two
// lines are sent a quarter of the latency apart. A proxy that slept before
// each write would deliver the second at least two latencies after the
// first was sent, 1.75 latencies after its own send; a correct one about
// one latency after. A stall of the machine can only lengthen what is
// measured (or, between the two sends, spoil the try, which is then made
// again), so the pair is sent up to three times, and one second line that
// arrives within 1.5 latencies of its send passes.
func TestProxy_Latency_ReadsOn(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	addr, lines, _ := lineServer(t, hold)
	const d = 400 * time.Millisecond
	_, c := delayedConn(t, addr, d)
	var took []time.Duration
	for try := range 3 {
		var sent [2]time.Time
		for i, line := range []string{"first", "second"} {
			if i > 0 {
				time.Sleep(d / 4)
			}
			sent[i] = time.Now()
			if _, err := fmt.Fprintf(c, "%s %d\n", line, try); err != nil {
				t.Fatal(err)
			}
		}
		var arrived time.Time
		for _, want := range []string{"first", "second"} {
			select {
			case got := <-lines:
				if got != fmt.Sprintf("%s %d", want, try) {
					t.Fatalf("line %q arrived; want %q", got, fmt.Sprintf("%s %d", want, try))
				}
				arrived = time.Now()
			case <-time.After(10 * time.Second):
				t.Fatalf("%q did not arrive within 10s", want)
			}
		}
		if sent[1].Sub(sent[0]) >= d/2 {
			continue // the sends themselves were held up: no measure
		}
		took = append(took, arrived.Sub(sent[1]))
		if s := took[len(took)-1]; s < d {
			t.Fatalf("the second line arrived %v after its send, with a latency of %v: delivered early", s, d)
		} else if s < 3*d/2 {
			return
		}
	}
	t.Fatalf("the second of two lines sent %v apart arrived %v after its send (per try), with a latency of %v: the proxy did not read it while the first waited", d/4, took, d)
}
