package zk

import (
	"sync"
	"time"

	zkgo "github.com/go-zookeeper/zk"
)

// connState follows the state of one go-zookeeper connection. Dial feeds
// it from the connection's event callback, which sees every transition;
// New from a poller. It keeps counters rather than the last state only, so
// that a disconnection followed at once by a reconnection is never missed
// by someone who looks later.
type connState struct {
	mu        sync.Mutex
	state     zkgo.State
	drops     uint64        // times the connection left StateHasSession
	expiries  uint64        // times go-zookeeper reported StateExpired
	timeout   time.Duration // session timeout the server granted; 0 if unknown
	changed   chan struct{} // closed, and replaced, on every change
	listeners map[*func()]struct{}
}

// mark is a connState's counters at one moment. A hold remembers the mark
// it was made under; any disconnection or expiry after it shows.
type mark struct{ drops, expiries uint64 }

func newConnState() *connState {
	return &connState{state: zkgo.StateDisconnected, changed: make(chan struct{}), listeners: map[*func()]struct{}{}}
}

// record notes the connection's state. It never blocks: go-zookeeper calls
// it from its connection loop.
func (c *connState) record(st zkgo.State) {
	c.mu.Lock()
	if st == c.state {
		c.mu.Unlock()
		return
	}
	if c.state == zkgo.StateHasSession {
		c.drops++
	}
	if st == zkgo.StateExpired {
		c.expiries++
	}
	c.state = st
	c.broadcast()
}

// setTimeout notes the session timeout the server granted.
func (c *connState) setTimeout(d time.Duration) {
	c.mu.Lock()
	if d == c.timeout {
		c.mu.Unlock()
		return
	}
	c.timeout = d
	c.broadcast()
}

// broadcast wakes everyone waiting for a change and calls the listeners.
// It is called with c.mu held, and releases it.
func (c *connState) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
	fns := make([]func(), 0, len(c.listeners))
	for fn := range c.listeners {
		fns = append(fns, *fn)
	}
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// listen calls fn after every change, until stop is called. fn runs on the
// goroutine that reported the change, often go-zookeeper's connection
// loop: it must not block.
func (c *connState) listen(fn func()) (stop func()) {
	p := &fn
	c.mu.Lock()
	c.listeners[p] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.listeners, p)
		c.mu.Unlock()
	}
}

// snap is a consistent view of a connState.
type snap struct {
	state   zkgo.State
	mark    mark
	timeout time.Duration
	changed <-chan struct{} // closed at the next change
}

func (c *connState) snapshot() snap {
	c.mu.Lock()
	defer c.mu.Unlock()
	return snap{state: c.state, mark: mark{c.drops, c.expiries}, timeout: c.timeout, changed: c.changed}
}

func (s snap) connected() bool { return s.state == zkgo.StateHasSession }
