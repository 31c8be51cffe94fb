package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/sqlite"
	"github.com/baton-go/baton/internal/obsend"
	"github.com/baton-go/baton/internal/proc"
	"github.com/baton-go/baton/internal/syncbuf"
	"github.com/baton-go/baton/internal/testsvc"
)

// writerEnv names the SQLite file a fenced writer writes to.
const writerEnv = "BATON_TEST_WRITER_DB"

// fencedWriter is the command the election tests run under baton elect: it
// writes a row every 50ms through the fence with its BATON_TOKEN, until it
// is stopped or refused. It records its pid so the test can freeze it. On
// SIGUSR1 it stops writing, between two writes, makes the file paused-ID
// (ID its holder), and writes on when continued (SIGCONT): each write
// holds SQLite's write lock from BEGIN IMMEDIATE to COMMIT, and a writer
// frozen inside one would keep every next leader's fence raise waiting
// until it gave up, so that no takeover could come. (It cannot SIGSTOP
// itself instead: another of its threads may take that stop, and this
// one begin the next write before it is stopped.)
func fencedWriter(path string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Caught before the pid is recorded: the default action of SIGUSR1
	// would end the writer.
	pause, cont := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(pause, syscall.SIGUSR1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(pause)
	defer signal.Stop(cont)
	token, err := strconv.ParseInt(os.Getenv("BATON_TOKEN"), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer: BATON_TOKEN:", err)
		return 2
	}
	holder := os.Getenv("BATON_HOLDER")
	_ = os.WriteFile(filepath.Join(filepath.Dir(path), "pid-"+holder), []byte(strconv.Itoa(os.Getpid())), 0o644)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return 1
	}
	defer db.Close()
	store, err := sqlite.New(context.Background(), db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return 1
	}
	for n := 0; ; n++ {
		// Writes use a context the signal does not cancel: a write begun
		// before SIGTERM lands is exactly what the fence must stop.
		err := store.WithTx(context.Background(), "mailer", baton.Token(token), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO writes (holder, token, n) VALUES (?, ?, ?)`, holder, token, n)
			return err
		})
		if errors.Is(err, baton.ErrStaleToken) {
			fmt.Println("writer: refused:", err)
			return 77
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			return 1
		}
		select {
		case <-ctx.Done():
			return 0
		case <-pause:
			// Between transactions: no lock of SQLite's is held.
			select {
			case <-cont: // an earlier SIGCONT
			default:
			}
			_ = os.WriteFile(filepath.Join(filepath.Dir(path), "paused-"+holder), nil, 0o644)
			select {
			case <-ctx.Done():
				return 0
			case <-cont:
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestElect_FrozenLeader starts three `baton elect` on one election: one
// runs its command at a time. The leader (baton and its command) is frozen with
// SIGSTOP past the TTL; another takes over; on SIGCONT the frozen one stops
// its command, and not one of its fenced writes is accepted after the new
// leader's first.
func TestElect_FrozenLeader(t *testing.T) {
	backend := etcdBackend(t)
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "writes.db")
	store := "sqlite:" + dbPath
	if r := runInProcess("fence", "init", "--store", store); r.code != 0 {
		t.Fatal(r.stderr)
	}
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE writes (holder text, token bigint, n int)`); err != nil {
		t.Fatal(err)
	}

	electors := map[string]*execResult{}
	for i := range 3 {
		id := fmt.Sprintf("elector-%d", i)
		p := batonCmd("elect", "--backend", backend, "--ttl", "2s", "--grace", "2s", "--fence", store, "--id", id, "mailer", "--", os.Args[0])
		p.Env = append(p.Env, writerEnv+"="+dbPath)
		electors[id] = startCmd(t, p)
	}
	// One leads and writes: wait for the newest term's third write.
	var first string
	var firstToken int64
	waitFor(t, 30*time.Second, func() bool {
		return db.QueryRow(`SELECT holder, token FROM writes WHERE token = (SELECT max(token) FROM writes) GROUP BY holder, token HAVING count(*) >= 3`).Scan(&first, &firstToken) == nil
	}, func() string { return "no writes" })
	// Exactly one leads at a time. Another elector's command wrote before
	// only if its term ended in a loss its elect reported: a machine
	// stalled past the 2s TTL can lose a lease by accident. A second
	// leader next to it would instead have seen its command refused by
	// this leader's fence, and its elect exit 77 saying nothing of a loss.
	others, err := db.Query(`SELECT DISTINCT holder FROM writes WHERE holder != ?`, first)
	if err != nil {
		t.Fatal(err)
	}
	var before []string
	for others.Next() {
		var h string
		if err := others.Scan(&h); err != nil {
			t.Fatal(err)
		}
		before = append(before, h)
	}
	if err := others.Close(); err != nil {
		t.Fatal(err)
	}
	for _, h := range before {
		p := electors[h]
		waitFor(t, 10*time.Second, func() bool { return lostTerm(p.stderr.String()) }, func() string {
			return fmt.Sprintf("%s and %s both ran their command, and %s lost no lease: %s", h, first, h, p.stderr.String())
		})
		t.Logf("%s led before %s, and lost its lease by accident: %s", h, first, p.stderr.String())
	}
	pidb, err := os.ReadFile(filepath.Join(dir, "pid-"+first))
	if err != nil {
		t.Fatal(err)
	}
	cmdPid, _ := strconv.Atoi(string(pidb))
	electPid := electors[first].cmd.Process.Pid

	// Freeze the leader, baton elect and its command, once the command has
	// paused between two writes (see fencedWriter): frozen inside one, it
	// would hold SQLite's write lock and keep every new leader's fence
	// raise waiting. The kernel stops a process when it next comes to run,
	// so the freeze counts from when both are seen stopped.
	if err := syscall.Kill(cmdPid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, "paused-"+first)); return err == nil },
		func() string { return "the leader's command did not pause" })
	for _, pg := range []int{electPid, cmdPid} {
		if err := syscall.Kill(-pg, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, func() bool { return proc.Stopped(electPid) && proc.Stopped(cmdPid) }, func() string { return "the leader did not stop" })
	frozen := time.Now()
	var second string
	var secondToken int64
	waitFor(t, 30*time.Second, func() bool {
		return db.QueryRow(`SELECT holder, token FROM writes WHERE token > ? ORDER BY rowid LIMIT 1`, firstToken).Scan(&second, &secondToken) == nil
	}, func() string {
		var b strings.Builder
		for id, p := range electors {
			fmt.Fprintf(&b, "\n%s: %s", id, p.stderr.String())
		}
		return "no takeover:" + b.String()
	})
	t.Logf("%s (token %d) frozen; %s took over with token %d after %v", first, firstToken, second, secondToken, time.Since(frozen).Round(time.Millisecond))
	if second == first {
		t.Fatalf("the frozen elector %s wrote with a new token", first)
	}
	for _, pg := range []int{electPid, cmdPid} {
		_ = syscall.Kill(-pg, syscall.SIGCONT)
	}
	// The woken elector notices, stops its command and campaigns again;
	// or, when its command, woken too, exits first (on the fence's
	// refusal), elect sees the loss as the command exited and exits 76,
	// as its help says.
	waitFor(t, 30*time.Second, func() bool { return lostTerm(electors[first].stderr.String()) }, func() string { return electors[first].stderr.String() })
	waitFor(t, 10*time.Second, func() bool { return syscall.Kill(cmdPid, 0) != nil }, func() string { return "the frozen leader's command still runs" })

	var late int
	if err := db.QueryRow(`SELECT count(*) FROM writes WHERE token = ? AND rowid > (SELECT min(rowid) FROM writes WHERE token = ?)`, firstToken, secondToken).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late != 0 {
		t.Fatalf("%d writes with the frozen leader's token %d were accepted after the new leader's first", late, firstToken)
	}
	// From the new leader's first write on, its token alone wrote, unless
	// its own term ended in a loss its elect reported (a stall past the
	// TTL): a token granted beside it, to the woken elector say, is a
	// second leader.
	var after int
	if err := db.QueryRow(`SELECT count(DISTINCT token) FROM writes WHERE rowid >= (SELECT min(rowid) FROM writes WHERE token = ?)`, secondToken).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != 1 && !lostTerm(electors[second].stderr.String()) {
		t.Fatalf("%d tokens wrote from %s's first write on, and %s lost no lease: %s", after, second, second, electors[second].stderr.String())
	}
	// And over the whole run, whoever led when: in the order the store
	// took them, no write carries a token below an earlier write's.
	var back int
	if err := db.QueryRow(`SELECT count(*) FROM writes w WHERE EXISTS (SELECT 1 FROM writes e WHERE e.rowid < w.rowid AND e.token > w.token)`).Scan(&back); err != nil {
		t.Fatal(err)
	}
	if back != 0 {
		t.Fatalf("%d writes were accepted with a token below an earlier write's", back)
	}
}

// lostTerm reports whether an elector's stderr says a term of mailer ended
// in the loss of its lease: seen while the command ran, or as it exited.
func lostTerm(stderr string) bool {
	return strings.Contains(stderr, "leadership of mailer lost") || strings.Contains(stderr, "(found when it exited)")
}

// TestElect_Observe prints each change of leader, including no leader.
func TestElect_Observe(t *testing.T) {
	backend := etcdBackend(t)
	obs := startBaton(t, "elect", "--observe", "--backend", backend, "mailer")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(obs.stdout.String(), "no leader") }, func() string { return obs.stderr.String() })
	r := runBaton(t, "elect", "--backend", backend, "--id", "one-shot", "mailer", "--", "true")
	if r.code != 0 {
		t.Fatalf("elect with a command that ends: exit %d %s", r.code, r.stderr)
	}
	waitFor(t, 30*time.Second, func() bool { return strings.Count(obs.stdout.String(), "no leader") == 2 }, func() string { return obs.stdout.String() })
	lines := strings.Split(strings.TrimSpace(obs.stdout.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "leader one-shot") {
		t.Fatalf("observed %q; want no leader, one-shot, no leader", lines)
	}
	_ = obs.cmd.Process.Signal(syscall.SIGTERM)
	if got := obs.wait(t); got.code != 0 {
		t.Errorf("observer exit %d after SIGTERM; %q", got.code, got.stderr)
	}
}

// TestElect_CampaignFailsAfterLoss: leadership is lost, and the next
// campaigns fail as they do right after a partition (the lock service
// unreachable, then the session found ended): elect says so and campaigns
// again, leads, and exits with its second term's command's 0, instead of
// exiting 69 on the first failure.
func TestElect_CampaignFailsAfterLoss(t *testing.T) {
	running := filepath.Join(t.TempDir(), "running")
	backend := useFake(t, &fakeBackend{
		loseFirstOn: running,
		script: []error{1: &baton.UnavailableError{Where: "fake", Err: errors.New("no answer")},
			2: fmt.Errorf("%w: session ended", baton.ErrLeaseLost)},
	})
	// The first term's command says it runs, which is when the fake loses
	// the lease (lost before the command started, the term would end
	// otherwise), and waits to be stopped; the second's ends.
	r := runInProcess("elect", "--backend", backend, "--grace", "1s", "mailer", "--", "sh", "-c",
		fmt.Sprintf(`[ "$BATON_TOKEN" != 1 ] || { : > %s; exec sleep 60; }`, running))
	t.Log(r.stderr)
	if r.code != 0 {
		t.Fatalf("exit %d, want the second term's command's 0; stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"leadership of mailer lost", "no answer; campaigning again in", "session ended; campaigning again in", "leading mailer (token 2)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %q", want, r.stderr)
		}
	}
}

// TestElect_ExitedThenLostDuringGrace: the command exits by itself (0) and
// leaves a process in its group that outlives SIGTERM; while elect waits
// for it (SIGKILL after --grace), leadership is lost. The command ran to
// its end: elect exits 76 (the help: COMMAND's code, or 76 if leadership
// turns out lost then), and does not campaign again to run it a second
// time, as it did (here the second term's command would exit 5).
func TestElect_ExitedThenLostDuringGrace(t *testing.T) {
	dir := t.TempDir()
	termed, ready := filepath.Join(dir, "termed"), filepath.Join(dir, "ready")
	backend := useFake(t, &fakeBackend{loseFirstOn: termed})
	// The process left behind turns the SIGTERM it gets into the fake's
	// loss: elect sends it only once it has seen the command exit, so the
	// loss comes while elect waits for the rest of the group, however
	// slow the machine. That process outlives the SIGTERM until the fake
	// has made the loss (--grace is only a cap; a minute caps it, should
	// elect never send the SIGTERM), and the command exits
	// only once the trap is in place. The process left behind writes
	// nowhere: elect would wait for the output it could still send.
	script := fmt.Sprintf(`[ "$BATON_TOKEN" = 1 ] || exit 5
(trap ': > %[1]s' TERM; : > %[2]s; i=0; until [ -e %[1]s.lost ] || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done) >/dev/null 2>&1 &
until [ -e %[2]s ]; do sleep 0.01; done`, termed, ready)
	r := runInProcess("elect", "--backend", backend, "--grace", "30s", "mailer", "--", "sh", "-c", script)
	t.Log(r.stderr)
	if strings.Contains(r.stderr, "leading mailer (token 2)") || r.code != exitLeaseLost {
		t.Fatalf("exit %d, want %d without a second term; stderr %q", r.code, exitLeaseLost, r.stderr)
	}
}

// TestElect_RaiseUnanswered_CampaignsAgain: a term whose fence raise the
// store does not answer (here SQLite's write lock is held by another
// connection past the busy timeout) ends: elect releases the lease, pauses
// and campaigns again, and the next term, with the store free again, runs
// the command with its token.
func TestElect_RaiseUnanswered_CampaignsAgain(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "fence.db")
	if r := runInProcess("fence", "init", "--store", "sqlite:"+dbPath); r.code != 0 {
		t.Fatal(r.stderr)
	}
	db, err := sql.Open("sqlite", "file:"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil { // the write lock
		t.Fatal(err)
	}
	var freed error
	electAfterFailedRaise(t, "sqlite:"+dbPath+"?busy_timeout=300ms", func() { _, freed = conn.ExecContext(ctx, "ROLLBACK") }, "write lock")
	if freed != nil {
		t.Fatalf("freeing the write lock: %v", freed)
	}
}

// electAfterFailedRaise runs elect with fence on a fake backend while the
// store keeps the first term's raise from going through; free, called as
// elect campaigns the second time, lets the next raise through. elect
// must end that term, say why (stderr has why), campaign again and run
// the command in the second term.
func electAfterFailedRaise(t *testing.T, fence string, free func(), why string) {
	t.Helper()
	backend := useFake(t, &fakeBackend{onAcquire: func(n int) {
		if n == 1 { // the second campaign: the first term's raise has failed
			free()
		}
	}})
	r := runInProcess("elect", "--backend", backend, "--fence", fence, "mailer", "--", "sh", "-c", `[ "$BATON_TOKEN" = 2 ]`)
	t.Log(r.stderr)
	if r.code != 0 {
		t.Fatalf("elect: exit %d, want 0 from the second term's command (token 2); stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"leading mailer (token 1)", why, "campaigning again in", "leading mailer (token 2)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("elect's stderr lacks %q: %q", want, r.stderr)
		}
	}
}

// TestElect_Retry: which campaign failures elect retries, and its pauses.
func TestElect_Retry(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("campaign: %w", &baton.UnavailableError{Err: errors.New("x")}), true},
		{fmt.Errorf("%w: session ended", baton.ErrLeaseLost), true},
		{&exitError{code: exitInterrupted, msg: "interrupted while waiting for the lock"}, false},
		{fmt.Errorf("%w: x", baton.ErrInvalidOption), false},
		{context.Canceled, false},
		{errors.New("permission denied"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	var b backoff
	prevMax := time.Duration(0)
	for i := range 12 {
		d := b.next()
		ceil := min(backoffMin<<i, backoffMax)
		if d < ceil/2 || d > ceil {
			t.Fatalf("pause %d: %v, want within [%v, %v]", i, d, ceil/2, ceil)
		}
		prevMax = ceil
	}
	if prevMax != backoffMax {
		t.Fatalf("pauses stopped growing at %v, want %v", prevMax, backoffMax)
	}
	b.reset()
	if d := b.next(); d > backoffMin {
		t.Fatalf("after reset: %v, want at most %v", d, backoffMin)
	}
}

// TestElect_StandbySessionLost: a replica that never led, whose campaign
// lost its session (an outage longer than the TTL), held nothing: it
// campaigns again, as a former leader does, and leads. Before, it exited
// 76, and an outage left only the former leader to take over.
func TestElect_StandbySessionLost(t *testing.T) {
	backend := useFake(t, &fakeBackend{script: []error{fmt.Errorf("%w: session ended while acquiring", baton.ErrLeaseLost)}})
	r := runInProcess("elect", "--backend", backend, "mailer", "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "session ended while acquiring; campaigning again in") || !strings.Contains(r.stderr, "leading mailer") {
		t.Fatalf("exit %d, stderr %q; want 0 after campaigning again", r.code, r.stderr)
	}
}

// TestElect_ResignFailed: a resignation the lock service refuses is said
// on one line at any log level: the election may stay held for a TTL.
func TestElect_ResignFailed(t *testing.T) {
	backend := useFake(t, &fakeBackend{releaseErr: &baton.UnavailableError{Where: "fake", Err: errors.New("no answer")}})
	r := runInProcess("elect", "--backend", backend, "mailer", "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, `could not resign (the next leader takes over within the TTL at the latest): release "mailer": fake: no answer`) {
		t.Fatalf("exit %d, stderr %q; want 0 saying the resignation failed", r.code, r.stderr)
	}
}

// TestElect_FenceAhead: a fence raised past every token the lock service
// has given (raised with another service's tokens, or before this one was
// rebuilt) refuses every term's token. elect exits 77 at the first term,
// saying so, instead of campaigning again for ever as after a newer
// leader's raise.
func TestElect_FenceAhead(t *testing.T) {
	backend := etcdBackend(t)
	store := storeAhead(t, "mailer")
	r := runBaton(t, "elect", "--backend", backend, "--fence", store, "mailer", "--", "sh", "-c", "echo ran")
	if r.code != exitStale || !strings.Contains(r.stderr, "still names this lease the holder") || strings.Contains(r.stderr, "campaigning again") {
		t.Fatalf("exit %d, stderr %q; want 77 at the first term, saying the fence is ahead of the lock service", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "ran") {
		t.Fatal("the command ran under a refused token")
	}
}

// TestElect_ObserveOnRedis: on a backend without tokens the leader's line
// shows none (not "token 0"), and an observation the backend gives up on
// (the server killed) ends with exit 69 and one line, as a service that is
// unreachable from the start does, saying why (the backend's warning,
// held back for it).
func TestElect_ObserveOnRedis(t *testing.T) {
	srv := testsvc.StartRedis(t)
	obs := startBaton(t, "elect", "--observe", "--backend", srv.URL(), "mailer")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(obs.stdout.String(), "no leader") }, func() string { return obs.stderr.String() })
	if r := runBaton(t, "elect", "--backend", srv.URL(), "--id", "one-shot", "mailer", "--", "true"); r.code != 0 || !strings.Contains(r.stderr, "baton: leading mailer\n") {
		t.Fatalf("elect with a command that ends: exit %d %q; want it leading, with no token shown", r.code, r.stderr)
	}
	waitFor(t, 30*time.Second, func() bool { return strings.Count(obs.stdout.String(), "no leader") == 2 }, func() string { return obs.stdout.String() })
	lines := strings.Split(strings.TrimSpace(obs.stdout.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "leader one-shot") {
		t.Fatalf("observed %q; want no leader, one-shot (no token), no leader", lines)
	}

	srv.Kill()
	r := obs.wait(t)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "observation of mailer ended: Redis did not answer") {
		t.Fatalf("observer exit %d, stderr %q, after the server was killed; want 69, saying why the observation ended", r.code, r.stderr)
	}
	oneLine(t, r)
}

// TestElect_ObserveOnRedlock: Redlock cannot be observed; elect --observe
// says so on one line, with the backends that can, and exits 2, before it
// connects: with its nodes up or down.
func TestElect_ObserveOnRedlock(t *testing.T) {
	closed := testsvc.ClosedPort(t)
	for what, backend := range map[string]string{
		"nodes up":   "redlock://" + strings.Join(testsvc.RedisAddrs(testsvc.StartRedisNodes(t, 3)), ","),
		"nodes down": fmt.Sprintf("redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", closed, closed+1, closed+2),
	} {
		r := runInProcess("elect", "--observe", "--backend", backend, "mailer")
		if r.code != exitUsage || !strings.Contains(r.stderr, "cannot report changes of leader; observe on etcd, zk, redis or postgres") {
			t.Errorf("%s: exit %d, stderr %q; want 2, naming the backends that can be observed", what, r.code, r.stderr)
		}
		oneLine(t, r)
	}
}

// TestPrintTerm_LeaderNotPrintable: elect --observe prints a term on one
// line, a leader that is not printable quoted, with or without a token;
// --json gives the leader as it is.
func TestPrintTerm_LeaderNotPrintable(t *testing.T) {
	const leader = "evil\nnightly  leader x  token 99"
	for _, token := range []baton.Token{0, 7} {
		var b strings.Builder
		if err := printTerm(&b, false, baton.Term{Election: "nightly", Leader: leader, Token: token}); err != nil {
			t.Fatal(err)
		}
		if out := b.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, strconv.Quote(leader)) {
			t.Errorf("token %d: %q; want one line, the leader quoted", token, out)
		}
		b.Reset()
		if err := printTerm(&b, true, baton.Term{Election: "nightly", Leader: leader, Token: token}); err != nil {
			t.Fatal(err)
		}
		var j struct{ Leader string }
		if err := json.Unmarshal([]byte(b.String()), &j); err != nil || j.Leader != leader {
			t.Errorf("token %d, --json: %q (%v); want the leader as it is", token, b.String(), err)
		}
	}
}

// TestElect_LostThenSignaled: leadership is lost while the command runs,
// and the command lets the SIGTERM that follows pass; then baton itself
// gets SIGTERM, passes it on, and the command exits 3 on this second one.
// elect campaigns no more, and exits 76, the loss, not the command's 3.
func TestElect_LostThenSignaled(t *testing.T) {
	backend := etcdBackend(t)
	started := filepath.Join(t.TempDir(), "started")
	run := startBaton(t, "elect", "--backend", backend, "--grace", "60s", "mailer", "--", "sh", "-c",
		fmt.Sprintf(`n=0; trap 'n=$((n+1)); [ $n -ge 2 ] && exit 3' TERM; touch %s; while :; do sleep 60 & wait $!; done`, started))
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, func() string { return run.stderr.String() })
	if r := runBaton(t, "release", "--force", "--backend", backend, "mailer"); r.code != 0 {
		t.Fatalf("release --force: %d %s", r.code, r.stderr)
	}
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(run.stderr.String(), "sent SIGTERM to") }, func() string { return run.stderr.String() })
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := run.wait(t); r.code != exitLeaseLost {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, exitLeaseLost, r.stderr)
	}
}

// TestEndReason: the handler elect --observe logs through holds back a
// backend's warning that the observation ended, whatever the log level,
// also from a logger made With attributes, and keeps the first reason with
// its error (none comes once the observation's ctx has ended); other
// records pass as the log level says.
func TestEndReason(t *testing.T) {
	var out strings.Builder
	base := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelError})
	e := &endReason{Handler: base, held: &heldReason{}}
	l := slog.New(e)
	l.Warn("some other warning")
	l.Error("an error")
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	obsend.Warn(ended, l, "the caller's end, which is no news")
	obsend.Warn(context.Background(), l.With("client", "x"), "the server went away", "election", "job", "err", errors.New("EOF"))
	obsend.Warn(context.Background(), l, "a later reason")
	if got, want := e.reason(), "the server went away: EOF"; got != want {
		t.Errorf("reason %q; want %q", got, want)
	}
	if s := out.String(); !strings.Contains(s, "an error") || strings.Contains(s, "some other warning") || strings.Contains(s, obsend.Prefix) {
		t.Errorf("printed %q; want the error only", s)
	}
}

// TestElect_StandbyOutage: a standby whose campaign fails because the lock
// service stopped answering (a Redis restart) campaigns again, as the
// help says, instead of exiting 69 and leaving fewer replicas to take
// over: it did so until it had led once.
func TestElect_StandbyOutage(t *testing.T) {
	backend := useFake(t, &fakeBackend{script: []error{&baton.UnavailableError{Where: "fake", Err: errors.New("no answer")}}})
	r := runInProcess("elect", "--backend", backend, "mailer", "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "no answer; campaigning again in") || !strings.Contains(r.stderr, "leading mailer") {
		t.Fatalf("exit %d, stderr %q; want 0 after campaigning again", r.code, r.stderr)
	}
}

// TestRelease_Interrupted: a forced release interrupted while the lock
// service has not answered may have freed the lock all the same: baton
// exits 130 and says to look before forcing again (forcing again could
// free the next holder's lock). It exited 1 with "interrupt signal
// received" alone.
func TestRelease_Interrupted(t *testing.T) {
	b := forceFake{fakeBackend: &fakeBackend{}, started: make(chan struct{})}
	backend := useFake(t, b)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-b.started
		cancel(signalCause{syscall.SIGINT})
	}()
	var out, errb syncbuf.Buffer
	code := run(ctx, []string{"release", "--backend", backend, "--force", "invoices"}, &out, &errb)
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	if r.code != exitInterrupted || !strings.Contains(r.stderr, "interrupted while freeing invoices") || !strings.Contains(r.stderr, "may have been freed all the same: look with baton status before forcing again") {
		t.Fatalf("exit %d, stderr %q; want %d saying the lock may be freed", r.code, r.stderr, exitInterrupted)
	}
	oneLine(t, r)
}

// TestElect_LeftRunning_NoNewTerm: elect runs as another user than a
// process of its command's group (as when COMMAND is sudo -u svc ...,
// here a root process that joined the group), which it may not signal.
// When leadership is lost, that process outlives SIGKILL: elect exits 76
// saying so, instead of campaigning again and starting a second COMMAND
// beside it.
func TestElect_LeftRunning_NoNewTerm(t *testing.T) {
	electLeftRunning(t, false)
}

// TestElect_LeftRunning_Hidden: as TestElect_LeftRunning_NoNewTerm, with
// /proc mounted hidepid=2 where elect runs, so that it cannot see the root
// process in its command's group either. It asks the kernel (kill with
// signal 0 says EPERM), and exits 76 all the same.
func TestElect_LeftRunning_Hidden(t *testing.T) {
	for _, tool := range []string{"unshare", "setpriv", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (util-linux), to run elect with /proc mounted hidepid=2: %v", tool, err)
		}
	}
	if os.Geteuid() == 0 {
		// A mount namespace of its own may be refused (a container
		// without CAP_SYS_ADMIN): say so instead of failing.
		if out, err := exec.Command("unshare", "-m", "--propagation", "private", "mount", "-t", "proc", "-o", "hidepid=2", "proc", "/proc").CombinedOutput(); err != nil {
			t.Skipf("cannot mount /proc hidepid=2 in a mount namespace of its own here (%v: %s)", err, bytes.TrimSpace(out))
		}
	}
	electLeftRunning(t, true)
}

// electLeftRunning runs elect as user nobody, its /proc mounted hidepid=2
// when hidden, with a root process in its command's group, then takes the
// leadership away: elect must exit 76 without leading again.
func electLeftRunning(t *testing.T, hidden bool) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run baton as another user than a process of its command's group")
	}
	backend := etcdBackend(t)
	// A copy of this binary that user nobody may run, in a directory it may
	// write its command's pid to.
	// Only the two directories t.TempDir made are opened up (t.TempDir is
	// TMPDIR/TestName.../NNN); every directory above them must already let
	// nobody through.
	dir := t.TempDir()
	if parent := filepath.Dir(dir); filepath.Dir(parent) != filepath.Clean(os.TempDir()) {
		t.Fatalf("t.TempDir() = %s, not two levels under %s", dir, os.TempDir())
	} else if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Clean(os.TempDir()); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("user nobody cannot pass through %s (%v), above the test's temp dir: set TMPDIR to a directory it can reach", d, err)
		}
		if d == "/" {
			break
		}
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "baton")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pid")
	args := []string{bin, "elect", "--backend", backend, "--grace", "1s", "--id", "nobody-1", "mailer", "--",
		"sh", "-c", fmt.Sprintf(`echo $$ > %s; exec sleep 600`, pidFile)}
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if hidden {
		// unshare mounts /proc for elect alone, as root, then setpriv
		// becomes nobody.
		args = append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c",
			`mount -t proc -o hidepid=2 proc /proc && exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"`, "sh"}, args...)
		attr.Credential = nil
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), mainEnv+"=1", "GORACE=atexit_sleep_ms=20")
	cmd.SysProcAttr = attr
	p := startCmd(t, cmd)
	var pgid int
	waitFor(t, 20*time.Second, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return false
		}
		pgid, err = syscall.Getpgid(pid)
		return err == nil
	}, func() string { return "elect did not run its command: " + p.stderr.String() })
	// A root process in the command's group: elect (nobody) may not signal it.
	root := exec.Command("sleep", "600")
	root.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	if err := root.Start(); err != nil {
		t.Fatalf("start a root process in the command's group %d: %v", pgid, err)
	}
	t.Cleanup(func() { _ = root.Process.Kill(); _ = root.Wait() })

	if r := runInProcess("release", "--backend", backend, "--force", "mailer"); r.code != 0 {
		t.Fatalf("release --force: exit %d, stderr %q", r.code, r.stderr)
	}
	r := p.wait(t)
	t.Log(r.stderr)
	if r.code != exitLeaseLost || !strings.Contains(r.stderr, "1 process of sh still running after SIGKILL") || !strings.Contains(r.stderr, "not campaigning again") {
		t.Errorf("exit %d, stderr %q; want %d saying a process was left and elect does not campaign again", r.code, r.stderr, exitLeaseLost)
	}
	if n := strings.Count(r.stderr, "leading mailer"); n != 1 {
		t.Errorf("elect led %d times; want one term, none beside what was left of it", n)
	}
}

// TestRun_IDStartingWithDash: a holder name that starts with '-' but names
// no flag is taken (--id=-worker); one that is a flag of the command is
// refused as a missing value (TestRun_BadInput).
func TestRun_IDStartingWithDash(t *testing.T) {
	backend := useFake(t, &fakeBackend{})
	r := runInProcess("run", "--backend", backend, "--id=-worker", "invoices", "--", "sh", "-c", `test "$BATON_HOLDER" = -worker`)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q; want the command run as holder -worker", r.code, r.stderr)
	}
}
