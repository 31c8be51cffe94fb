package zk

import (
	"context"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
)

// Test access to a Locker's backend.

func backendOf(l *baton.Locker) *backend { return l.Backend().(*backend) }

// ConnOf returns the connection l's backend uses.
func ConnOf(l *baton.Locker) *zkgo.Conn { return backendOf(l).conn }

// ConnStatus is what the backend knows of its connection.
type ConnStatus struct {
	Connected bool
	State     zkgo.State      // go-zookeeper's, as last reported
	Drops     uint64          // disconnections so far
	Changed   <-chan struct{} // closed at the next change
}

// StatusOf returns l's view of its connection.
func StatusOf(l *baton.Locker) ConnStatus {
	v := backendOf(l).cs.snapshot()
	return ConnStatus{Connected: v.connected(), State: v.state, Drops: v.mark.drops, Changed: v.changed}
}

// Outage is the timer with which a waiter, or an observation, counts an
// outage (see outage).
type Outage struct{ o outage }

// See shows o the connection as a look finds it: connected, or not after
// drops disconnections. The channel receives once the connection has been
// down for ttl; it is nil while connected.
func (o *Outage) See(connected bool, drops uint64, ttl time.Duration) <-chan time.Time {
	st := zkgo.StateDisconnected
	if connected {
		st = zkgo.StateHasSession
	}
	return o.o.see(snap{state: st, mark: mark{drops: drops}}, ttl)
}

// Stop stops o's timer.
func (o *Outage) Stop() { o.o.stop() }

// OnPredecessorEvent calls fn each time one of l's waiters sees the watch
// on its predecessor fire. It keeps the other hooks set.
func OnPredecessorEvent(l *baton.Locker, fn func(waiter, predecessor string)) {
	setHook(l, func(h *hooks) { h.predecessorEvent = fn })
}

// OnWatching calls fn each time one of l's waiters has set its watch on
// its predecessor, before it waits. It keeps the other hooks set.
func OnWatching(l *baton.Locker, fn func(waiter, predecessor string)) {
	setHook(l, func(h *hooks) { h.watching = fn })
}

// OnReleaseDelete calls fn in each Release that ended its hold, before it
// deletes the node. It keeps the other hooks set.
func OnReleaseDelete(l *baton.Locker, fn func()) {
	setHook(l, func(h *hooks) { h.releaseDelete = fn })
}

// OnAwaitingConnection calls fn when one of l's acquisitions, its node
// first, waits for the connection to come back before it takes the lock.
// It keeps the other hooks set.
func OnAwaitingConnection(l *baton.Locker, fn func()) {
	setHook(l, func(h *hooks) { h.awaitingConnection = fn })
}

// OnWaiterRead calls fn each time one of l's waiting acquisitions sends
// a listing or a watch. It keeps the other hooks set.
func OnWaiterRead(l *baton.Locker, fn func()) {
	setHook(l, func(h *hooks) { h.waiterRead = fn })
}

// OnRenewed calls fn in each renewal that confirmed l's session, as soon
// as its answers came. It keeps the other hooks set.
func OnRenewed(l *baton.Locker, fn func()) {
	setHook(l, func(h *hooks) { h.renewed = fn })
}

// OnSessionMade calls fn when l makes a session object, before its first
// renewal. It keeps the other hooks set.
func OnSessionMade(l *baton.Locker, fn func()) {
	setHook(l, func(h *hooks) { h.sessionMade = fn })
}

// OnHoldListening calls fn when a new hold of l's follows the connection's
// state but not yet its session's end, with the hold's look. It keeps the
// other hooks set.
func OnHoldListening(l *baton.Locker, fn func(look func())) {
	setHook(l, func(h *hooks) { h.holdListening = fn })
}

// LeaderHeard is the base a session object's deadline counts from, for a
// Locker with cfg, a session whose first request was sent at sent on a
// connection dialed at dialed.
func LeaderHeard(cfg baton.Config, sent, dialed time.Time) time.Time {
	return (&backend{cfg: cfg}).leaderHeard(sent, dialed)
}

// setHook changes one of l's hooks, keeping the others.
func setHook(l *baton.Locker, set func(*hooks)) {
	b := backendOf(l)
	var h hooks
	if old := b.hooks.Load(); old != nil {
		h = *old
	}
	set(&h)
	b.hooks.Store(&h)
}

// Following returns how many holds l's backend tracks, and how many
// listeners its connection state calls on every change.
func Following(l *baton.Locker) (holds, listeners int) {
	b := backendOf(l)
	b.mu.Lock()
	holds = len(b.holds)
	b.mu.Unlock()
	b.cs.mu.Lock()
	listeners = len(b.cs.listeners)
	b.cs.mu.Unlock()
	return holds, listeners
}

// SetObserverQueue lowers how many terms l's observations keep for a
// reader that has not taken them, before l observes.
func SetObserverQueue(l *baton.Locker, n int) {
	if n < 1 {
		panic("zk.SetObserverQueue: an observation keeps at least one term")
	}
	backendOf(l).obsQueue = n
}

// OnObserveRead calls fn each time one of l's observations reads the
// election again, keeping the other hooks set.
func OnObserveRead(l *baton.Locker, fn func()) {
	setHook(l, func(h *hooks) { h.observeRead = fn })
}

// OnObserved calls fn with each term one of l's observations queues for
// its reader, keeping the other hooks set.
func OnObserved(l *baton.Locker, fn func(baton.Term)) {
	setHook(l, func(h *hooks) { h.observed = fn })
}

// SpinSession asks l's backend for its session, again and again, until
// stop is closed: every acquisition's first step.
func SpinSession(l *baton.Locker, stop <-chan struct{}) {
	b := backendOf(l)
	for {
		select {
		case <-stop:
			return
		default:
		}
		_, _ = b.session(context.Background())
	}
}

// ReaperPending returns how many nodes l's reaper still has to delete.
func ReaperPending(l *baton.Locker) int { return backendOf(l).reaper.pending() }

// Crowded reports whether l's next create sends the listing right behind
// it: whether its last create found other children in the election node.
func Crowded(l *baton.Locker) bool { return backendOf(l).crowded.Load() }

// AwaitingSettled reports whether l's Close waits for work that may leave
// a node behind: the answer of a create an acquisition stopped waiting
// for, or a Release under way.
func AwaitingSettled(l *baton.Locker) bool {
	b := backendOf(l)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.idle != nil
}

// SettleTime is how long after a confirmation's answer a sync must be sent
// to settle it (see keeper.Settle), for a session timeout of ttl.
func SettleTime(ttl time.Duration) time.Duration { return settleTime(ttl) }

// SessionObjectDone returns a channel closed when the session object l's
// backend uses now ends, or nil when it has none.
func SessionObjectDone(l *baton.Locker) <-chan struct{} {
	b := backendOf(l)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sess == nil {
		return nil
	}
	return b.sess.k.Done()
}

// Candidate is one candidate as the recipe orders them: its node's name
// and the sequence number read from it.
type Candidate struct {
	Name string
	Seq  int64
}

// ParseSeq is the recipe's reading of a node name's sequence number.
func ParseSeq(name string) (int64, bool) { return parseSeq(name) }

// OrderCandidates keeps and orders the candidates among the children of
// the election node dir, as the recipe does.
func OrderCandidates(dir string, children []string) ([]Candidate, error) {
	cands, err := orderCandidates(dir, children)
	if cands == nil {
		return nil, err
	}
	out := make([]Candidate, len(cands))
	for i, c := range cands {
		out[i] = Candidate{Name: c.name, Seq: c.seq}
	}
	return out, err
}

// Predecessor is the recipe's place of ours among cands, and the
// candidate just before it.
func Predecessor(cands []Candidate, ours string) (int, Candidate) {
	in := make([]candidate, len(cands))
	for i, c := range cands {
		in[i] = candidate{name: c.Name, seq: c.Seq}
	}
	pos, pred := predecessor(in, ours)
	return pos, Candidate{Name: pred.name, Seq: pred.seq}
}

// SeqRoom is the check of the number ZooKeeper gave our node, name, in
// the election node dir, and SeqMargin the room it leaves below 2^31-1.
func SeqRoom(dir, name string) error { return seqRoom(dir, name) }

const SeqMargin = seqMargin
