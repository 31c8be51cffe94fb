package zk_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/sqlite"
	"github.com/baton-go/baton/zk"
)

// helperEnv carries a helperSpec to the test binary when it is re-executed
// as the frozen leader's process.
const helperEnv = "BATON_ZK_TEST_HELPER"

// helperSpec tells the helper process what to do.
type helperSpec struct {
	Addr  string        `json:"addr"`
	Name  string        `json:"name"`
	TTL   time.Duration `json:"ttl"`
	Fence string        `json:"fence"` // SQLite file
}

// helperEvent is one line the helper prints on stdout.
type helperEvent struct {
	Kind  string `json:"kind"` // held, write-ok, lost, rejected, error
	Token int64  `json:"token,omitempty"`
	Key   string `json:"key,omitempty"`
	Err   string `json:"err,omitempty"`
	// LostIs says whether the lease's Err matched baton.ErrLeaseLost.
	LostIs bool `json:"lost_is,omitempty"`
}

const writesDDL = `CREATE TABLE IF NOT EXISTS writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, writer TEXT NOT NULL, token INTEGER NOT NULL)`

// helperMain is the frozen leader: it takes the lock and raises the fence,
// then makes one fenced write for each line it reads on stdin (so that the
// test freezes it between writes, not holding SQLite's write lock), and
// reports the lease's loss as soon as it sees it.
func helperMain(specJSON string) int {
	var spec helperSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	say := func(e helperEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
	}
	ctx := context.Background()
	fl, err := zk.Dial(ctx, []string{spec.Addr}, baton.WithTTL(spec.TTL), baton.WithHolder("frozen-leader"))
	if err != nil {
		say(helperEvent{Kind: "error", Err: err.Error()})
		return 1
	}
	defer fl.Close()
	store, err := sqlite.Open(ctx, spec.Fence)
	if err != nil {
		say(helperEvent{Kind: "error", Err: err.Error()})
		return 1
	}
	defer store.Close()
	lease, err := fl.Acquire(ctx, spec.Name)
	if err != nil {
		say(helperEvent{Kind: "error", Err: err.Error()})
		return 1
	}
	if err := store.Raise(ctx, spec.Name, lease.Token()); err != nil {
		say(helperEvent{Kind: "error", Err: err.Error()})
		return 1
	}
	say(helperEvent{Kind: "held", Token: int64(lease.Token()), Key: lease.Key()})
	reported := make(chan struct{})
	go func() { // ends when the lease ends: lost, or released below
		defer close(reported)
		<-lease.Done()
		if errors.Is(lease.Err(), baton.ErrReleased) {
			return
		}
		say(helperEvent{Kind: "lost", Err: lease.Err().Error(), LostIs: errors.Is(lease.Err(), baton.ErrLeaseLost)})
	}()

	// The stale holder's work does not stop by itself: it writes on, as
	// the guide's billing loop did.
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		err := store.WithTx(ctx, spec.Name, lease.Token(), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO writes (writer, token) VALUES ('frozen', ?)`, int64(lease.Token()))
			return err
		})
		switch {
		case err == nil:
			say(helperEvent{Kind: "wrote"})
		case errors.Is(err, baton.ErrStaleToken):
			say(helperEvent{Kind: "rejected", Err: err.Error()})
		default:
			say(helperEvent{Kind: "error", Err: err.Error()})
		}
	}
	_ = lease.Release(ctx)
	<-reported
	return 0
}

// TestElection_FrozenLeader is the guide's frozen leader: a leader process
// with a 4s session is frozen with SIGSTOP for 12s. Only the next in line
// is alerted, about one session timeout later; when the frozen one wakes,
// its lease reports lost and its fenced write is rejected.
func TestElection_FrozenLeader(t *testing.T) {
	t.Parallel() // mostly waiting on the server's clock
	const (
		sessionTimeout = 4 * time.Second
		freeze         = 12 * time.Second
	)
	addr := zkServer.Addr(t)
	name := uniqueName(t)
	fencePath := filepath.Join(t.TempDir(), "fence.db")
	ctx := timeout(t, 2*time.Minute)
	store, err := sqlite.Open(ctx, fencePath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.WithTx(ctx, "setup", 1, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, writesDDL)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// The leader, in its own process group.
	spec, _ := json.Marshal(helperSpec{Addr: addr, Name: name, TTL: sessionTimeout, Fence: fencePath})
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(spec), "GORACE=atexit_sleep_ms=20")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	events := make(chan helperEvent, 16)
	readerDone := make(chan struct{})
	go func() { // ends at EOF, when the helper exits
		defer close(readerDone)
		defer close(events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e helperEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events <- e
			}
		}
	}()
	t.Cleanup(func() {
		_ = in.Close()
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		select {
		case <-readerDone:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-readerDone
		}
		_ = cmd.Wait()
	})
	next := func(within time.Duration) helperEvent {
		t.Helper()
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("leader process exited early")
			}
			if e.Kind == "error" {
				t.Fatalf("leader process: %s", e.Err)
			}
			return e
		case <-time.After(within):
			t.Fatalf("no word from the leader process within %v", within)
		}
		return helperEvent{}
	}
	write := func() {
		t.Helper()
		if _, err := in.Write([]byte("write\n")); err != nil {
			t.Fatalf("tell the leader to write: %v", err)
		}
	}
	held := next(30 * time.Second)
	if held.Kind != "held" {
		t.Fatalf("leader said %+v, want held", held)
	}
	write()
	if e := next(10 * time.Second); e.Kind != "wrote" {
		t.Fatalf("leader said %+v, want wrote", e)
	}

	// Two more in line, each with its own session; count the watch events
	// each sees on its predecessor.
	var seen [2]atomic.Int64
	type got struct {
		lease *baton.FencedLease
		at    time.Time
		err   error
	}
	results := [2]chan got{make(chan got, 1), make(chan got, 1)}
	admin := adminConn(t, addr)
	for i := range 2 {
		fl := dial(t, []string{addr}, zk.Settings{}, baton.WithTTL(sessionTimeout), baton.WithHolder(fmt.Sprintf("next-%d", i+1)))
		zk.OnPredecessorEvent(fl.Locker(), func(string, string) { seen[i].Add(1) })
		go func() {
			l, err := fl.Acquire(ctx, name)
			results[i] <- got{l, time.Now(), err}
		}()
		waitChildren(t, admin, lockDir(name), i+2)
	}
	// Each waiter watches its predecessor.
	waitWatchers(t, addr, lockDir(name), 2)

	frozeAt := time.Now()
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var first got
	select {
	case first = <-results[0]:
	case <-results[1]:
		t.Fatal("the second in line acquired before the first")
	case <-time.After(freeze):
		t.Fatalf("nobody took over within the %v freeze", freeze)
	}
	if first.err != nil {
		t.Fatalf("next in line: %v", first.err)
	}
	takeover := first.at.Sub(frozeAt)
	if n1, n2 := seen[0].Load(), seen[1].Load(); n1 != 1 || n2 != 0 {
		t.Errorf("watch events: next in line %d, the one after %d; want 1 and 0 (no herd)", n1, n2)
	}
	if first.lease.Token() <= baton.Token(held.Token) {
		t.Errorf("new leader's token %d <= frozen leader's %d", first.lease.Token(), held.Token)
	}
	// The server cannot expire the session before one session timeout after
	// the leader's last ping or renewal, which go out every third of it,
	// so it cannot before two thirds of it after the freeze; it does so
	// within a tick or so after one session timeout. The lower bound
	// allows half of it: on a loaded machine a ping due before the freeze
	// may not have gone out, leaving the last one sent further back.
	t.Logf("froze the leader at 0; the next in line took over at +%v (session timeout %v)", takeover.Round(time.Millisecond), sessionTimeout)
	if takeover < sessionTimeout/2 || takeover > sessionTimeout+4*time.Second {
		t.Errorf("takeover %v after the freeze, want about one session timeout (%v)", takeover, sessionTimeout)
	}
	// The new leader raises the fence first, then writes.
	if err := store.WithTx(ctx, name, first.lease.Token(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO writes (writer, token) VALUES ('next', ?)`, int64(first.lease.Token()))
		return err
	}); err != nil {
		t.Fatalf("new leader's fenced write: %v", err)
	}

	// The freeze lasts 12s in all, as in the guide.
	time.Sleep(time.Until(frozeAt.Add(freeze)))
	if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wokeAt := time.Now()
	write() // its work goes on where it stopped
	var lost, rejected *helperEvent
	for lost == nil || rejected == nil {
		e := next(20 * time.Second)
		switch e.Kind {
		case "lost":
			lost = &e
			t.Logf("+%v after waking: the leader's lease reports lost: %s", time.Since(wokeAt).Round(time.Millisecond), e.Err)
		case "rejected":
			rejected = &e
			t.Logf("+%v after waking: the leader's fenced write is rejected: %s", time.Since(wokeAt).Round(time.Millisecond), e.Err)
		case "wrote":
			t.Fatal("the woken leader's write was accepted after the new leader raised the fence")
		}
	}
	if !lost.LostIs {
		t.Errorf("the woken leader's lease error %q does not match baton.ErrLeaseLost", lost.Err)
	}
	// No write of the frozen leader's landed after the new leader's.
	var after int
	if err := sqlDB(t, fencePath).QueryRowContext(ctx,
		`SELECT count(*) FROM writes WHERE writer = 'frozen' AND seq > (SELECT min(seq) FROM writes WHERE writer = 'next')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != 0 {
		t.Errorf("%d writes of the frozen leader landed after the new leader's first", after)
	}

	// The line moves on: the new leader releases, the last one leads.
	if err := first.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case second := <-results[1]:
		if second.err != nil {
			t.Fatal(second.err)
		}
		if second.lease.Token() <= first.lease.Token() {
			t.Errorf("third leader's token %d <= %d", second.lease.Token(), first.lease.Token())
		}
		_ = second.lease.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the last in line did not take over within 10s of the release")
	}
}

// sqlDB opens the SQLite file read-only for checks.
func sqlDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
