package zk

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
)

// backend implements baton.FencedBackend on a go-zookeeper connection. The
// ZooKeeper session is the lease: every candidate node of the backend is an
// ephemeral node of the connection's session.
type backend struct {
	conn  *zkgo.Conn
	cfg   baton.Config
	set   Settings
	acl   []zkgo.ACL
	root  string // election nodes live under it; no trailing slash
	where string // servers, for error messages

	cs *connState // the connection's session state, fed by events or polls

	owned   bool              // Close closes conn
	polling bool              // the state comes from polling conn.State
	events  <-chan zkgo.Event // conn's event channel when owned, drained on Close
	dials   *dialClock        // when conn last began to dial, when owned; else nil

	calls   flights            // requests in flight, each in its own goroutine
	workers sync.WaitGroup     // reaper and poller
	life    context.Context    // cancelled by Close: ends reaper and poller
	end     context.CancelFunc // cancels life

	reaper *reaper

	// crowded is set when the last create found other candidates:
	// the next one lists in the same round trip (see createAndList).
	crowded atomic.Bool

	obsQueue int // how many terms an observation keeps for a slow reader: maxQueued, but in tests

	hooks atomic.Pointer[hooks] // test instrumentation; nil in production

	// closedConnected says the connection was one Dial made, and up (as
	// its last event said) when Close began: Close then tells the server
	// to end the session, and our nodes go with it (see deleteNode). A best guess: against a server gone silent the state
	// says connected until the client gives up on it, and the nodes then
	// last until the session times out.
	closedConnected atomic.Bool
	// connGone says a watch event told that conn was closed (see
	// waitPredecessor): by the caller that gave it to New, since our own
	// Close had not begun. go-zookeeper's Close ends the session, and
	// its nodes with it.
	connGone atomic.Bool

	mu     sync.Mutex
	sess   *session
	holds  map[*hold]struct{}
	closed bool
	// unsettled counts the work that may still leave a node of ours
	// behind: creates we stopped waiting for whose answers have not come
	// (see abandonCreate), and Releases under way; idle, when set, is
	// closed once there is none: Close on a borrowed connection waits for
	// it before the reaper's last pass.
	unsettled int
	idle      chan struct{}
	// lastPass is set when Close, on a borrowed connection, is done
	// waiting for them: a node such work leaves after it is deleted by
	// that work itself, as the reaper makes its last pass.
	lastPass bool
}

// hooks let tests observe the recipe from inside.
type hooks struct {
	// predecessorEvent is called each time a waiter's watch on its
	// predecessor fires.
	predecessorEvent func(waiter, predecessor string)
	// watching is called each time a waiter has set its watch on its
	// predecessor, before it waits.
	watching func(waiter, predecessor string)
	// releaseDelete is called by a Release that ended its hold, before
	// it deletes the node.
	releaseDelete func()
	// awaitingConnection is called by an acquisition whose node came
	// first while the connection was down, before it waits for it.
	awaitingConnection func()
	// waiterRead is called each time a waiting acquisition sends a read
	// (see waitRead).
	waiterRead func()
	// observed is called with each term an observation queues for its
	// reader.
	observed func(baton.Term)
	// observeRead is called each time an observation reads the election
	// again, after its first read.
	observeRead func()
	// renewed is called by each renewal that confirmed the session, before
	// the keeper counts it.
	renewed func()
	// sessionMade is called when a session object is made, before its
	// first renewal.
	sessionMade func()
	// holdListening is called by a new hold between following the
	// connection's state and following the session's end, with the
	// hold's look.
	holdListening func(look func())
}

var _ baton.FencedBackend = (*backend)(nil)

// New returns a FencedLocker on conn with the default Settings; see
// Settings.New.
func New(conn *zkgo.Conn, opts ...baton.Option) (*baton.FencedLocker, error) {
	return Settings{}.New(conn, opts...)
}

// New returns a FencedLocker on conn, a connection the caller made with
// zk.Connect and keeps: closing the Locker deletes the nodes it created but
// does not close conn. That includes the node of a create an acquisition
// stopped waiting for, once its answer comes: Close waits up to the
// release timeout for that answer before its last pass over the nodes to
// delete, and one answered later deletes its node itself when the answer
// comes (one whose answer is lost then, to a connection that dropped, is
// left to the session).
//
// baton.WithTTL must be the session timeout conn negotiated with the
// server: go-zookeeper does not report it for a connection made elsewhere,
// so New cannot check it, and a TTL longer than the real session timeout
// would make the local deadline too late. Use Dial, which checks it, when
// you can. Nor can New know when conn was dialed, from which Dial counts a
// session's first deadline, so a new session object's first acquisition
// waits for its first renewal to settle it, about 3/10 of the session
// timeout (see the package doc, "The clock model"). Nor can New subscribe to conn's session events (go-zookeeper
// delivers them only to the channel and callback given to zk.Connect), so it
// polls conn.State every few milliseconds: it sees every disconnection that
// lasts longer than that, which is every one that can cost the session.
// Close the Locker before conn: an acquisition waiting for the holder
// when conn is closed ends at once with an error matching
// baton.ErrClosed (and the Locker's Close then waits for nothing: the
// session and its nodes ended with conn), but one with a request on its
// way then takes the closed connection for one that dropped, and ends
// only once the session timeout has passed, as Close does.
// baton.WithPrefix sets the root node (default DefaultRoot).
func (s Settings) New(conn *zkgo.Conn, opts ...baton.Option) (*baton.FencedLocker, error) {
	if conn == nil {
		return nil, &baton.OptionError{Option: "ZooKeeper connection", Value: "nil", Reason: "pass a *zk.Conn, or use Dial"}
	}
	b, err := newBackend(conn, newConnState(), s, opts, "")
	if err != nil {
		return nil, err
	}
	b.polling = true
	b.start()
	return baton.NewFencedLocker(b, b.cfg), nil
}

func newBackend(conn *zkgo.Conn, cs *connState, set Settings, opts []baton.Option, where string) (*backend, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	root, err := cleanRoot(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	acl := set.ACL
	if len(acl) == 0 {
		acl = zkgo.WorldACL(zkgo.PermAll)
		if set.Auth != nil {
			acl = zkgo.AuthACL(zkgo.PermAll)
		}
	}
	b := &backend{
		conn:  conn,
		cfg:   cfg,
		set:   set,
		acl:   acl,
		root:  root,
		where: where,
		cs:    cs,
		holds: map[*hold]struct{}{},

		obsQueue: maxQueued,
	}
	b.life, b.end = context.WithCancel(context.Background())
	b.reaper = newReaper(b)
	return b, nil
}

// start launches the backend's own goroutines: the reaper, and, for a
// connection made elsewhere, the poller that follows its state, from the
// state it is in now. Dial's connection is followed by its event callback
// from the start: a state read here could be recorded after a newer one
// the callback recorded, and pass for a change.
func (b *backend) start() {
	b.workers.Add(1)
	go b.reaper.run()
	if b.polling {
		b.cs.record(b.conn.State())
		b.workers.Add(1)
		go b.poll()
	}
}

// pollEvery is how often New's backend looks at a connection's state. It
// must be far below a third of the session timeout: go-zookeeper notices a
// silent connection after two thirds of it, and the server expires the
// session one third later.
func (b *backend) pollEvery() time.Duration {
	return min(max(b.cfg.TTL/50, 2*time.Millisecond), 20*time.Millisecond)
}

// poll follows the state of a connection the backend did not make.
func (b *backend) poll() {
	defer b.workers.Done()
	t := time.NewTicker(b.pollEvery())
	defer t.Stop()
	for {
		select {
		case <-b.life.Done():
			return
		case <-t.C:
			b.cs.record(b.conn.State())
		}
	}
}

// observe returns the connection's state, looking at it first when it
// comes from polling: a decision about a session must not rest on a poll
// that is a few milliseconds old. Such a look may find a change and call
// the connection state's listeners on the caller's goroutine, and a lost
// hold's takes b.mu: observe must not be called with b.mu held.
func (b *backend) observe() snap {
	if b.polling {
		b.cs.record(b.conn.State())
	}
	return b.cs.snapshot()
}

// place names the servers in error messages.
func (b *backend) place() string {
	if b.where != "" {
		return b.where
	}
	return "zk://" + b.conn.Server()
}

// TokenSource implements baton.FencedBackend.
func (b *backend) TokenSource() string { return "ZooKeeper czxid of the holder's node" }

// lockDir is the election node of lock name.
func (b *backend) lockDir(name string) string { return b.root + "/" + name }

// Close ends every hold, removes the backend's nodes and, when Dial made
// the connection, closes it (which ends the session, and with it every
// ephemeral node at once). A connection given to New stays open; its
// nodes are deleted one by one, each bounded by the release timeout, and
// when the connection is down, Close waits for it to come back and delete
// them, for at most one TTL (the session timeout) of the connection being
// down, after which the server has ended the session and the nodes. A
// create an acquisition gave up on that is answered after Close has
// returned has its node deleted when the answer comes.
func (b *backend) Close() error {
	connected := b.owned && b.observe().connected()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.closedConnected.Store(connected)
	b.calls.drain()
	s := b.sess
	b.sess = nil
	holds := make([]*hold, 0, len(b.holds))
	for h := range b.holds {
		holds = append(holds, h)
	}
	b.holds = map[*hold]struct{}{}
	b.mu.Unlock()

	ended := holds[:0] // all but those a Release ended first: it deletes its own node
	for _, h := range holds {
		if h.shut(baton.ErrClosed) || !errors.Is(h.Err(), baton.ErrReleased) {
			ended = append(ended, h)
		}
	}
	holds = ended
	if s != nil {
		s.k.Stop(baton.ErrClosed)
	}
	var err error
	if !b.owned {
		// The session outlives us: delete what we created.
		ctx, cancel := context.WithTimeout(closing(context.Background()), b.cfg.ReleaseTimeout)
		var errs, connErrs []error // the latter the reaper may yet mend
		for _, h := range holds {
			if _, derr := b.deleteNode(ctx, h.path); derr != nil && isConnErr(derr) {
				connErrs = append(connErrs, derr)
			} else if derr != nil {
				errs = append(errs, derr)
			}
		}
		b.awaitSettled(ctx)
		b.mu.Lock()
		b.lastPass = true
		b.mu.Unlock()
		b.reaper.drain(ctx)
		cancel()
		b.outwaitSession()
		if b.reaper.pending() > 0 {
			errs = append(errs, connErrs...)
		} // else deleted once the connection was back, or gone with the session
		err = errors.Join(errs...)
	}
	b.end()
	b.workers.Wait()
	if b.owned {
		b.conn.Close()
		b.drainEvents()
		b.calls.closeWait(0)
	} else {
		b.calls.closeWait(b.cfg.ReleaseTimeout)
	}
	return err
}

// outwaitSession is Close's last step on a connection that stays open,
// when nodes of ours are left to delete because the connection is down
// (a lease lost to the disconnection, say). The session may well survive
// the outage, and with it a node that would hold the lock for as long as
// the caller keeps its connection. So Close waits for the connection to
// be back, then deletes them in one pass, or until the connection has
// been down for one TTL (the session timeout, as New asks), by when the
// server has ended the session and its nodes. On a connection that is up
// it makes that one pass at once. After an expiry, the pass is made on
// the new session, which a create go-zookeeper held unsent across the
// expiry may have made a node on (the old session's nodes are gone: their
// deletes find nothing).
func (b *backend) outwaitSession() {
	if b.reaper.pending() == 0 || b.connGone.Load() {
		return // nothing to delete, or the session ended with conn
	}
	limit := time.NewTimer(b.cfg.TTL)
	defer limit.Stop()
	for {
		v := b.observe()
		if v.connected() {
			// One pass, as on a connection that never dropped: what it
			// leaves (a create whose answer was lost, not found yet) is
			// not for Close to wait for.
			ctx, cancel := context.WithTimeout(closing(context.Background()), b.cfg.ReleaseTimeout)
			left := b.reaper.pass(ctx)
			cancel()
			if left > 0 {
				b.cfg.Logger.Warn("closing with nodes not yet deleted; they go with the session", "nodes", left, "where", b.place())
			}
			return
		}
		select {
		case <-v.changed: // the poller, or go-zookeeper's events, report every change
		case <-limit.C:
			b.cfg.Logger.Warn("closing with nodes not yet deleted after the connection was down for the session timeout; they went with the session", "nodes", b.reaper.pending(), "where", b.place())
			return
		}
	}
}

// settling counts one more piece of work that may leave a node of ours
// behind (a create we stopped waiting for, a Release), until the returned
// func is called, once it is done.
func (b *backend) settling() (settled func()) {
	b.mu.Lock()
	b.unsettled++
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.unsettled--; b.unsettled == 0 && b.idle != nil {
			close(b.idle)
			b.idle = nil
		}
	}
}

// awaitSettled waits, until ctx ends, for the answers of the creates we
// stopped waiting for, which hand their nodes to the reaper, and for the
// Releases under way, which delete theirs (or hand them to the reaper): on
// a borrowed connection, whose session lives on after Close, a node left
// after the reaper's last pass would hold the lock, or stand in line, for
// as long as that session lives.
func (b *backend) awaitSettled(ctx context.Context) {
	b.mu.Lock()
	if b.unsettled == 0 {
		b.mu.Unlock()
		return
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	b.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// drainEvents waits for go-zookeeper's connection loop to end, which it
// signals by closing the event channel, for at most the release timeout: a
// loop stuck on a dead network ends later on its own read deadline.
func (b *backend) drainEvents() {
	t := time.NewTimer(b.cfg.ReleaseTimeout)
	defer t.Stop()
	for {
		select {
		case _, ok := <-b.events:
			if !ok {
				return
			}
		case <-t.C:
			b.cfg.Logger.Warn("ZooKeeper connection loop still running after Close; it ends on its own read deadline", "where", b.place())
			return
		}
	}
}

func (b *backend) track(h *hold) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.holds[h] = struct{}{}
	return true
}

// heldOn returns the holds on session s.
func (b *backend) heldOn(s *session) []*hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*hold
	for h := range b.holds {
		if h.s == s && h.Err() == nil {
			out = append(out, h)
		}
	}
	return out
}

func (b *backend) untrack(h *hold) {
	b.mu.Lock()
	delete(b.holds, h)
	b.mu.Unlock()
}
