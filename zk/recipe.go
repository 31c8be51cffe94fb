package zk

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
)

// The recipe, as the ZooKeeper documentation and the guide describe it:
// every contender creates an ephemeral, sequential node under one election
// node; the smallest sequence number leads; every other contender watches
// only the node just before its own, and looks again whenever that watch
// fires. The functions here are the recipe's steps, kept apart so that a
// leader election can reuse them: createAndList, listCandidates,
// predecessor and watchNode.
//
// Node names follow Curator and go-zookeeper's zk.Lock:
// _c_<guid>-lock-<sequence>. The "_c_<guid>-" part is the protection: a
// create whose answer was lost when the connection dropped is found again
// by its GUID instead of being left behind as a node that nobody will ever
// delete while the session lives. Since the names match, a baton lock, a
// Curator InterProcessMutex and a zk.Lock on the same election node exclude
// each other.
const (
	protectedPrefix = "_c_"
	lockMarker      = "lock-"
	seqDigits       = 10 // ZooKeeper appends %010d
)

// candidate is one contender's node under an election node.
type candidate struct {
	name string // node name, relative to the election node
	seq  int64  // the sequence number ZooKeeper appended
}

// newGUID returns 32 random hex digits.
func newGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// candidatePrefix is the path we ask ZooKeeper to create; it appends the
// sequence number.
func candidatePrefix(dir, guid string) string {
	return dir + "/" + protectedPrefix + guid + "-" + lockMarker
}

// parseSeq returns the sequence number at the end of a sequential node's
// name, and false for a name that has none (not a candidate), or whose
// number ZooKeeper appended past the wrap (see wrappedSeq).
func parseSeq(name string) (int64, bool) {
	if len(name) < seqDigits || wrappedSeq(name) {
		return 0, false
	}
	digits := name[len(name)-seqDigits:]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

// wrappedSeq reports whether name ends in a sequence number that ZooKeeper
// appended after the election node's counter passed 2^31-1. The number is
// the counter, a signed 32-bit integer, formatted as %010d: past the wrap
// it is "-2147483648", "-2147483647", ... "-000000001", a sign and 10 or 9
// digits. Its last 10 characters would read as a large number (two
// candidates each first), or hold the sign (the candidate unseen). The
// recipes put a separator before the number, "-" (Curator's, zk.Lock's
// and ours, lock-) or "_" (kazoo's __lock__): a sign right after one is
// the wrap. A wrapped number of 10 digits is -1000000000 or below, so
// its first digit is not 0: "lock--0000000005" is a prefix lock-- and 5.
func wrappedSeq(name string) bool {
	d := 0 // trailing digits
	for d < len(name) && name[len(name)-1-d] >= '0' && name[len(name)-1-d] <= '9' {
		d++
	}
	sign := len(name) - d - 1
	if (d != seqDigits-1 && d != seqDigits) || sign < 1 || name[sign] != '-' {
		return false
	}
	if sep := name[sign-1]; sep != '-' && sep != '_' {
		return false
	}
	return d == seqDigits-1 || name[sign+1] != '0'
}

// orderCandidates keeps the children of the election node dir that are
// candidates and sorts them in the order they queued: by sequence number,
// which the election node's counter hands out in creation order. A child
// whose number wrapped (see wrappedSeq), numbered 2^31-1, or sharing its
// number with another has no place in that order: it fails with an error
// matching ErrSequenceWrap. (Since ZooKeeper 3.6 the counter sticks at
// 2^31-1 once it has wrapped, and names every later candidate
// ...2147483647; before, it goes on to negative numbers.) Other children
// (no number at the end) are not candidates, and are left out.
func orderCandidates(dir string, children []string) ([]candidate, error) {
	out := make([]candidate, 0, len(children))
	for _, c := range children {
		if wrappedSeq(c) {
			return nil, seqWrapped(dir, "candidate "+baton.Printable(c)+" was numbered past the limit")
		}
		if seq, ok := parseSeq(c); ok {
			if seq >= math.MaxInt32 {
				return nil, seqWrapped(dir, "candidate "+baton.Printable(c)+" was numbered at the limit")
			}
			out = append(out, candidate{name: c, seq: seq})
		}
	}
	slices.SortFunc(out, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
	})
	for i := 1; i < len(out); i++ {
		if out[i].seq == out[i-1].seq {
			return nil, seqWrapped(dir, fmt.Sprintf("candidates %s and %s have the same number", baton.Printable(out[i-1].name), baton.Printable(out[i].name)))
		}
	}
	return out, nil
}

// ErrSequenceWrap means that an election node's sequence numbers have
// reached ZooKeeper's limit of 2^31-1, or come within seqMargin of it:
// past it they wrap to negative numbers, and candidates no longer queue in
// the order they came. Acquisitions there fail with it, until the election
// node is deleted and created again (its numbers start again from 0;
// tokens keep rising). It is not baton.ErrUnavailable: trying again does
// not help.
var ErrSequenceWrap = errors.New("its ZooKeeper sequence numbers are at or near their limit of 2^31-1, past which candidates no longer queue in order")

// seqMargin is how close our node's sequence number may come to 2^31-1
// before the acquisition is refused (see seqRoom): 2^20, about a million
// numbers, where a queue holds a handful. A candidate let in is numbered
// at least that far below the wrap, and a node is numbered past the wrap
// only after a million more creates (a refused acquisition takes a number
// too): every candidate let in before has long left by then, so no two
// live candidates straddle the wrap, and a client that does not check
// (Curator, zk.Lock) finds none of ours in its way. The refusals start
// while every number is still in order, with time to re-create the
// election node before the wrap.
const seqMargin = 1 << 20

// seqRoom returns an error matching ErrSequenceWrap when name, our node in
// the election node dir, was numbered past the wrap or within seqMargin
// of it. ZooKeeper numbers a sequential node with its parent's count of
// creates (its child version, as the server keeps it): the name says it
// exactly, however our node was made or found. (The child version a Stat
// reports is another number: it counts deletes too, as twice the creates
// less the children, and overflows at about 2^30 creates.)
func seqRoom(dir, name string) error {
	if seq, ok := parseSeq(name); ok && seq <= math.MaxInt32-seqMargin {
		return nil
	}
	return seqWrapped(dir, fmt.Sprintf("our node %s; acquisitions are refused from %d on", baton.Printable(name), math.MaxInt32-seqMargin+1))
}

// seqWrapped is the error for an election node dir whose sequence numbers
// wrapped, or are about to; why says what showed it.
func seqWrapped(dir, why string) error {
	return fmt.Errorf("election node %s: %w (%s): delete it (zkCli deleteall %s; a holder's lease is then lost); it is created again, numbered from 0, and tokens keep rising", dir, ErrSequenceWrap, why, dir)
}

// predecessor returns our position among cands and the candidate just
// before us (meaningful when pos > 0); pos is -1 when our node is not
// among them.
func predecessor(cands []candidate, ours string) (pos int, pred candidate) {
	for i, c := range cands {
		if c.name == ours {
			if i > 0 {
				return i, cands[i-1]
			}
			return 0, candidate{}
		}
	}
	return -1, candidate{}
}

// listCandidates lists the election node dir's candidates in order. An
// election node that does not exist has none. A waiter's listing (waiter
// not nil) waits out an outage (see retryRead).
func (b *backend) listCandidates(ctx context.Context, dir string, waiter *session) ([]candidate, error) {
	kids, err := retryRead(b, ctx, waiter, func() ([]string, error) {
		kids, _, err := b.conn.Children(dir)
		return kids, err
	})
	switch {
	case errors.Is(err, zkgo.ErrNoNode):
		return nil, nil
	case err != nil:
		return nil, b.readFailed(ctx, "list candidates of "+dir, waiter, err)
	}
	return orderCandidates(dir, kids)
}

// watched is a node read with a one-time watch set on it.
type watched struct {
	data  []byte
	stat  *zkgo.Stat
	watch <-chan zkgo.Event // receives one event, then is closed
}

// watchNode reads path and sets a one-time watch on it, which fires when
// the node is deleted or its data changes. It returns ok false, and sets no
// watch, when the node does not exist: a getData watch, unlike an exists
// watch, is never left behind on a missing node. A waiter's read (waiter
// not nil) waits out an outage (see retryRead).
func (b *backend) watchNode(ctx context.Context, path string, waiter *session) (w watched, ok bool, err error) {
	w, err = retryRead(b, ctx, waiter, func() (watched, error) {
		data, stat, ch, err := b.conn.GetW(path)
		return watched{data: data, stat: stat, watch: ch}, err
	})
	switch {
	case errors.Is(err, zkgo.ErrNoNode):
		return watched{}, false, nil
	case err != nil:
		return watched{}, false, b.readFailed(ctx, "watch "+path, waiter, err)
	}
	return w, true, nil
}

// readFailed classifies err, a failed read of what: a waiting
// acquisition's (waiter not nil) own ends, its session lost or Close (see
// waitRead), as they are; any other as fail does.
func (b *backend) readFailed(ctx context.Context, what string, waiter *session, err error) error {
	if waiter != nil && (errors.Is(err, baton.ErrLeaseLost) || errors.Is(err, baton.ErrClosed)) {
		return err
	}
	return b.fail(ctx, what, err)
}

// retryRead runs a read, repeating it while the connection is down (a
// read is safe to repeat), not once the backend is closing: for at most
// the request timeout, or, for a waiting acquisition on session waiter
// (not nil), for as long as the server's session may live (see waitRead).
func retryRead[T any](b *backend, ctx context.Context, waiter *session, fn func() (T, error)) (T, error) {
	if waiter != nil {
		return waitRead(b, ctx, waiter, fn)
	}
	deadline := time.Now().Add(b.cfg.RequestTimeout)
	for tries := 0; ; tries++ {
		before := b.observe()
		v, err := call(b, ctx, fn)
		if err == nil || !isConnErr(err) || errors.Is(err, zkgo.ErrClosing) || ctx.Err() != nil {
			return v, err
		}
		if errors.Is(err, errNoAnswer) || !time.Now().Before(deadline) {
			return v, err
		}
		if werr := b.afterFailure(ctx, before, tries, deadline); werr != nil {
			return v, err
		}
		if werr := b.waitConnected(ctx, deadline); werr != nil {
			return v, err
		}
	}
}

// waitRead is a read of a waiting acquisition, whose node keeps its place
// in line while the server's session s may live: it waits for the read's
// answer as long as outlast does, with no request timeout, and sends the
// read again after a connection error, once the connection has s's
// session again. go-zookeeper answers every request it sent: when the
// server does, or when the connection drops, which it makes happen when
// it hears nothing for two thirds of the session timeout; one still
// queued unsent it sends once connected again, or fails with ErrNoServer
// when it starts over its list of servers. So a slow server is waited
// for, and a silent one leads to one read sent again per reconnection,
// not one per request timeout.
func waitRead[T any](b *backend, ctx context.Context, s *session, fn func() (T, error)) (T, error) {
	var down outage // one, across reads sent again: the outage is the connection's
	defer down.stop()
	for tries := 0; ; tries++ {
		before := b.observe()
		if hk := b.hooks.Load(); hk != nil && hk.waiterRead != nil {
			hk.waiterRead()
		}
		r, err := outlast(b, ctx, s, async(b, fn), &down)
		switch {
		case err != nil:
			return r.v, err
		case errors.Is(r.err, zkgo.ErrClosing) && b.calls.closing():
			return r.v, baton.ErrClosed // refused by start: our Close drains
		case r.err == nil || !isConnErr(r.err) || errors.Is(r.err, zkgo.ErrClosing):
			return r.v, r.err
		}
		if err := b.afterFailure(ctx, before, tries, time.Time{}); err != nil {
			return r.v, err
		}
		if _, err := outlast[struct{}](b, ctx, s, nil, &down); err != nil {
			return r.v, err
		}
	}
}

// afterFailure paces a request sent again after a connection error: when
// the connection's state has not changed since before, taken just before
// the failed request was sent, it waits for a change, at most a pause
// that doubles with each failure in a row (tries), from 50ms up to 1s.
// go-zookeeper may answer a request whose write failed before it marks
// the connection down; sent again at once, the request could fail the
// same way, again and again. The pause ends by deadline, unless that is
// zero. It fails only when ctx ends (with its cause) or the backend
// closes (baton.ErrClosed).
func (b *backend) afterFailure(ctx context.Context, before snap, tries int, deadline time.Time) error {
	pause := min(50*time.Millisecond<<min(tries, 5), time.Second)
	if !deadline.IsZero() {
		pause = min(pause, time.Until(deadline))
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-before.changed: // at once when it changed already
	case <-t.C:
	case <-b.life.Done():
		return baton.ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// waitConnected waits until the connection has a session again, ctx ends
// or deadline passes.
func (b *backend) waitConnected(ctx context.Context, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		v := b.observe()
		if v.connected() {
			return nil
		}
		select {
		case <-v.changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			return errNoAnswer
		case <-b.life.Done():
			return zkgo.ErrClosing
		}
	}
}

// created is our candidate node: its path and its czxid, the token.
type created struct {
	path  string
	czxid int64
	alone bool // the create's answer showed it the election node's only child
}

// createAndList creates our ephemeral, sequential, protected candidate
// under the election node dir, and returns it with dir's candidates. The
// create runs in one transaction with an empty write to dir, whose answer
// carries the transaction's zxid (our node's czxid, without reading our
// node back) and dir's child count just after our create. When that count
// is 1, our node is the only candidate and no listing is needed: an
// uncontended acquisition takes this one request. Otherwise we list.
//
// Whether the listing goes out right behind the create, in the same round
// trip, depends on what the backend's previous create found: once a create
// has found other candidates, the next ones send the listing at once, and
// once one finds itself alone, the next ones do not. ZooKeeper serves a
// session's requests in order, so a listing sent behind the create
// normally includes our node; when it does not (it overtook the create on
// its way out), we list again.
//
// It creates dir (a container, which the server removes once it is empty)
// and the root's ancestors when they are missing. When the connection
// drops before the create's answer comes, it looks for our GUID (see
// findGUID) before creating again, and each create it sends again has a
// GUID of its own, so that a copy of an earlier one landing late is never
// taken for ours: the reaper looks for the earlier GUID for a while
// (reaper.addGUID). When it gives up (ctx ended, no answer), whatever the
// create did is handed to the reaper, so no node is left behind. Once our
// node is made, a waiting acquisition's listing (waiter not nil) waits out
// an outage (see retryRead).
func (b *backend) createAndList(ctx context.Context, dir string, data []byte, waiter *session) (created, []candidate, error) {
	var last error
	for range 5 {
		guid := newGUID()
		prefix := candidatePrefix(dir, guid)
		sent := make(chan struct{})
		cc := async(b, func() (created, error) {
			close(sent)
			return b.create(prefix, dir, data)
		})
		// Wait until the create is on its way, so that the listing goes
		// out behind it; unless our Close drains requests, when start
		// may have refused it (never sent: its answer is there already).
		if !b.calls.closing() {
			<-sent
		}
		var lc <-chan result[[]string]
		if b.crowded.Load() {
			lc = async(b, func() ([]string, error) {
				kids, _, err := b.conn.Children(dir)
				return kids, err
			})
		}
		own, err := await(b, ctx, cc)
		if err != nil && own.path != "" && !answerLost(err) {
			b.reaper.add(own.path) // made, but not read back (see create); not one findGUID may find below
		}
		switch {
		case err == nil:
			name := own.path[len(dir)+1:]
			if err := seqRoom(dir, name); err != nil {
				return own, nil, err // the caller deletes our node
			}
			b.crowded.Store(!own.alone)
			if seq, ok := parseSeq(name); ok && own.alone {
				return own, []candidate{{name: name, seq: seq}}, nil
			}
			if lc != nil {
				if kids, lerr := await(b, ctx, lc); lerr == nil {
					cands, err := orderCandidates(dir, kids)
					if err != nil {
						return own, nil, err
					}
					if pos, _ := predecessor(cands, name); pos >= 0 {
						return own, cands, nil
					}
				}
			}
			cands, err := b.listCandidates(ctx, dir, waiter)
			return own, cands, err
		case errors.Is(err, zkgo.ErrClosing) && b.calls.closing():
			return created{}, nil, baton.ErrClosed // refused by start: our Close drains
		case errors.Is(err, zkgo.ErrNoNode):
			if err := b.ensureDir(ctx, dir); err != nil {
				return created{}, nil, err
			}
		case answerLost(err):
			// Sent, or perhaps sent, and the answer lost: the node may
			// exist.
			own, found, ferr := b.findGUID(ctx, dir, guid)
			if ferr != nil {
				b.reaper.addGUID(dir, guid)
				return created{}, nil, b.fail(ctx, "find our node after the connection dropped", ferr)
			}
			if found {
				if err := seqRoom(dir, own.path[len(dir)+1:]); err != nil {
					return own, nil, err
				}
				cands, err := b.listCandidates(ctx, dir, waiter)
				return own, cands, err
			}
			b.reaper.addGUID(dir, guid) // in case it lands after the look
		case errors.Is(err, zkgo.ErrNoServer):
			// Never sent: safe to send again once connected.
			if werr := b.waitConnected(ctx, time.Now().Add(b.cfg.RequestTimeout)); werr != nil {
				return created{}, nil, b.fail(ctx, "create candidate in "+dir, err)
			}
		case ctx.Err() != nil || errors.Is(err, errNoAnswer):
			b.abandonCreate(dir, guid, cc)
			return created{}, nil, b.fail(ctx, "create candidate in "+dir, err)
		default:
			return created{}, nil, b.fail(ctx, "create candidate in "+dir, err)
		}
		last = err
	}
	return created{}, nil, b.fail(ctx, "create candidate in "+dir, last)
}

// create makes the candidate node. It is one request, a multi: the create
// and an empty write to dir, in one transaction, whose zxid and child
// count the write's answer reports. Where the ACL of dir allows us to
// create children but not to write it, a plain create and a read of our
// node do, and the caller lists.
func (b *backend) create(prefix, dir string, data []byte) (created, error) {
	res, err := b.conn.Multi(
		&zkgo.CreateRequest{Path: prefix, Data: data, Acl: b.acl, Flags: zkgo.FlagEphemeralSequential},
		&zkgo.SetDataRequest{Path: dir, Data: nil, Version: -1},
	)
	if err == nil {
		if len(res) != 2 || res[1].Stat == nil {
			return created{}, fmt.Errorf("multi answered %d results; want a path and a stat", len(res))
		}
		st := res[1].Stat
		return created{path: res[0].String, czxid: st.Mzxid, alone: st.NumChildren == 1}, nil
	}
	if !errors.Is(err, zkgo.ErrNoAuth) {
		return created{}, err
	}
	path, err := b.conn.Create(prefix, data, zkgo.FlagEphemeralSequential, b.acl)
	if err != nil {
		return created{}, err
	}
	_, stat, err := b.conn.Get(path)
	if err != nil {
		return created{path: path}, err // the node exists: the caller must not leave it
	}
	return created{path: path, czxid: stat.Czxid}, nil
}

// findGUID looks for our protected node among dir's children, and reads
// its czxid when it is there. It syncs first: the server we reconnected to
// may be a follower that has not yet applied a create the leader already
// committed.
func (b *backend) findGUID(ctx context.Context, dir, guid string) (created, bool, error) {
	kids, err := retryRead(b, ctx, nil, func() ([]string, error) {
		if _, err := b.conn.Sync(dir); err != nil && !errors.Is(err, zkgo.ErrNoNode) {
			return nil, err
		}
		kids, _, err := b.conn.Children(dir)
		return kids, err
	})
	if errors.Is(err, zkgo.ErrNoNode) {
		return created{}, false, nil
	}
	if err != nil {
		return created{}, false, err
	}
	want := protectedPrefix + guid + "-"
	for _, k := range kids {
		if !strings.HasPrefix(k, want) {
			continue
		}
		path := dir + "/" + k
		stat, err := retryRead(b, ctx, nil, func() (*zkgo.Stat, error) {
			_, stat, err := b.conn.Get(path)
			return stat, err
		})
		if errors.Is(err, zkgo.ErrNoNode) {
			return created{}, false, nil
		}
		if err != nil {
			return created{}, false, err
		}
		return created{path: path, czxid: stat.Czxid}, true, nil
	}
	return created{}, false, nil
}

// abandonCreate hands a create we stopped waiting for to the reaper once
// go-zookeeper has answered it: the node it made, or, if the answer was
// lost, the GUID to look for. A node answered after Close gave up waiting
// for it (on a borrowed connection, whose session lives on) is deleted
// here, as the reaper makes its last pass or has stopped: else it would
// stand in line, or hold the lock, for as long as the caller keeps the
// connection. (A lost answer then leaves a GUID nobody looks for: the
// node, if the create ran, lasts as long as the session.)
func (b *backend) abandonCreate(dir, guid string, ch <-chan result[created]) {
	if !b.calls.add(!b.owned) {
		return // closing: the connection, and with it the session, ends
	}
	settled := b.settling()
	go func() {
		defer b.calls.done()
		defer settled()
		r := <-ch
		if r.v.path == "" && !answerLost(r.err) && !errors.Is(r.err, zkgo.ErrClosing) {
			return // no node made
		}
		b.mu.Lock()
		late := b.lastPass
		if !late { // before Close's last pass, which finds it
			if r.v.path != "" {
				b.reaper.add(r.v.path)
			} else {
				b.reaper.addGUID(dir, guid)
			}
		}
		b.mu.Unlock()
		if late && r.v.path != "" {
			if err := b.conn.Delete(r.v.path, -1); err != nil && !errors.Is(err, zkgo.ErrNoNode) {
				b.cfg.Logger.Warn("could not delete the node of a create answered after Close; it lasts as long as the session", "path", r.v.path, "err", err)
			}
		}
	}()
}

// ensureDir creates the election node dir as a container, and the root's
// missing ancestors as persistent nodes.
func (b *backend) ensureDir(ctx context.Context, dir string) error {
	mkdir := func() error {
		_, err := call(b, ctx, func() (string, error) {
			return b.conn.CreateContainer(dir, nil, zkgo.FlagContainer, b.acl)
		})
		if errors.Is(err, zkgo.ErrNodeExists) {
			return nil
		}
		return err
	}
	err := mkdir()
	if !errors.Is(err, zkgo.ErrNoNode) {
		if err != nil {
			return b.fail(ctx, "create election node "+dir, err)
		}
		return nil
	}
	p := ""
	for _, seg := range strings.Split(b.root[1:], "/") {
		p += "/" + seg
		_, err := call(b, ctx, func() (string, error) {
			return b.conn.Create(p, nil, zkgo.FlagPersistent, b.acl)
		})
		if err != nil && !errors.Is(err, zkgo.ErrNodeExists) {
			return b.fail(ctx, "create root node "+p, err)
		}
	}
	if err := mkdir(); err != nil {
		return b.fail(ctx, "create election node "+dir, err)
	}
	return nil
}

// deleteNode deletes one of our nodes by path, bounded by ctx and the
// request timeout. Paths are unique (a GUID each), so this never deletes
// another holder's node. A node already gone (found false) is not an
// error; when the outcome is unknown the reaper takes over.
//
// On a borrowed connection (New), which Close leaves open with its session,
// a delete may start while Close drains, as Close's own requests do: a
// Release racing with Close still deletes its node.
func (b *backend) deleteNode(ctx context.Context, path string) (found bool, err error) {
	own := !b.owned || ctx.Value(closingKey{}) != nil
	_, err = await(b, ctx, start(b, own, func() (struct{}, error) {
		return struct{}{}, b.conn.Delete(path, -1)
	}))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, zkgo.ErrNoNode):
		return false, nil
	case errors.Is(err, zkgo.ErrSessionExpired):
		return false, nil // the node went with the session
	case b.closedConnected.Load() && (errors.Is(err, zkgo.ErrClosing) || errors.Is(err, zkgo.ErrConnectionClosed)):
		// Our Close (only ours closes a connection Dial made) is closing
		// the session, on a connection that was up to tell the server
		// so: the node goes with it (a best guess: see closedConnected).
		// On one that was down, the node lasts until the session times
		// out, as below.
		return true, nil
	}
	// Even when the connection has a new session, the node may live: a
	// create queued across the expiry runs on the new session. The
	// reaper's delete costs a request, or finds nothing.
	b.reaper.add(path)
	return true, b.fail(context.WithoutCancel(ctx), fmt.Sprintf("delete %s (it will be deleted once the connection is back, or go with the session)", path), err)
}
