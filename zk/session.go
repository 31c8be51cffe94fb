package zk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/keeper"
)

// Causes of a lost lease particular to ZooKeeper. A lease's Err matches
// baton.ErrLeaseLost and, through it, one of these, so a caller can tell a
// connection loss from a session loss:
//
//	errors.Is(lease.Err(), zk.ErrSuspended)
var (
	// ErrSuspended means the connection to ZooKeeper was lost (Curator's
	// SUSPENDED) and Settings.ContinueWhileSuspended is off: the holder
	// could no longer know that it held the lock, so its work was stopped
	// at once, before the server could expire the session and hand the lock
	// to someone else. A waiting acquisition fails with it when the
	// connection stayed down for the session timeout: its place in line
	// went with the session.
	ErrSuspended = errors.New("connection to ZooKeeper lost (SUSPENDED)")

	// ErrSessionExpired means the server expired the session (Curator's
	// LOST): every ephemeral node of the session is gone, and the lock may
	// already be someone else's.
	ErrSessionExpired = errors.New("ZooKeeper session expired (LOST)")
)

// session is one ZooKeeper session as the backend uses it: the lease that
// every node of its holds lives on. A keeper.Keeper keeps its local
// deadline, counted from the send time of a confirmation that a later one
// settled (keeper.Settle; go-zookeeper's own pings are not visible to us,
// so the keeper makes a cheap one every RenewEvery). A session object ends
// when the server expires the session, when the connection gets a new
// session, or when the local deadline passes; the next acquisition then
// makes a new one, possibly on the same server session if that is still
// alive.
type session struct {
	id   int64 // the server's session id
	born mark  // the connection's counters when this object was made
	k    *keeper.Keeper
}

// lost reports why s can no longer hold locks, or nil.
func (b *backend) lost(s *session, v snap) error {
	select {
	case <-s.k.Done():
		return s.k.Err()
	default:
	}
	return b.changed(s, v)
}

// changed reports why s can no longer hold locks as the connection's state
// v says it, or nil. The renewer, which runs inside s's keeper, looks only
// at this: s.k is set after the keeper has started.
func (b *backend) changed(s *session, v snap) error {
	if sid := b.conn.SessionID(); sid != s.id || v.mark.expiries > s.born.expiries {
		return fmt.Errorf("%w: %w (session 0x%x)", baton.ErrLeaseLost, ErrSessionExpired, s.id)
	}
	if v.timeout != 0 && v.timeout < b.cfg.TTL {
		return fmt.Errorf("%w: the server now grants a session timeout of %v, below the TTL %v the local deadline counts on", baton.ErrLeaseLost, v.timeout, b.cfg.TTL)
	}
	return nil
}

// session returns a live session object whose deadline counts from a
// request the leader is known to have heard of, making one when there is
// none or the last one ended. Making one costs one request, whose answer
// proves the session is live; it is not on the path of every acquisition.
// A session object made on a connection New was given, or one Dial made
// more than RenewEvery before, is settled only by its first renewal (see
// leaderHeard): session waits for it, about 3/10 of the session timeout,
// before the acquisition puts a node in line.
func (b *backend) session(ctx context.Context) (*session, error) {
	s, err := b.liveSession(ctx)
	if err != nil {
		return nil, err
	}
	select {
	case <-s.k.Settled():
		return s, nil
	case <-s.k.Done():
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	select {
	case <-s.k.Settled():
		return s, nil // then lost: the acquisition finds out
	default:
	}
	// Not a lease the caller had: the service did not answer. (A Close,
	// which also stops the keeper, cancels ctx first: the Locker reports
	// ErrClosed.)
	return nil, &baton.UnavailableError{Where: b.place(), Err: fmt.Errorf("the new ZooKeeper session's first renewal was not answered in time: %v", s.k.Err())}
}

// liveSession returns a live session object, making one when there is
// none or the last one ended; see session.
func (b *backend) liveSession(ctx context.Context) (*session, error) {
	// Looked at before b.mu is taken: on a connection given to New, a
	// look may find a change and call the holds' listeners, which take
	// b.mu when a hold is lost.
	now := b.observe()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, baton.ErrClosed
	}
	if s := b.sess; s != nil && b.lost(s, now) == nil {
		b.mu.Unlock()
		return s, nil
	}
	b.mu.Unlock()

	for attempt := 0; ; attempt++ {
		before := b.observe()
		sid := b.conn.SessionID()
		dialed := b.dials.last()
		sent := time.Now()
		_, err := call(b, ctx, func() (string, error) { return b.conn.Sync("/") })
		after := b.observe()
		switch {
		case err != nil && attempt < 2 && isConnErr(err) && !errors.Is(err, errNoAnswer) && ctx.Err() == nil:
			continue // go-zookeeper flushed it while reconnecting; once more
		case err != nil:
			return nil, b.fail(ctx, "reach ZooKeeper", err)
		case sid == 0 || sid != b.conn.SessionID() || after.mark.expiries != before.mark.expiries || !after.connected():
			if attempt < 2 {
				continue // the session changed under the request
			}
			return nil, &baton.UnavailableError{Where: b.place(), Err: errors.New("the ZooKeeper session keeps changing; no stable session to hold locks on")}
		case after.timeout != 0 && after.timeout < b.cfg.TTL:
			return nil, b.timeoutError(after.timeout)
		}

		return b.install(sid, before.mark, after, sent, dialed)
	}
}

// install makes the session object for server session sid, confirmed by a
// request sent at sent on a connection dialed at dialed or later (zero:
// not known), unless another acquisition installed a live one meanwhile.
func (b *backend) install(sid int64, born mark, now snap, sent, dialed time.Time) (*session, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, baton.ErrClosed
	}
	if s := b.sess; s != nil && b.lost(s, now) == nil {
		b.mu.Unlock()
		return s, nil
	}
	old := b.sess
	s := &session{id: sid, born: born}
	s.k = keeper.Start(sent, b.cfg, b.renewer(s), keeper.Settle(settleTime(b.cfg.TTL), b.leaderHeard(sent, dialed)))
	b.sess = s
	b.mu.Unlock()
	if old != nil {
		// Already lost: Stop only joins its goroutine, after ending a
		// renewal in flight.
		old.k.Stop(b.lost(old, now))
	}
	b.cfg.Logger.Debug("ZooKeeper session in use", "session", fmt.Sprintf("0x%x", sid), "timeout", b.cfg.TTL)
	if hk := b.hooks.Load(); hk != nil && hk.sessionMade != nil {
		hk.sessionMade()
	}
	return s, nil
}

// settleTime is how long after a confirmation's answer a sync must be sent
// to prove that the leader heard of the confirmation itself (see
// keeper.Settle): more than the half tick after which the leader pings a
// follower, which answers with the sessions its clients touched. Servers
// grant a session timeout of two ticks or more, so half a tick is at most
// a quarter of it; the rest, a twentieth, is for the ping's own delays.
func settleTime(ttl time.Duration) time.Duration { return ttl * 3 / 10 }

// leaderHeard returns the send time of a request the leader is known to
// have heard of from the session, for a session confirmed by a request sent
// at sent on a connection dialed at dialed or later: the dial itself,
// since the leader resets a session's expiry when it creates it or
// revalidates it for a client that connects again, and a connection has a
// session only after that. It returns zero, none known, when dialed is
// unknown (a connection given to New) or longer than a renewal before
// sent: counting from it would leave the first renewal less time than
// later ones get, and the first acquisition waits for a renewal to settle
// the request instead (see session).
func (b *backend) leaderHeard(sent, dialed time.Time) time.Time {
	if dialed.IsZero() || dialed.Before(sent.Add(-b.cfg.RenewEvery)) {
		return time.Time{}
	}
	return dialed
}

// dialClock notes when go-zookeeper last began to dial a server, for a
// connection Dial makes.
type dialClock struct{ at atomic.Pointer[time.Time] }

// dial is go-zookeeper's default dialer, noting the time first.
func (d *dialClock) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	now := time.Now()
	d.at.Store(&now)
	return net.DialTimeout(network, address, timeout)
}

// last returns when the last dial began: zero before any, or on a nil
// dialClock (a connection given to New).
func (d *dialClock) last() time.Time {
	if d == nil {
		return time.Time{}
	}
	if t := d.at.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// renewer confirms the session, so that the keeper knows when the leader
// last heard from it: a sync, and an exists on each node held on the
// session, which also finds a node deleted by someone else (an operator's
// forced release) and ends that hold. They are sent together: one round
// trip. A follower answers reads on its own, also one cut off from the
// leader, which may meanwhile expire the session and hand the lock on: a
// follower notices that it lost the leader only after syncLimit x
// tickTime, which may well be longer than the session timeout. It answers
// a sync only after the leader did, so a sync answered through a follower
// proves that the leader still served the session when it was sent. The
// leader learns of the sync's packet itself only from the follower's next
// ping answer, so the keeper counts the local deadline from a sync's send
// only once a later one settled it (settleTime). A session's first look
// (see session) is a sync too. A leader cut
// off from its quorum answers syncs itself until it steps down, also after
// syncLimit x tickTime (ZOOKEEPER-2136): see the package doc.
func (b *backend) renewer(s *session) keeper.RenewFunc {
	return func(ctx context.Context) error {
		if err := b.changed(s, b.observe()); err != nil {
			return err
		}
		holds := b.heldOn(s)
		synced := async(b, func() (bool, error) {
			_, err := b.conn.Sync("/")
			return true, err
		})
		chans := []<-chan result[bool]{synced}
		for _, h := range holds {
			chans = append(chans, async(b, func() (bool, error) {
				ok, _, err := b.conn.Exists(h.path)
				return ok, err
			}))
		}
		var firstErr error
		gone := make([]bool, len(chans))
		for i, ch := range chans {
			ok, err := await(b, ctx, ch)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			gone[i] = err == nil && !ok
		}
		if err := firstErr; err != nil {
			if errors.Is(err, zkgo.ErrSessionExpired) {
				return fmt.Errorf("%w: %w (session 0x%x)", baton.ErrLeaseLost, ErrSessionExpired, s.id)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("confirm session: no answer before the local deadline: %w", err)
			}
			return b.unavailable(context.Background(), "confirm session", err)
		}
		// The answers prove the requests ran on s only if the connection
		// still has s's session: a request queued across an expiry runs on
		// the next session.
		if err := b.changed(s, b.observe()); err != nil {
			return err
		}
		for i, h := range holds {
			if gone[i+1] {
				err := fmt.Errorf("%w: node %s was deleted by another client", baton.ErrLeaseLost, h.path)
				h.gone.Store(&err) // for a Release under way, which the loss no longer reaches
				if h.lose(err) {
					h.forget()
				}
			}
		}
		if hk := b.hooks.Load(); hk != nil && hk.renewed != nil {
			hk.renewed()
		}
		return nil
	}
}

// SessionTimeoutError is the error of a Dial, or of a session made later,
// when the ZooKeeper servers grant a session timeout other than the TTL
// asked for: a *baton.OptionError (matching baton.ErrInvalidOption), and
// also what was granted, for a program that can take it. One that holds
// nothing (it only looks, as baton status does) may Dial again with
// baton.WithTTL(Granted); a holder should choose its TTL within the
// servers' limits.
type SessionTimeoutError struct {
	Asked, Granted time.Duration
	err            *baton.OptionError
}

func (e *SessionTimeoutError) Error() string { return e.err.Error() }

// Unwrap returns the *baton.OptionError.
func (e *SessionTimeoutError) Unwrap() error { return e.err }

// timeoutError says the granted session timeout differs from the TTL.
func (b *backend) timeoutError(granted time.Duration) error {
	reason := fmt.Sprintf("the ZooKeeper servers at %s granted a session timeout of %v instead", b.place(), granted)
	switch {
	case granted > b.cfg.TTL:
		reason += fmt.Sprintf(": their minimum is tickTime x 2 unless minSessionTimeout says otherwise; use a TTL (session timeout) of %v or more", granted)
	case granted < b.cfg.TTL:
		reason += fmt.Sprintf(": their maximum is tickTime x 20 unless maxSessionTimeout says otherwise; use a TTL (session timeout) of %v or less", granted)
	}
	return &SessionTimeoutError{Asked: b.cfg.TTL, Granted: granted, err: &baton.OptionError{Option: "ttl", Value: b.cfg.TTL.String(), Reason: reason}}
}
