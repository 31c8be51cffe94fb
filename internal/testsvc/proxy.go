package testsvc

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback that a test can partition: Block stops
// forwarding bytes in both directions (connections stay open, as in a
// network partition, and nothing is delivered until Unblock), Cut closes
// every connection. It models the network, not a backend: the server
// behind it is real.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	gate    chan struct{} // closed while forwarding is allowed
	conns   map[net.Conn]struct{}
	closed  bool
	workers sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port). It is closed when tb ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, gate: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.gate)
	p.workers.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Block stops forwarding: bytes sent either way are held until Unblock.
func (p *Proxy) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already blocked
	}
}

// Unblock resumes forwarding, delivering what was held.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Cut closes every open connection; new ones are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	select {
	case <-p.gate:
	default:
		close(p.gate) // release goroutines held at the gate
	}
	p.mu.Unlock()
	p.workers.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) currentGate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gate
}

func (p *Proxy) accept() {
	defer p.workers.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			return
		}
		p.workers.Add(1)
		go func() {
			defer p.workers.Done()
			defer p.untrack(in)
			<-p.currentGate()
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			if !p.track(out) {
				return
			}
			defer p.untrack(out)
			var pipes sync.WaitGroup
			pipes.Add(2)
			go func() { defer pipes.Done(); p.pipe(out, in) }()
			go func() { defer pipes.Done(); p.pipe(in, out) }()
			pipes.Wait()
		}()
	}
}

// pipe copies src to dst, holding each chunk at the gate while blocked.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.currentGate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}
