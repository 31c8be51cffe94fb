// Package redistest is what the redis and redlock backends' tests share
// when they look at a real Redis server directly: its clock, the wait
// queue's entries (see rediskit.LuaQueue), and a fresh server with a
// client for running a backend's scripts by hand against entries a test
// plants.
package redistest

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/rediskit"
	"github.com/baton-go/baton/internal/testsvc"
)

// ServerMS returns c's server clock in milliseconds, failing tb when it
// cannot be read.
func ServerMS(tb testing.TB, c goredis.UniversalClient) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now, err := c.Time(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return now.UnixMilli()
}

// WaitEntriesRunOut waits until every entry in the waiters' hash w whose
// value names holder (rediskit.HolderOf) has run out by the server's clock:
// SEEN_MS + TTL_MS is past, as the scripts' live() judges it. It reads the
// entries each time, so a refresh that reached the server late moves the
// deadline with it. It fails tb after within, and at once when w holds
// no entry of holder: there is nothing to wait for, and the test is not
// where it means to be.
func WaitEntriesRunOut(tb testing.TB, c goredis.UniversalClient, w, holder string, within time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		entries, err := c.HGetAll(ctx, w).Result()
		if err != nil {
			tb.Fatalf("read the waiters' entries %s: %v", w, err)
		}
		end, found := int64(0), false
		for v, e := range entries {
			if rediskit.HolderOf(v) != holder {
				continue
			}
			found = true
			f := strings.Fields(e)
			if len(f) != 5 || f[0] != "00" {
				tb.Fatalf("entry %q of %s: not in the format 00 SEEN_MS TTL_MS ATTEMPT CHANNEL", e, w)
			}
			seen, err1 := strconv.ParseInt(f[1], 10, 64)
			ttl, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				tb.Fatalf("entry %q of %s: SEEN_MS and TTL_MS are not numbers", e, w)
			}
			end = max(end, seen+ttl)
		}
		if !found {
			tb.Fatalf("%s holds no entry of %s", w, holder)
		}
		if ServerMS(tb, c) >= end {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("%s's entries in %s still live after %v", holder, w, within)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Server is a fresh Redis server and a client on it, for running scripts
// by hand.
type Server struct {
	tb  testing.TB
	Ctx context.Context // ends when the test does, or after 20s
	C   *goredis.Client
}

// Start starts a server for tb alone.
func Start(tb testing.TB) *Server {
	srv := testsvc.StartRedis(tb)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return &Server{tb: tb, Ctx: ctx, C: c}
}

// NowMS is the server's clock in milliseconds.
func (s *Server) NowMS() int64 { return ServerMS(s.tb, s.C) }

// Hold sets the lock key to value, as a holder with a 10s TTL would.
func (s *Server) Hold(key, value string) {
	s.tb.Helper()
	if err := s.C.Set(s.Ctx, key, value, 10*time.Second).Err(); err != nil {
		s.tb.Fatal(err)
	}
}

// Plant queues value in the queue q with score, and stores entry for it in
// the waiters' hash w, as the scripts store them.
func (s *Server) Plant(q, w, value string, score float64, entry string) {
	s.tb.Helper()
	Plant(s.tb, s.Ctx, s.C, q, w, value, score, entry)
}

// Plant is Server.Plant on any server c, failing tb when it cannot.
func Plant(tb testing.TB, ctx context.Context, c goredis.UniversalClient, q, w, value string, score float64, entry string) {
	tb.Helper()
	if err := c.ZAdd(ctx, q, goredis.Z{Score: score, Member: value}).Err(); err != nil {
		tb.Fatal(err)
	}
	if err := c.HSet(ctx, w, value, entry).Err(); err != nil {
		tb.Fatal(err)
	}
}

// Acquire runs an acquire script with keys and args and reads its answer.
func (s *Server) Acquire(script *goredis.Script, keys []string, args ...any) rediskit.Reply {
	s.tb.Helper()
	res, err := script.Run(s.Ctx, s.C, keys, args...).Slice()
	if err != nil {
		s.tb.Fatal(err)
	}
	r, err := rediskit.ParseReply(res)
	if err != nil {
		s.tb.Fatal(err)
	}
	return r
}

// LeaverBehindDeadEntries checks a wait queue's leave (leave makes
// waiter v give up, by a script that answers it was not the holder): a
// waiter that gives up while first among the live ones, behind entries
// that ran out (in the queue q, with entries w), tells the live waiter
// behind it, as one first in line does, with an untagged message; else
// the lock, free and reserved for the one that left, would wait for that
// waiter's next timed attempt (RenewEvery). One that leaves behind a live
// waiter tells nobody, neither the waiter before it nor the one after.
func LeaverBehindDeadEntries(t *testing.T, q, w string, leave func(s *Server, v string)) {
	t.Helper()
	s := Start(t)
	now := s.NowMS()
	s.Plant(q, w, "dead", 1, fmt.Sprintf("00 %d 1000 1 ch-dead", now-5000))
	s.Plant(q, w, "leaver", 2, fmt.Sprintf("00 %d 30000 1 ch-leaver", now))
	s.Plant(q, w, "next", 3, fmt.Sprintf("00 %d 30000 2 ch-next", now))
	s.Plant(q, w, "last", 4, fmt.Sprintf("00 %d 30000 3 ch-last", now))
	next, last := s.Subscribe("ch-next"), s.Subscribe("ch-last")
	leave(s, "leaver")
	if got := s.C.ZRange(s.Ctx, q, 0, -1).Val(); fmt.Sprint(got) != "[next last]" {
		t.Errorf("queue after the first live waiter left: %q, want [next last]", got)
	}
	s.Message(next, "next") // untagged: the waiter checks with an attempt
	s.Told(last, "ch-last", false)

	s.Plant(q, w, "late", 3.5, fmt.Sprintf("00 %d 30000 1 ch-late", now)) // behind next, before last
	leave(s, "late")
	if got := s.C.ZRange(s.Ctx, q, 0, -1).Val(); fmt.Sprint(got) != "[next last]" {
		t.Errorf("queue after a waiter behind a live one left: %q, want [next last]", got)
	}
	s.Told(next, "ch-next", false)
	s.Told(last, "ch-last", false)
}

// ForceOnlyTheValueRead checks a force-release script (KEYS keys, the lock
// first; ARGV[1] the value read; 1 when it deleted): it deletes the lock
// only while it holds the value the operator read, so a copy of the
// request that arrives after the lock changed hands ends no later
// holder's lease.
func ForceOnlyTheValueRead(t *testing.T, script *goredis.Script, keys []string) {
	t.Helper()
	s := Start(t)
	s.Hold(keys[0], "later")
	if n, err := script.Run(s.Ctx, s.C, keys, "earlier").Int(); err != nil || n != 0 {
		t.Fatalf("force with the value read before: %d, %v; want 0, nothing deleted", n, err)
	}
	if v := s.C.Get(s.Ctx, keys[0]).Val(); v != "later" {
		t.Fatalf("key holds %q; want the later holder's", v)
	}
	if n, err := script.Run(s.Ctx, s.C, keys, "later").Int(); err != nil || n != 1 {
		t.Fatalf("force with the value it holds: %d, %v; want 1", n, err)
	}
	if n := s.C.Exists(s.Ctx, keys[0]).Val(); n != 0 {
		t.Fatal("key still there after the force")
	}
}

// ProcessOnly is the part of a go-redis hook that leaves dials and
// pipelines alone: a test's hook embeds it and defines ProcessHook.
type ProcessOnly struct{}

// DialHook implements goredis.Hook.
func (ProcessOnly) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessPipelineHook implements goredis.Hook.
func (ProcessOnly) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// HeldMessages is a go-redis hook that holds back every Pub/Sub message
// its client's connections read while Hold is on, until Let: a slow
// network for the wake-up messages alone. A hook that delays requests
// too embeds it and defines ProcessHook.
type HeldMessages struct {
	Hold atomic.Bool
	let  chan struct{}
	once sync.Once
}

// NewHeldMessages returns a HeldMessages that lets its messages through
// when tb ends, if no Let came before.
func NewHeldMessages(tb testing.TB) *HeldMessages {
	h := &HeldMessages{let: make(chan struct{})}
	tb.Cleanup(h.Let)
	return h
}

// Let lets the messages held, and those to come, through.
func (h *HeldMessages) Let() { h.once.Do(func() { close(h.let) }) }

// DialHook implements goredis.Hook.
func (h *HeldMessages) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &heldMsgConn{Conn: c, h: h}, nil
	}
}

// ProcessHook implements goredis.Hook.
func (*HeldMessages) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

// ProcessPipelineHook implements goredis.Hook.
func (*HeldMessages) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

type heldMsgConn struct {
	net.Conn
	h *HeldMessages
}

func (c *heldMsgConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.h.Hold.Load() && bytes.Contains(b[:n], []byte("message")) {
		<-c.h.let
	}
	return n, err
}

// DropAnswer is a go-redis hook that drops the answer of the first EVALSHA
// of the script SHA once Armed: the script ran, and its caller sees a
// network error, as when a connection breaks at that moment. Armed is
// false again once it dropped one.
type DropAnswer struct {
	ProcessOnly
	SHA   string
	Armed atomic.Bool
}

// ProcessHook implements goredis.Hook.
func (h *DropAnswer) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err == nil && len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && args[1] == h.SHA && h.Armed.CompareAndSwap(true, false) {
			err = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("answer dropped by the test")}
			cmd.SetErr(err)
		}
		return err
	}
}

// DropClaimAnswer is a go-redis hook that, once Armed, lets the first
// claim (a pipeline that starts with SET ... NX, see rediskit.Claim) run
// on the server and keeps its answer from the caller: at once, as a
// network error, or, with UntilDone, only once the caller's context has
// ended, as an answer still on its way when the caller gave up. Armed is
// false again once it caught one; Caught is closed then.
type DropClaimAnswer struct {
	UntilDone bool
	Armed     atomic.Bool
	once      sync.Once
	caught    chan struct{}
}

// Caught is closed once the hook has run a claim and kept its answer.
func (h *DropClaimAnswer) Caught() <-chan struct{} { return h.ch() }

func (h *DropClaimAnswer) ch() chan struct{} {
	h.once.Do(func() { h.caught = make(chan struct{}) })
	return h.caught
}

// DialHook implements goredis.Hook.
func (*DropClaimAnswer) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (*DropClaimAnswer) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

// ProcessPipelineHook implements goredis.Hook.
func (h *DropClaimAnswer) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) == 0 || !isClaim(cmds[0].Args()) || !h.Armed.CompareAndSwap(true, false) {
			return err
		}
		close(h.ch())
		err = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("answer dropped by the test")}
		if h.UntilDone {
			<-ctx.Done()
			err = context.Cause(ctx)
		}
		for _, c := range cmds {
			c.SetErr(err)
			switch c := c.(type) { // no answer was read: no value either
			case *goredis.BoolCmd:
				c.SetVal(false)
			case *goredis.IntCmd:
				c.SetVal(0)
			case *goredis.StringCmd:
				c.SetVal("")
			}
		}
		return err
	}
}

// HoldClaims is a go-redis hook that holds every claim (a pipeline that
// starts with SET ... NX) until Let is called: an acquisition that goes on
// with a majority of Redlock's nodes leaves its claim to this one on its
// way. Landed is closed once a held claim has been answered.
type HoldClaims struct {
	gate, landed chan struct{}
	let, land    sync.Once
}

// NewHoldClaims returns a HoldClaims that holds claims.
func NewHoldClaims() *HoldClaims {
	return &HoldClaims{gate: make(chan struct{}), landed: make(chan struct{})}
}

// Let lets the held claims, and those to come, go on.
func (h *HoldClaims) Let() { h.let.Do(func() { close(h.gate) }) }

// Landed is closed once a held claim has been answered.
func (h *HoldClaims) Landed() <-chan struct{} { return h.landed }

// DialHook implements goredis.Hook.
func (*HoldClaims) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (*HoldClaims) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

// ProcessPipelineHook implements goredis.Hook.
func (h *HoldClaims) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) == 0 || !isClaim(cmds[0].Args()) {
			return next(ctx, cmds)
		}
		<-h.gate
		err := next(ctx, cmds)
		h.land.Do(func() { close(h.landed) })
		return err
	}
}

// FailAll is a go-redis hook that fails every request with ErrNodeDown
// while On is set, as a node that is down answers nothing useful.
type FailAll struct{ On atomic.Bool }

// ErrNodeDown is what FailAll fails requests with.
var ErrNodeDown = errors.New("node down (test hook)")

// DialHook implements goredis.Hook.
func (*FailAll) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (f *FailAll) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if f.On.Load() {
			return ErrNodeDown
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (f *FailAll) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if f.On.Load() {
			return ErrNodeDown
		}
		return next(ctx, cmds)
	}
}

// isClaim reports whether args are a SET with NX.
func isClaim(args []any) bool {
	if len(args) == 0 || !strings.EqualFold(fmt.Sprint(args[0]), "set") {
		return false
	}
	for _, a := range args[1:] {
		if s, ok := a.(string); ok && strings.EqualFold(s, "nx") {
			return true
		}
	}
	return false
}

// CountScript is a go-redis hook that counts the runs (EVALSHA or EVAL)
// of the script SHA sent through the client it hooks.
type CountScript struct {
	ProcessOnly
	SHA string
	N   atomic.Int64
}

// ProcessHook implements goredis.Hook.
func (h *CountScript) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if ScriptSHA(cmd) == h.SHA {
			h.N.Add(1)
		}
		return next(ctx, cmd)
	}
}

// CountRoundTrips is a go-redis hook that counts the round trips made
// through the client it hooks: each command sent alone, and each
// pipeline (its commands go out together and their answers come back
// together).
type CountRoundTrips struct{ N atomic.Int64 }

// DialHook implements goredis.Hook.
func (*CountRoundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (h *CountRoundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.N.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (h *CountRoundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.N.Add(1)
		return next(ctx, cmds)
	}
}

// HoldScript is a go-redis hook that holds every run (EVALSHA or EVAL) of
// the script SHA back until Let: built with NewHoldScript, the request,
// unsent (a test can then act between a request and its arrival: a
// renewal due while another client takes the key); built with
// NewHoldAnswer, its answer, once the script ran on the server (a test
// can then have something happen after the request ran and before the
// caller learns what it found: a message that overtakes the answer).
type HoldScript struct {
	ProcessOnly
	sha     string
	answers bool          // hold answers (errors aside: a NOSCRIPT answer means the script did not run), not requests
	gate    chan struct{} // closed by Let
	held    chan struct{} // a value for each run held, up to 64 waiting
	waiting chan struct{} // closed once one is held
	once    sync.Once
	let     sync.Once
}

// NewHoldScript returns a HoldScript holding the script sha's requests.
func NewHoldScript(sha string) *HoldScript {
	return &HoldScript{sha: sha, gate: make(chan struct{}), held: make(chan struct{}, 64), waiting: make(chan struct{})}
}

// NewHoldAnswer returns a HoldScript holding the script sha's answers.
func NewHoldAnswer(sha string) *HoldScript {
	h := NewHoldScript(sha)
	h.answers = true
	return h
}

// Waiting is closed once a run is held.
func (h *HoldScript) Waiting() <-chan struct{} { return h.waiting }

// Held gets a value for each run held (up to 64 waiting).
func (h *HoldScript) Held() <-chan struct{} { return h.held }

// Let hands the held runs on, and every later one at once.
func (h *HoldScript) Let() { h.let.Do(func() { close(h.gate) }) }

// ProcessHook implements goredis.Hook.
func (h *HoldScript) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if ScriptSHA(cmd) != h.sha {
			return next(ctx, cmd)
		}
		if !h.answers {
			if err := h.hold(ctx, cmd); err != nil {
				return err
			}
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		return h.hold(ctx, cmd)
	}
}

// hold waits for Let, or ctx.
func (h *HoldScript) hold(ctx context.Context, cmd goredis.Cmder) error {
	select {
	case <-h.gate:
		return nil
	default:
	}
	h.once.Do(func() { close(h.waiting) })
	select {
	case h.held <- struct{}{}:
	default:
	}
	select {
	case <-h.gate:
		return nil
	case <-ctx.Done():
		cmd.SetErr(context.Cause(ctx))
		return cmd.Err()
	}
}

// FailAfterRefusal is a go-redis hook for a release that fails while a
// renewal finds the key gone: while Armed, it holds each run of the
// release script back, unsent, until n runs of the renewal script were
// answered 0 (refused) on the clients it hooks, or 10s passed, then fails
// it with a network error, as a request whose answer never came. Build it
// with NewFailAfterRefusal; one may hook several clients.
type FailAfterRefusal struct {
	ProcessOnly
	releaseSHA, renewSHA string
	Armed                atomic.Bool
	// Ready, when set (before Armed), is polled after the refusals until
	// it says the backend has counted them: the refusals' answers reach
	// the hook before the renewal that asked for them has taken them in.
	Ready   func() bool
	left    atomic.Int32 // refusals still to see
	refused chan struct{}
}

// NewFailAfterRefusal returns a FailAfterRefusal for the two scripts that
// waits for n refusals.
func NewFailAfterRefusal(releaseSHA, renewSHA string, n int) *FailAfterRefusal {
	h := &FailAfterRefusal{releaseSHA: releaseSHA, renewSHA: renewSHA, refused: make(chan struct{})}
	h.left.Store(int32(n))
	return h
}

// ProcessHook implements goredis.Hook.
func (h *FailAfterRefusal) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		sha := ScriptSHA(cmd)
		switch {
		case sha == "":
			return next(ctx, cmd)
		case sha == h.releaseSHA && h.Armed.Load():
			deadline := time.After(10 * time.Second)
			select {
			case <-h.refused:
			case <-deadline:
			}
			for h.Ready != nil && !h.Ready() {
				select {
				case <-deadline:
					return errors.New("the refusals were not counted within 10s (test)")
				case <-time.After(time.Millisecond):
				}
			}
			err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("no answer (test)")}
			cmd.SetErr(err)
			return err
		case sha == h.renewSHA:
			err := next(ctx, cmd)
			if c, ok := cmd.(*goredis.Cmd); ok && err == nil {
				if n, _ := c.Int64(); n == 0 && h.left.Add(-1) == 0 {
					close(h.refused)
				}
			}
			return err
		}
		return next(ctx, cmd)
	}
}

// ScriptSHA returns the SHA1 of the script cmd runs, by EVALSHA or by the
// EVAL go-redis falls back to on NOSCRIPT, or "" for another command.
func ScriptSHA(cmd goredis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "evalsha":
		return fmt.Sprint(args[1])
	case "eval":
		sum := sha1.Sum([]byte(fmt.Sprint(args[1])))
		return hex.EncodeToString(sum[:])
	}
	return ""
}

// WaitQueued waits, up to 10s, until at least n waiters are queued for
// the lock key on every one of cs where holder holds it (on every one,
// when holder is ""). On Redlock, an Acquire returns once a majority
// answered: the holder's claim on a slower node may come after a
// waiter's, which then holds the key there and does not queue.
func WaitQueued(tb testing.TB, cs []goredis.UniversalClient, key, holder string, n int64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, c := range cs {
		for (holder == "" || rediskit.HolderOf(c.Get(ctx, key).Val()) == holder) && c.ZCard(ctx, "{"+key+"}:q").Val() < n {
			if ctx.Err() != nil {
				tb.Fatalf("fewer than %d waiters queued on %s after 10s (node %d)", n, key, i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// WaitHeld waits, up to 10s, until the lock key holds holder's value on
// every one of cs (any value, when holder is ""). On Redlock, an Acquire
// returns once a majority answered: its claim on a slower node may still
// be on its way.
func WaitHeld(tb testing.TB, cs []goredis.UniversalClient, key, holder string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, c := range cs {
		for {
			v, err := c.Get(ctx, key).Result()
			if err == nil && (holder == "" || rediskit.HolderOf(v) == holder) {
				break
			}
			if ctx.Err() != nil {
				tb.Fatalf("the key %s never held %q's value on node %d in 10s", key, holder, i)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// HeldThrough returns nil if the lock key on c holds holder's value and
// lives at least until deadline (a lease's local deadline), or an error
// saying which is not so. The key's expiry is counted from before the
// look, and PTTL's millisecond rounded down, so a key that expires
// before the deadline is never passed.
func HeldThrough(ctx context.Context, c goredis.Cmdable, key, holder string, deadline time.Time) error {
	before := time.Now()
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("GET %s: %w", key, err)
	}
	pttl, err := c.PTTL(ctx, key).Result()
	switch {
	case err != nil:
		return fmt.Errorf("PTTL %s: %w", key, err)
	case rediskit.HolderOf(v) != holder:
		return fmt.Errorf("%s holds the lock, and the key holds %q", holder, v)
	case pttl < 0:
		return fmt.Errorf("the key %s has no expiry (PTTL %v)", key, pttl)
	case before.Add(pttl + time.Millisecond).Before(deadline):
		return fmt.Errorf("the key %s expires %v before %s's lease's deadline", key, deadline.Sub(before.Add(pttl+time.Millisecond)).Round(time.Millisecond), holder)
	}
	return nil
}

// HandedThrough is HeldThrough on a key that a release may still be on
// its way to hand to holder (a Redlock node the majority did not need):
// it waits for holder's value there until ctx ends, then looks.
func HandedThrough(ctx context.Context, c goredis.Cmdable, key, holder string, deadline time.Time) error {
	for {
		if v, err := c.Get(ctx, key).Result(); (err == nil && rediskit.HolderOf(v) == holder) || ctx.Err() != nil {
			return HeldThrough(context.WithoutCancel(ctx), c, key, holder, deadline)
		}
		time.Sleep(time.Millisecond)
	}
}

// SetUser makes (or makes again) the ACL user app, password pw, with
// rules, on each of cs.
func SetUser(tb testing.TB, cs []goredis.UniversalClient, rules ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := []any{"ACL", "SETUSER", "app", "reset", "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	for _, c := range cs {
		if err := c.Do(ctx, args...).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

// HeadLeaves is batontest.HeadLeaves on Redis: cs are the nodes' clients
// (one for the redis backend); x and y Lockers on them with a TTL of ttl,
// whose RenewEvery is ttl/3. The holder is a crashed one: the lock key of
// name holds its value on every node, set to expire in 3s.
func HeadLeaves(t *testing.T, cs []goredis.UniversalClient, x, y *baton.Locker, prefix, name string, ttl time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := prefix + name
	const left = 3 * time.Second // for x and y to queue, and x to give up, before it runs out
	for _, c := range cs {
		if err := c.Set(ctx, key, "crashed-holder", left).Err(); err != nil {
			t.Fatal(err)
		}
	}
	expiry := time.Now().Add(left)
	batontest.HeadLeaves(t, x.Acquire, y.Acquire, name,
		func(n int) { t.Helper(); WaitQueued(t, cs, key, "", int64(n)) },
		func() time.Time { return expiry }, ttl/3)
}

// Overtake has a release's messages overtake the answers of the attempt
// they came after. answers holds a waiter's answers back (NewHoldAnswer):
// once n are held (the attempt ran on n servers), Overtake calls release,
// waits until n messages reached the waiter (delivered gets the value
// each names, which must be holder's), and lets the answers on. got is the
// waiter's outcome, which must not come before.
func Overtake(t *testing.T, answers *HoldScript, n int, got <-chan error, release func() error, delivered <-chan string, holder string) {
	t.Helper()
	within := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-answers.Held():
		case err := <-got:
			t.Fatalf("the waiter's Acquire returned with %d of its attempt's %d answers held: %v", i, n, err)
		case <-within:
			t.Fatalf("%d of the waiter's attempt's %d answers held after 10s", i, n)
		}
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		select {
		case v := <-delivered:
			if rediskit.HolderOf(v) != holder {
				t.Fatalf("a message for %q reached the waiter's Locker; want one for %s", v, holder)
			}
		case err := <-got:
			t.Fatalf("the waiter's Acquire returned with its attempt's answers held: %v", err)
		case <-within:
			t.Fatalf("%d of the release's %d messages reached the waiter within 10s", i, n)
		}
	}
	answers.Let()
}

// Deliveries returns a channel of up to n values and a callback for a
// Waker's OnSignal hook (redis.OnWake, redlock.OnWake) that puts each
// message's value there, never blocking the dispatcher that calls it.
func Deliveries(n int) (<-chan string, func(value string)) {
	ch := make(chan string, n)
	return ch, func(v string) {
		select {
		case ch <- v:
		default:
		}
	}
}

// Subscribe returns the messages published on ch from now on.
func (s *Server) Subscribe(ch string) <-chan *goredis.Message {
	s.tb.Helper()
	ps := s.C.Subscribe(s.Ctx, ch)
	s.tb.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(s.Ctx); err != nil {
		s.tb.Fatal(err)
	}
	return ps.Channel()
}

// Told checks whether a message came on channel ch (whose messages are
// msgs, from Subscribe) before now: it publishes a marker there and reads
// up to it; want says whether one should have.
func (s *Server) Told(msgs <-chan *goredis.Message, ch string, want bool) {
	s.tb.Helper()
	if err := s.C.Publish(s.Ctx, ch, "marker").Err(); err != nil {
		s.tb.Fatal(err)
	}
	got := false
	for {
		select {
		case m := <-msgs:
			if m.Payload == "marker" {
				if got != want {
					s.tb.Errorf("a message on %s before now: %v; want %v", ch, got, want)
				}
				return
			}
			got = true
		case <-s.Ctx.Done():
			s.tb.Fatalf("the marker never came on %s", ch)
		}
	}
}

// Message fails the test unless msgs brings want next.
func (s *Server) Message(msgs <-chan *goredis.Message, want string) {
	s.tb.Helper()
	select {
	case m := <-msgs:
		if m.Payload != want {
			s.tb.Errorf("message %q; want %q", m.Payload, want)
		}
	case <-s.Ctx.Done():
		s.tb.Fatalf("no message; want %q", want)
	}
}
