package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/obsend"
)

var _ baton.Observer = (*backend)(nil)

// Timing of an observer's reads of the lock's row.
const (
	// observeIdle bounds the time between two reads while nothing
	// changes; a read also makes up for a NOTIFY that never came.
	observeIdle = time.Minute
	// passingMin and passingMax bound the time between reads while an
	// expired lease waits for the first waiter in line to take it.
	passingMin = 10 * time.Millisecond
	passingMax = time.Second
)

// ErrNotObservable means the lock table cannot be observed until someone
// changes it: it is missing, or lacks the observers' triggers and this
// user may not add them. Observe returns it without baton.ErrUnavailable:
// trying again will not help until the table's owner runs Init.
var ErrNotObservable = errors.New("elections on this lock table cannot be observed")

// Observe implements baton.Observer: it reports the terms of the election
// name (the lock of that name), the current one at once, then every change
// of leader in commit order, including to no leader.
//
// The triggers on the lease table notify the table's channel when a
// transaction that changed a lock's holder commits, with the row as it is
// then; a release that hands the lock to a waiter is one change. Each
// observer has a connection of its own that LISTENs on that channel. An
// expiry writes nothing: the observer reads the row again when the
// holder's lease ends by the database's clock, and a lease found expired
// with no live waiter queued is a term with no leader. One that a waiter
// is queued for passes to the first of them when it looks again (within
// milliseconds when it is alive), which is reported as a direct change of
// leader, as a hand-off is. See the package documentation, "Observing
// elections", for what is and is not seen.
//
// The observer reads notifications as they come, whether or not the
// channel is read: terms wait for a slow reader in memory, in order, never
// in PostgreSQL's notification queue. Its goroutines and connection end,
// closing the channel, when ctx ends, when the Locker is closed, when
// the table can no longer be observed (dropped, or a privilege revoked),
// or when the database has not answered for one TTL; a lost connection is
// made again meanwhile. Observe fails with an error wrapping
// baton.ErrUnavailable when the database cannot be reached, and with
// ErrNotObservable when the lease table lacks the observers' triggers and
// this user may not add them (only the table's owner may: run Init, or one
// Observe, as the owner; the CLI's `baton elect --observe NAME` is one).
// The Locker's first Observe (or Acquire) creates the tables when they
// are missing, as Acquire says, and fails as it does when it cannot.
func (b *backend) Observe(ctx context.Context, name string) (<-chan baton.Term, error) {
	if err := baton.ValidateName(name); err != nil {
		return nil, err
	}
	// The tables first, as for the Locker's first Acquire: the observer
	// then adds its triggers to them.
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails on Linux
	o := &observer{
		b:     b,
		name:  name,
		key:   b.n.key(name),
		mark:  "baton.mark." + hex.EncodeToString(id[:]),
		ready: make(chan struct{}, 1),
		ended: make(chan struct{}),
		done:  make(chan struct{}),
	}
	octx, stop := context.WithCancelCause(ctx)
	if !b.trackObserver(o, stop) {
		stop(nil)
		return nil, baton.ErrClosed
	}
	err := o.connect(octx)
	if err == nil {
		err = o.sync(octx)
	}
	if err != nil {
		o.drop()
		b.untrackObserver(o)
		close(o.done)
		if errors.Is(err, ErrNotObservable) && octx.Err() == nil {
			err = fmt.Errorf("%s: observe %q: %w", b.where, name, err)
		} else {
			err = b.fail(octx, fmt.Sprintf("observe %q", name), err)
		}
		stop(nil)
		return nil, err
	}
	ch := make(chan baton.Term)
	go o.run(octx)
	go o.deliver(octx, stop, ch)
	return ch, nil
}

// observer is one Observe call: two goroutines, one that owns the
// connection and decides the terms (run), and one that sends them
// (deliver). The first never waits for the caller to read: a listening
// connection that stops reading holds back PostgreSQL's notification
// queue, shared by the whole database, and once it is full every NOTIFY
// fails. Terms wait in memory instead, in order, up to maxQueued.
type observer struct {
	b     *backend
	name  string
	key   string        // the lock's key, for terms
	mark  string        // its own channel, for the marks that cut the stream of notifications
	ready chan struct{} // a term was queued (holds at most one signal)
	ended chan struct{} // closed when run has returned
	done  chan struct{} // closed when both goroutines are done (or Observe failed)

	mu    sync.Mutex
	queue []baton.Term // decided, not yet sent

	// Owned by Observe, then by run.
	conn    *pgx.Conn     // nil while reconnecting
	channel string        // the lease table's channel
	marks   uint64        // marks sent
	started bool          // the first term is decided
	cur     baton.Term    // the last term decided
	due     time.Time     // when to read the row again
	passing time.Duration // the time between reads while a lease passes to a waiter
	retry   time.Duration // the wait before the next reconnection
}

// rowState is a lock's row as a NOTIFY or a read reports it.
type rowState struct {
	found  bool // the row exists
	holder string
	token  int64
	ticket int64 // the waiter the lock went to; 0 if taken directly
	live   bool  // its lease had not ended by the database's clock
	since  time.Time

	// Only from reads.
	released bool          // freed (expires_at = '-infinity'), not expired
	left     time.Duration // what the lease has left, when live
	waiters  int64         // live waiters queued
	waitLeft time.Duration // until the soonest of their places lapses
}

// change is a NOTIFY's payload, as the trigger function builds it.
type change struct {
	Name   string   `json:"name"`
	Holder string   `json:"holder"`
	Token  int64    `json:"token"`
	Ticket int64    `json:"ticket"`
	Live   bool     `json:"live"`
	Since  *float64 `json:"since"` // acquired_at, in seconds since the epoch
}

// addTriggers runs observersSQL, again after a lock timeout (its wait
// behind the table's other users is kept short, see observersSQL), until
// ctx ends.
func (o *observer) addTriggers(ctx context.Context, conn *pgx.Conn) error {
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		_, err := conn.Exec(ctx, o.b.sql.observers)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55P03" { // lock_not_available
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// connect opens the observer's connection, checks that the table has the
// triggers, and LISTENs on the table's channel and on its own.
func (o *observer) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, o.b.cfg.RequestTimeout)
	defer cancel()
	conn, err := o.b.connect(cctx, func(cfg *pgx.ConnConfig) {
		// pgx keeps the notifications that arrive during a statement for
		// WaitForNotification only without a handler of the caller's.
		cfg.OnNotification = nil
		// A wait for a notification ends at a deadline, as it does by
		// default: a cancel request sent to the server could hit the next
		// statement.
		cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
		}
	})
	if err != nil {
		return err
	}
	o.conn = conn
	var oid *uint32
	var triggers int64
	if err := conn.QueryRow(cctx, o.b.sql.observeSetup, o.b.n.lease).Scan(&oid, &triggers); err != nil {
		return err
	}
	if oid == nil {
		return fmt.Errorf("%w: the lock table %s does not exist; create it with postgres.Init", ErrNotObservable, o.b.n.table)
	}
	if triggers != 2 {
		// The first observer of the table adds the triggers that notify
		// observers; the tables are made without them.
		if err := o.addTriggers(cctx, conn); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
				return fmt.Errorf("%w: the lock table %s lacks the triggers that notify observers, and this user may not add them (%v); add them as the table's owner: postgres.Init, or one `baton elect --observe NAME` run as the owner", ErrNotObservable, o.b.n.table, err)
			}
			return fmt.Errorf("add the observers' triggers to %s: %w", o.b.n.table, err) // transient: a lock wait, a lost connection
		}
	}
	o.channel = "baton.observe." + strconv.FormatUint(uint64(*oid), 10)
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{o.channel}.Sanitize()+"; LISTEN "+pgx.Identifier{o.mark}.Sanitize())
	return err
}

// drop closes the connection, if any.
func (o *observer) drop() {
	if o.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.b.cfg.RequestTimeout)
	defer cancel()
	_ = o.conn.Close(ctx)
	o.conn = nil
}

// run is the goroutine that owns the connection. It ends when ctx ends,
// the table can no longer be observed, or the database has not answered
// for one TTL (the leader it last reported may be long gone); a lost
// connection is made again, with backoff, meanwhile.
func (o *observer) run(ctx context.Context) {
	defer close(o.ended)
	defer o.drop()
	var down time.Time // when the connection was lost; zero while it works
	for {
		var err error
		if o.conn == nil {
			err = o.reconnect(ctx)
		} else {
			err = o.step(ctx)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			down = time.Time{}
		case !transient(err):
			obsend.Warn(ctx, o.b.cfg.Logger, "it can no longer observe", "lock", o.name, "table", o.b.n.table, "err", err)
			return
		case o.conn != nil:
			o.b.cfg.Logger.Warn("election observer lost its connection; reconnecting", "lock", o.name, "err", err)
			o.drop()
			down = time.Now()
		case down.IsZero():
			down = time.Now()
		case time.Since(down) >= o.b.cfg.TTL:
			obsend.Warn(ctx, o.b.cfg.Logger, "the database did not answer for a TTL", "lock", o.name, "ttl", o.b.cfg.TTL, "err", err)
			return
		}
	}
}

// deliver is the goroutine that sends the terms run decides, in order,
// and closes ch once run has ended and every term is sent, or when ctx
// ends. It is the last to finish.
func (o *observer) deliver(ctx context.Context, stop context.CancelCauseFunc, ch chan<- baton.Term) {
	defer func() {
		close(ch)
		stop(nil)
		<-o.ended
		o.b.untrackObserver(o)
		close(o.done)
	}()
	send := func() bool { // every term queued, one at a time: emit may drop the oldest meanwhile
		for {
			o.mu.Lock()
			if len(o.queue) == 0 {
				o.mu.Unlock()
				return true
			}
			t := o.queue[0]
			o.queue = o.queue[1:]
			o.mu.Unlock()
			select {
			case ch <- t:
			case <-ctx.Done():
				return false
			}
		}
	}
	for send() {
		select {
		case <-o.ready:
		case <-o.ended:
			send() // all run decided
			return
		case <-ctx.Done():
			return
		}
	}
}

// reconnect makes the connection again after a wait that doubles with
// each failure, then reads the row.
func (o *observer) reconnect(ctx context.Context) error {
	o.retry = min(max(2*o.retry, relistenMin), relistenMax)
	t := time.NewTimer(o.retry)
	select {
	case <-ctx.Done():
		t.Stop()
		return context.Cause(ctx)
	case <-t.C:
	}
	err := o.connect(ctx)
	if err == nil {
		err = o.sync(ctx)
	}
	if err != nil {
		o.drop()
		return err
	}
	o.retry = 0
	return nil
}

// step waits for a notification until the row is due to be read, applies
// it if it concerns the lock, and reads the row when due. A notification
// makes the row due at once, to learn how long the new lease lasts.
func (o *observer) step(ctx context.Context) error {
	if !time.Now().Before(o.due) {
		return o.sync(ctx)
	}
	wctx, cancel := context.WithDeadline(ctx, o.due)
	n, err := o.conn.WaitForNotification(wctx)
	cancel()
	if n != nil {
		if s, ok := o.parse(n); ok {
			o.apply(s, false)
			o.due = time.Now()
		}
	}
	if err != nil && (ctx.Err() != nil || wctx.Err() == nil || o.conn.IsClosed()) {
		return err
	}
	return nil // a notification, or the row is due
}

// parse reads a notification about the observed lock.
func (o *observer) parse(n *pgconn.Notification) (rowState, bool) {
	if n.Channel != o.channel {
		return rowState{}, false
	}
	var c change
	if err := json.Unmarshal([]byte(n.Payload), &c); err != nil || c.Name != o.name {
		return rowState{}, false
	}
	s := rowState{found: true, holder: c.Holder, token: c.Token, ticket: c.Ticket, live: c.Live}
	if c.Since != nil {
		s.since = time.UnixMicro(int64(math.Round(*c.Since * 1e6)))
	}
	return s, true
}

// read reads the lock's row and its live waiters in a transaction that
// share-locks the row (when it exists) and ends by notifying the
// observer's own channel: with the row locked, every change to it that
// committed before that mark is in the read, and every one after it
// comes after the mark. It returns whether the row was locked, what was
// read, and the changes to the lock notified before the mark, in order.
func (o *observer) read(ctx context.Context) (bool, rowState, []rowState, error) {
	rctx, cancel := context.WithTimeout(ctx, o.b.cfg.RequestTimeout)
	defer cancel()
	o.marks++
	mark := strconv.FormatUint(o.marks, 10)
	var (
		locked         bool
		s              rowState
		since          *time.Time
		left, waitLeft *float64
		batch          pgx.Batch
	)
	batch.Queue(o.b.sql.observeLock, o.name).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&locked)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	batch.Queue(o.b.sql.observeRead, o.name).QueryRow(func(row pgx.Row) error {
		return row.Scan(&s.found, &s.holder, &s.token, &s.ticket, &since, &s.released, &left, &s.waiters, &waitLeft)
	})
	batch.Queue(o.b.sql.observeMark, o.mark, mark)
	if err := o.conn.SendBatch(rctx, &batch).Close(); err != nil {
		return false, rowState{}, nil, err
	}
	if since != nil {
		s.since = *since
	}
	if left != nil {
		s.live, s.left = true, seconds(*left)
	}
	if waitLeft != nil {
		s.waitLeft = seconds(*waitLeft)
	}
	var pre []rowState
	for {
		n, err := o.conn.WaitForNotification(rctx)
		if n != nil && n.Channel == o.mark && n.Payload == mark {
			return locked, s, pre, nil
		}
		if n != nil {
			if c, ok := o.parse(n); ok {
				pre = append(pre, c)
			}
		}
		if err != nil {
			return false, rowState{}, nil, err
		}
	}
}

// sync reads the row and reconciles the terms with it.
func (o *observer) sync(ctx context.Context) error {
	locked, s, pre, err := o.read(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	switch {
	case locked && !o.started:
		// The first term: the read covers all that came before the mark.
		o.started = true
		if s.live {
			o.emit(o.term(s))
		} else {
			o.emit(baton.Term{Election: o.name})
		}
	case locked:
		for _, c := range pre {
			o.apply(c, false)
		}
		o.apply(s, true)
	default:
		// No row when the read began, so every change notified before
		// the mark came after that; the row the read found, if any, may
		// not be the last of them: read it again.
		if !o.started {
			o.started = true
			o.emit(baton.Term{Election: o.name})
		} else {
			o.apply(rowState{}, true)
		}
		for _, c := range pre {
			o.apply(c, false)
		}
		o.due = now.Add(observeIdle)
		if s.found || o.leads() {
			o.due = now.Add(minRecheck)
		}
		return nil
	}
	o.schedule(now, s)
	return nil
}

// schedule sets when to read the row again, after a read that found s
// and the terms reconciled with it: when the leader's lease ends by the
// database's clock, soon and then less often while an expired lease
// passes to a waiter, and at least every observeIdle.
func (o *observer) schedule(now time.Time, s rowState) {
	next := observeIdle
	switch {
	case !o.leads():
		o.passing = 0
	case s.live && baton.Token(s.token) == o.cur.Token:
		o.passing = 0
		next = s.left + recheckMargin
	case passingOn(s):
		o.passing = min(max(2*o.passing, passingMin), passingMax)
		next = min(o.passing, s.waitLeft+recheckMargin)
	}
	o.due = now.Add(max(min(next, observeIdle), minRecheck))
}

// passingOn says that a read found the lease expired (not freed) with a
// live waiter queued, the first of whom takes the lock when it looks
// again.
func passingOn(s rowState) bool {
	return s.found && !s.live && !s.released && s.waiters > 0
}

// apply moves the terms on to the state s of the row, notified or read.
// A lock taken by someone who never queued (ticket 0) was free with
// nobody in line just before, so a term with no leader comes first even
// when no read saw it; one taken by a waiter, handed by a release or
// taken at the holder's expiry, follows its holder directly.
func (o *observer) apply(s rowState, read bool) {
	if s.found && s.live {
		if o.leads() && o.cur.Token == baton.Token(s.token) {
			return
		}
		if o.leads() && s.ticket <= 0 {
			o.emit(baton.Term{Election: o.name})
		}
		o.emit(o.term(s))
		return
	}
	if !o.leads() || read && passingOn(s) {
		return
	}
	o.emit(baton.Term{Election: o.name})
}

func (o *observer) leads() bool { return !o.cur.NoLeader() }

// maxQueued is how many terms an observer keeps for a reader that has not
// taken them yet (besides the one it is sending); beyond it, the oldest
// go. A backend keeps it in obsQueue, which tests lower.
const maxQueued = 1024

// emit decides the next term and hands it to deliver.
func (o *observer) emit(t baton.Term) {
	o.cur = t
	o.mu.Lock()
	full := len(o.queue) >= o.b.obsQueue
	if full {
		o.queue = o.queue[1:]
	}
	o.queue = append(o.queue, t)
	o.mu.Unlock()
	o.b.obsDecided.Add(1) // once queued: a test that counts it reads a full queue
	if full {
		o.b.cfg.Logger.Warn("an observer's reader is far behind; its oldest term not taken is dropped", "election", o.name, "queued", o.b.obsQueue)
	}
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

func (o *observer) term(s rowState) baton.Term {
	return baton.Term{Election: o.name, Leader: s.holder, Token: baton.Token(s.token), Key: o.key, Since: s.since}
}

// transient says whether err may pass with a new connection: the network,
// a timeout, a closed connection, the server restarting or short of
// resources. Others (a table gone, a privilege missing) stay.
func transient(err error) bool {
	if errors.Is(err, ErrNotObservable) {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return true
	}
	if pgErr.Code == "55P03" { // lock_not_available: adding the triggers waited too long
		return true
	}
	switch pgErr.Code[:2] {
	case "08", "40", "53", "57", "58": // connection, rollback, resources, operator intervention, system
		return true
	}
	return false
}
