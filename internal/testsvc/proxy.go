package testsvc

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback that a test can partition: Block stops
// forwarding bytes in both directions (connections stay open, as in a
// network partition, and nothing is delivered until Unblock), Cut closes
// every connection, Stall silences the open ones for good, SetLatency
// delays what it forwards. It models the
// network, not a backend: the server behind it is real.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	gate     chan struct{} // closed while forwarding is allowed
	conns    map[net.Conn]struct{}
	closed   bool
	hold     atomic.Pointer[Held]                       // armed by HoldFirst, until it catches a chunk
	filter   atomic.Pointer[func() func([]byte) []byte] // see FilterUp
	latency  atomic.Int64                               // one-way delay of the connections made from now on, in ns: see SetLatency
	delaySum atomic.Int64                               // the delays latency connections gave their chunks, read to written, in ns
	delays   atomic.Int64                               // how many chunks they gave one
	caught   []*Held                                    // released when the proxy closes
	stalls   atomic.Int64                               // how many times Stall was called: a connection made before the last stalls
	done     chan struct{}                              // closed by Close: stalled connections end
	workers  sync.WaitGroup
}

// Held is one request a Proxy holds back: see HoldFirst.
type Held struct {
	pattern []byte
	caught  chan struct{}
	release chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Caught is closed when the chunk is caught.
func (h *Held) Caught() <-chan struct{} { return h.caught }

// Release delivers the chunk. It may be called more than once.
func (h *Held) Release() { h.once.Do(func() { close(h.release) }) }

// Done is closed when the connection that carried the chunk has ended
// both ways after delivering it: the server has read the chunk and closed
// its side, so it has served the request in it, as a server serves what
// it read before the end of a connection.
func (h *Held) Done() <-chan struct{} { return h.done }

// Deliver releases the chunk and waits until it has been served (Done),
// failing tb when ctx ends first.
func (h *Held) Deliver(tb testing.TB, ctx context.Context) {
	tb.Helper()
	h.Release()
	select {
	case <-h.done:
	case <-ctx.Done():
		tb.Fatal("the server did not serve the held request and close its connection")
	}
}

// HoldFirst holds back the first chunk a client sends, from now on, that
// contains pattern, on its own connection only: bytes on other
// connections, and new ones, go on flowing. It models one request delayed
// in the network (a lost packet sent again) while later ones overtake it
// on other connections. A request is one chunk when the client writes it
// at once, as go-redis does. The chunk is delivered on Release, or when
// the proxy closes.
func (p *Proxy) HoldFirst(pattern []byte) *Held {
	h := &Held{pattern: pattern, caught: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	p.hold.Store(h)
	return h
}

// FilterUp has each connection made from now on pass what its client
// sends through a filter of its own, made by newFilter: every chunk read
// goes in, and what the filter returns is forwarded. A filter may keep
// bytes back (a request cut across two reads) and return them with a
// later chunk. It is for dropping one kind of request on the wire.
func (p *Proxy) FilterUp(newFilter func() func(chunk []byte) []byte) {
	p.filter.Store(&newFilter)
}

// catch returns the armed Held and disarms it when chunk contains its
// pattern. A chunk with nothing armed costs an atomic load.
func (p *Proxy) catch(chunk []byte) *Held {
	h := p.hold.Load()
	if h == nil || !bytes.Contains(chunk, h.pattern) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !p.hold.CompareAndSwap(h, nil) {
		return nil
	}
	p.caught = append(p.caught, h)
	close(h.caught)
	return h
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port). It is closed when tb ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, gate: make(chan struct{}), conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	close(p.gate)
	p.workers.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// NewDelayedProxy is NewProxy with SetLatency(d) from the start: every
// connection through it is d or more late each way.
func NewDelayedProxy(tb testing.TB, target string, d time.Duration) *Proxy {
	tb.Helper()
	p := NewProxy(tb, target)
	p.SetLatency(d)
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

// SetLatency has the connections made from now on deliver each chunk d
// or more after the proxy read it, both ways, in order, as a network
// whose round trip is at least 2*d; MeanDelay tells how much more. Reading
// goes on meanwhile, so requests sent one behind the other are not held
// up by each other's delay. It is for benchmarks: HoldFirst does not
// catch chunks on such connections.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// MeanDelay is the mean delay that chunks forwarded with a latency (see
// SetLatency) were given so far, from the proxy's read to its write: at
// least the latency, and more where the Go runtime's timers, which sleep
// in steps of a millisecond while the process idles, woke late. 0 before
// any.
func (p *Proxy) MeanDelay() time.Duration {
	n := p.delays.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(p.delaySum.Load() / n)
}

// Stall stops forwarding on every connection open now, both ways, for
// good: their bytes are held until the proxy closes, and neither side is
// told, as when a NAT or firewall drops an idle connection's state.
// Connections made after it flow as usual. Not for connections made with
// a latency (SetLatency).
func (p *Proxy) Stall() { p.stalls.Add(1) }

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
	close(p.done)
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
	p.releaseHeld()
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
			if d := time.Duration(p.latency.Load()); d > 0 {
				var pipes sync.WaitGroup
				pipes.Add(2)
				go func() { defer pipes.Done(); p.delayed(out, in, d) }()
				go func() { defer pipes.Done(); p.delayed(in, out, d) }()
				pipes.Wait()
				return
			}
			var filter func([]byte) []byte
			if f := p.filter.Load(); f != nil {
				filter = (*f)()
			}
			stalls := p.stalls.Load()
			var pipes sync.WaitGroup
			var held *Held // set by the client's pipe when it holds a chunk
			pipes.Add(2)
			go func() { defer pipes.Done(); held = p.pipe(out, in, true, filter, stalls) }()
			go func() { defer pipes.Done(); p.pipe(in, out, false, nil, stalls) }()
			pipes.Wait()
			if held != nil {
				close(held.done)
			}
		}()
	}
}

// releaseHeld delivers the chunks HoldFirst caught, when the proxy closes.
func (p *Proxy) releaseHeld() {
	p.mu.Lock()
	caught := p.caught
	p.mu.Unlock()
	for _, h := range caught {
		h.Release()
	}
}

// pipe copies src to dst, holding each chunk at the gate while blocked,
// and for good once Stall was called more than stalls times (the count
// when the connection was made).
// On a client's connection (up), it holds the chunk HoldFirst is armed
// for, and returns that Held; filter, when not nil, has each chunk's say
// (see FilterUp).
//
// When the client's side of a connection on which a chunk was held ends
// (the client closed it, or reset it), the proxy passes the end on
// (CloseWrite) and leaves the server's side open, so the connection ends
// both ways only once the server has closed it.
func (p *Proxy) pipe(dst, src net.Conn, up bool, filter func([]byte) []byte, stalls int64) (held *Held) {
	defer func() {
		if tc, ok := dst.(*net.TCPConn); ok && held != nil {
			_ = tc.CloseWrite()
			return
		}
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if up {
				if h := p.catch(buf[:n]); h != nil {
					held = h
					<-h.release
				}
			}
			chunk := buf[:n]
			if filter != nil {
				chunk = filter(chunk)
			}
			<-p.currentGate()
			if p.stalls.Load() != stalls {
				<-p.done
				return held
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return held
			}
		}
		if err != nil {
			return held
		}
	}
}

// delayed copies src to dst as pipe does, delivering each chunk d after it
// was read (see SetLatency). The writer is its own goroutine, so reading
// goes on while a chunk waits; it ends when the reader does, and the
// reader when either side fails.
func (p *Proxy) delayed(dst, src net.Conn, d time.Duration) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	type chunk struct {
		due time.Time
		b   []byte
	}
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			time.Sleep(time.Until(c.due))
			<-p.currentGate()
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close() // ends the reader, which closes q
				for range q {
				}
				return
			}
			p.delaySum.Add(int64(time.Since(c.due.Add(-d))))
			p.delays.Add(1)
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{due: time.Now().Add(d), b: bytes.Clone(buf[:n])}
		}
		if err != nil {
			close(q)
			<-done
			return
		}
	}
}
