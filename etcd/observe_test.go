package etcd_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/obsend"
	"github.com/baton-go/baton/internal/testsvc"
)

// TestObserve_OneRevisionManyDeletes: a session that ends (expired,
// revoked, or closed) deletes all its keys in one revision. When it held
// the lock and also queued for it again (two Campaigns of one Locker), no
// revision ever had its waiter's key first: the lock goes from its holder
// straight to the next session's key. The observer must not report the
// deleted waiter as a leader in between.
func TestObserve_OneRevisionManyDeletes(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	newFL := func(holder string) *baton.FencedLocker {
		fl, err := etcd.New(testsvc.Client(t, srv.Endpoint), baton.WithTTL(2*time.Second), baton.WithHolder(holder))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fl.Close() })
		return fl
	}
	a, b, obs := newFL("a"), newFL("b"), newFL("obs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	terms, err := obs.Observe(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if tm := <-terms; !tm.NoLeader() {
		t.Fatalf("first term %+v", tm)
	}
	la, err := a.Campaign(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if tm := <-terms; tm.Key != la.Key() {
		t.Fatalf("term %+v, want a's key %s", tm, la.Key())
	}
	waiters := func(n int) {
		for {
			infos, err := obs.Locker().Backend().(baton.Inspector).Inspect(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			if infos[0].Waiters == n {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	go func() { _, _ = a.Campaign(ctx, "x") }() // a queues again, on the same session
	waiters(1)
	gotB := make(chan *baton.FencedLease, 1)
	go func() {
		lb, err := b.Campaign(ctx, "x")
		if err == nil {
			gotB <- lb
		}
	}()
	waiters(2)
	revokeLeaseOf(t, testsvc.Client(t, srv.Endpoint), la.Key()) // a's session ends: both its keys go in one revision
	lb := <-gotB
	for {
		select {
		case tm := <-terms:
			if tm.Key == lb.Key() {
				return
			}
			t.Errorf("after a's session ended, observed term %+v (leader %q, token %d): that key never held the lock; want b (%s, token %d) next", tm, tm.Leader, tm.Token, lb.Key(), lb.Token())
		case <-time.After(5 * time.Second):
			t.Fatal("b never observed")
		}
	}
}

// TestInspect_NameTwice: `baton status x x` on a lock held with no
// waiter must not show a waiter.
func TestInspect_NameTwice(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	fl, err := etcd.New(testsvc.Client(t, srv.Endpoint), baton.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := fl.Acquire(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	infos, err := fl.Locker().Backend().(baton.Inspector).Inspect(ctx, "x", "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.Waiters != 0 {
			t.Errorf("Inspect(x, x) = %+v: %d waiters, want 0", i, i.Waiters)
		}
	}
}

// TestObserve_MemberLosesLeader: an observer whose only member loses its
// cluster's leader (here its two peers stop) is told so: the observation
// ends. Before, the watch on that member stayed open and silent, and the
// observer went on reporting the last leader, which may since have lost
// the lock to a holder on the members it can no longer hear.
func TestObserve_MemberLosesLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("short: starts a three-member cluster")
	}
	ms := testsvc.StartEtcdCluster(t, 3)
	holder := newLocker(t, ms[0].Endpoint, baton.WithHolder("h"))
	obs := newLocker(t, ms[2].Endpoint, baton.WithHolder("obs"))
	ctx := timeout(t, 60*time.Second)
	lease, terms := heldAndObserved(t, ctx, holder, obs)
	_ = lease.Release(ctx)
	if tm := <-terms; !tm.NoLeader() {
		t.Fatalf("term after release %+v, want no leader", tm)
	}
	// etcd ends a watch that requires a leader after a few election
	// timeouts (1s each, embed's default) without one.
	stopPeersWantEnd(t, ms, terms)
	if ctx.Err() != nil {
		t.Fatal("the observation ended with ctx, not by itself")
	}
}

// TestObserve_ClusterGone: a client that reaches no member keeps its
// watch open and silent, reconnecting for ever; the observation must end
// (within a renewal period and a request timeout), not go on reporting the
// last leader, who may be long gone.
func TestObserve_ClusterGone(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	holder := newLocker(t, srv.Endpoint, baton.WithHolder("h"))
	obs := newLocker(t, srv.Endpoint, baton.WithRequestTimeout(time.Second))
	ctx := timeout(t, 60*time.Second)
	_, terms := heldAndObserved(t, ctx, holder, obs)
	srv.Stop()
	stopped := time.Now()
	cfg := obs.Locker().Config()
	select {
	case tm, ok := <-terms:
		if ok {
			t.Fatalf("a term with the cluster gone: %+v", tm)
		}
		t.Logf("the observation ended %v after the member stopped", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(cfg.RenewEvery + cfg.RequestTimeout + 5*time.Second):
		t.Fatal("the observation goes on with the only member stopped")
	}
}

// TestObserve_ClusterGone_KeepsSeenTerm: a reader away while the leader
// changed, and then the cluster stopped answering, still gets the change
// the observation had seen and was waiting to hand it, then the end; the
// observation used to drop it as it ended.
func TestObserve_ClusterGone_KeepsSeenTerm(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	h := newLocker(t, srv.Endpoint, baton.WithHolder("h"))
	g := newLocker(t, srv.Endpoint, baton.WithHolder("g"))
	stopped := make(chan struct{})
	var once sync.Once
	ended := logTap(func(r slog.Record) {
		if strings.HasPrefix(r.Message, obsend.Prefix) {
			once.Do(func() { close(stopped) })
		}
	})
	obs := newLocker(t, srv.Endpoint, baton.WithRequestTimeout(time.Second), baton.WithLogger(slog.New(ended)))
	decided := make(chan string, 8)
	etcd.OnObserved(obs.Locker(), func(tm baton.Term) { decided <- tm.Leader })
	ctx := timeout(t, 60*time.Second)
	lh, terms := heldAndObserved(t, ctx, h, obs)
	awaitDecided := func(want string) {
		t.Helper()
		select {
		case got := <-decided:
			if got != want {
				t.Fatalf("the observation decided leader %q; want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the observation did not decide leader %q within 10s", want)
		}
	}
	awaitDecided("h")
	// The reader is away: the Locker's relay takes the next term (no
	// leader), and the observation waits to hand it the one after (g).
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Acquire(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	awaitDecided("") // both decided before the cluster goes
	awaitDecided("g")
	srv.Stop()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the observation did not end within 30s of the cluster's stop")
	}
	var got []string
	for tm := range terms {
		got = append(got, tm.Leader)
	}
	if want := []string{"", "g"}; !slices.Equal(got, want) {
		t.Fatalf("after the cluster went, the reader got leaders %q, then the end; want %q", got, want)
	}
}

// TestObserve_Compacted_ReadsAgain: an observation whose next revision was
// compacted away before its watch began (here: while it waited for its
// reader to take the first term) reads the keys again and goes on, with
// the leader the compaction hid; it used to end on the watch's
// ErrCompacted. The backend's own Observe is used, without the Locker's
// relay, which would take the first term at once.
func TestObserve_Compacted_ReadsAgain(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	h := newLocker(t, srv.Endpoint, baton.WithHolder("h"))
	var warned atomic.Int64
	obs := newLocker(t, srv.Endpoint, baton.WithLogger(slog.New(logTap(func(r slog.Record) {
		if r.Level == slog.LevelWarn && strings.Contains(r.Message, "compacted") {
			warned.Add(1)
		}
	}))))
	ctx := timeout(t, 60*time.Second)
	terms, err := obs.Locker().Backend().(baton.Observer).Observe(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	lh, err := h.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	// The acquisition's revision is the one the watch would begin at:
	// one more, and the compaction takes it away.
	c := testsvc.Client(t, srv.Endpoint)
	resp, err := c.Put(ctx, "elsewhere", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		select {
		case tm, ok := <-terms:
			if !ok {
				t.Fatalf("the observation ended after leaders %q; want it to read the keys again and report h", got)
			}
			got = append(got, tm.Leader)
		case <-time.After(10 * time.Second):
			t.Fatalf("leaders %q, then nothing for 10s; want no leader, then h", got)
		}
	}
	if want := []string{"", "h"}; !slices.Equal(got, want) {
		t.Fatalf("leaders %q; want %q", got, want)
	}
	flushLog(t, obs)
	if n := warned.Load(); n != 1 { // logged before the keys were read again
		t.Fatalf("%d warnings that changes may have gone unreported; want 1", n)
	}
	// And it follows on, on a watch from the revision it read at.
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case tm := <-terms:
		if !tm.NoLeader() {
			t.Fatalf("after h's release, term %+v; want no leader", tm)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("h's release was not observed")
	}
}

// TestObserve_KeyMadeAgain_NewTerm: another tool's key name may come
// back: etcd's concurrency.Mutex keys by session, so a Mutex that unlocks
// and locks again makes its key anew under the same name. When that
// happens where the observation cannot follow it event by event (here its
// next revision was compacted away, so it reads the keys again), the keys
// it reads have the leader's key name of before, with a later create
// revision: a new term, which the observer must report by its token, not
// take for the term it had.
func TestObserve_KeyMadeAgain_NewTerm(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	obs := newLocker(t, srv.Endpoint)
	ctx := timeout(t, 60*time.Second)
	c := testsvc.Client(t, srv.Endpoint)
	mu := lockedMutex(t, ctx, c, "job")
	key := mu.Key()
	// The backend's own Observe, without the Locker's relay, which would
	// take the first term at once: the observation waits to hand it over,
	// its watch not yet begun, while the key is made again.
	terms, err := obs.Locker().Backend().(baton.Observer).Observe(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := mu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mu.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if mu.Key() != key {
		t.Fatalf("the Mutex locked again under key %s; want its key of before, %s", mu.Key(), key)
	}
	g, err := c.Get(ctx, key)
	if err != nil || len(g.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	again := baton.Token(g.Kvs[0].CreateRevision)
	// The unlock is the revision the watch would begin at: the compaction
	// takes it away, and the observation reads the keys again.
	resp, err := c.Put(ctx, "elsewhere", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	next := func() baton.Term {
		t.Helper()
		select {
		case tm, ok := <-terms:
			if !ok {
				t.Fatal("the observation ended")
			}
			return tm
		case <-time.After(10 * time.Second):
			t.Fatalf("no term for 10s; want %s made again (token %d)", key, again)
		}
		return baton.Term{}
	}
	if tm := next(); tm.Key != key || tm.Token >= again {
		t.Fatalf("first term %+v; want the Mutex's first key %s, before token %d", tm, key, again)
	}
	if tm := next(); tm.Key != key || tm.Token != again {
		t.Fatalf("after the keys were read again, term %+v; want %s made again, token %d", tm, key, again)
	}
	// And it follows on, on a watch from the revision it read at.
	if err := mu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if tm := next(); !tm.NoLeader() {
		t.Fatalf("after the Mutex's unlock, term %+v; want no leader", tm)
	}
}

// TestObserve_MemberLosesLeader_Warns: a watch on a member that lost its
// leader (here both its peers stop) is ended by the member (ErrNoLeader),
// and the observation reads the keys again, the changes in between
// unreported: it says so, once per loss of the leader, before that read (which, with no quorum,
// fails and ends the observation), as after a compaction. The observer's
// TTL puts its probe (a quorum read every RenewEvery, 20s) past the
// member's end of the watch, some election timeouts after the stop.
func TestObserve_MemberLosesLeader_Warns(t *testing.T) {
	if testing.Short() {
		t.Skip("short: starts a three-member cluster")
	}
	ms := testsvc.StartEtcdCluster(t, 3)
	var mu sync.Mutex
	var warnings []string
	obs := newLocker(t, ms[2].Endpoint, baton.WithTTL(time.Minute), baton.WithRequestTimeout(2*time.Second),
		baton.WithLogger(slog.New(logTap(func(r slog.Record) {
			if r.Level == slog.LevelWarn {
				mu.Lock()
				warnings = append(warnings, r.Message)
				mu.Unlock()
			}
		}))))
	ctx := timeout(t, 60*time.Second)
	terms, err := obs.Observe(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if tm := <-terms; !tm.NoLeader() {
		t.Fatalf("first term %+v, want no leader", tm)
	}
	stopPeersWantEnd(t, ms, terms)
	flushLog(t, obs)
	mu.Lock()
	defer mu.Unlock()
	// Once per loss of the leader: twice when the first peer stopped led,
	// and the other two elected a leader before the second stopped.
	losses := 0
	for _, m := range warnings {
		if strings.Contains(m, "lost its leader") {
			losses++
		}
	}
	reread := slices.IndexFunc(warnings, func(m string) bool { return strings.Contains(m, "could not read the election's keys again") })
	if losses < 1 || losses > 2 || reread != len(warnings)-1 || reread < losses {
		t.Fatalf("warnings %q; want one that the member lost its leader and changes went unreported (two if it lost two leaders), then the read again failing", warnings)
	}
}

// TestClose_EndsObservations: Close ends the backend's observations and
// returns only once they have ended, their channels closed: one whose
// reader stopped reading (blocked handing it a term: Close must not wait
// on that reader), and one whose reader waits for the next change (on
// its watch, its probe ticking). They used to run on after Close, on a
// client Close may have closed, until their caller's ctx ended. An
// Observe after Close is refused: nothing would end it.
func TestClose_EndsObservations(t *testing.T) {
	srv := testsvc.StartEtcd(t)
	fl := newLocker(t, srv.Endpoint)
	obs := fl.Locker().Backend().(baton.Observer) // the Locker ends its own relays
	ctx := timeout(t, 60*time.Second)             // lives on past Close
	away, err := obs.Observe(ctx, "away")         // never read
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := obs.Observe(ctx, "waiting")
	if err != nil {
		t.Fatal(err)
	}
	if tm := <-waiting; !tm.NoLeader() {
		t.Fatalf("first term %+v, want no leader", tm)
	}
	closed := make(chan error, 1)
	go func() { closed <- fl.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits 10s on, with observations open")
	}
	for name, ch := range map[string]<-chan baton.Term{"away": away, "waiting": waiting} {
		select {
		case tm, ok := <-ch:
			if ok {
				t.Errorf("observation %q still runs after Close returned: it handed over %+v", name, tm)
			}
		default:
			t.Errorf("observation %q still runs after Close returned: its channel is open", name)
		}
	}
	if _, err := obs.Observe(ctx, "late"); !errors.Is(err, baton.ErrClosed) {
		t.Errorf("Observe after Close = %v; want ErrClosed", err)
	}
}

// stopPeersWantEnd stops the first two members of a three-member cluster
// and waits for terms, an observation on the third, to end without
// another term: a member without a leader has none to report.
func stopPeersWantEnd(t *testing.T, ms []*testsvc.Etcd, terms <-chan baton.Term) {
	t.Helper()
	ms[0].Stop()
	ms[1].Stop()
	select {
	case tm, ok := <-terms:
		if ok {
			t.Fatalf("a term from a member without a leader: %+v", tm)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the observation of a member without a leader still runs, silent, 30s after its peers stopped")
	}
}

// heldAndObserved has holder take the lock "job" and obs observe it, and
// checks the first term: holder's, named "h". It returns the lease and the
// terms.
func heldAndObserved(t *testing.T, ctx context.Context, holder, obs *baton.FencedLocker) (*baton.FencedLease, <-chan baton.Term) {
	t.Helper()
	lease, err := holder.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	terms, err := obs.Observe(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if tm := <-terms; tm.Leader != "h" {
		t.Fatalf("first term %+v, want h leading", tm)
	}
	return lease, terms
}

// logTap is a slog.Handler that calls itself with every record, and
// writes nothing.
type logTap func(slog.Record)

func (f logTap) Enabled(context.Context, slog.Level) bool      { return true }
func (f logTap) WithAttrs([]slog.Attr) slog.Handler            { return f }
func (f logTap) WithGroup(string) slog.Handler                 { return f }
func (f logTap) Handle(_ context.Context, r slog.Record) error { f(r); return nil }

// flushLog waits for l's logger to have handed on every record logged so
// far: it gets them from a goroutine of its own (see baton.WithLogger).
func flushLog(t *testing.T, fl *baton.FencedLocker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := asynclog.Flush(ctx, fl.Locker().Config().Logger); err != nil {
		t.Fatalf("log records not handed on within 10s: %v", err)
	}
}
