package redis_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/rounds"
	"github.com/baton-go/baton/internal/testsvc"
	"github.com/baton-go/baton/redis"
)

// holderEnv carries a holder process's arguments: this test binary,
// re-executed, takes a lock and holds it until the lease ends.
const holderEnv = "BATON_TEST_REDIS_HOLDER"

type holderArgs struct {
	Addr string
	Name string
	TTL  time.Duration
}

// holderMain takes the lock, says "held KEY", and waits for the lease to
// end; it says "lost ERR" and exits 3 when it is lost, or exits 2 on an
// error or after a minute.
func holderMain(raw string) int {
	var a holderArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		fmt.Println("error", err)
		return 2
	}
	c := goredis.NewClient(&goredis.Options{Addr: a.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	l, err := redis.New(c, baton.WithTTL(a.TTL), baton.WithHolder("frozen-holder"))
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := l.Acquire(ctx, a.Name)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	fmt.Println("held", lease.Key())
	select {
	case <-lease.Done():
		fmt.Println("lost", strings.ReplaceAll(lease.Err().Error(), "\n", " "))
		return 3
	case <-ctx.Done():
		return 2
	}
}

// TestHolderProcess_SIGSTOP freezes a holder process (the guide's
// suspended VM) past its TTL. A waiter takes over within 200ms of the
// key's expiry; the holder, thawed, reports the lease lost at once (its
// local deadline passed while it was stopped), and the new holder's key is
// left alone. A stall of a loaded machine can hold the waiter's look at
// the expiry up past the 200ms: such a round, late by less than half the
// waiter's 10s timed look, runs again, on a lock name and holder process
// of its own. A waiter that looks only on its timer fails at once.
func TestHolderProcess_SIGSTOP(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	cli := client(t, srv.Addr)
	// The waiter's own TTL is long: it looks again every 10s, so only its
	// look at the key's expiry (as first waiter) can take over in time.
	waiter := newLocker(t, srv.Addr, baton.WithTTL(30*time.Second), baton.WithHolder("waiter"))
	rounds.Run(t, 3, func(round int) error {
		return holderSIGSTOPOnce(t, srv.Addr, cli, waiter, fmt.Sprintf("invoices-%d", round))
	})
}

// holderSIGSTOPOnce is one round of TestHolderProcess_SIGSTOP on the lock
// name. It returns an error when the waiter took over more than 200ms
// after the key's expiry, having checked nothing more; it fails t on any
// other miss.
func holderSIGSTOPOnce(t *testing.T, addr string, cli *goredis.Client, waiter *baton.Locker, name string) error {
	const ttl = time.Second
	args, _ := json.Marshal(holderArgs{Addr: addr, Name: name, TTL: ttl})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+string(args))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}()
	line := <-lines
	key, ok := strings.CutPrefix(line, "held ")
	if !ok {
		t.Fatalf("holder process said %q, want held KEY", line)
	}

	got := make(chan *baton.Lease, 1)
	go func() {
		lw, err := waiter.Acquire(timeout(t, 20*time.Second), name)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- lw
	}()
	waitQueued(t, cli, key, 1)

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	pttl := cli.PTTL(timeout(t, time.Second), key).Val()
	expiry := time.Now().Add(pttl) // by our clock; the server's runs at the same rate
	lw := <-got
	if lw == nil {
		t.FailNow()
	}
	defer lw.Release(context.Background())
	took := time.Now()
	t.Logf("holder frozen at 0; its key expired at +%v (PTTL %v); waiter held at +%v: %v after the expiry",
		expiry.Sub(stopped).Round(time.Millisecond), pttl, took.Sub(stopped).Round(time.Millisecond), took.Sub(expiry).Round(time.Millisecond))
	if late := took.Sub(expiry); late > 200*time.Millisecond {
		err := fmt.Errorf("waiter took over %v after the key expired, want within 200ms", late)
		// Less than half the way to the waiter's timed look (10s): a
		// stall, and the round runs again; a look at the expiry missed,
		// even now and then, lands at the timed look and fails at once.
		if late < waiter.Config().RenewEvery/2 {
			return err
		}
		t.Fatal(err)
	}

	// Thaw the holder: its next renewal is refused, it reports the loss.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	select {
	case line := <-lines:
		// The monotonic clock ran on while it was stopped, so it finds its
		// local deadline passed before its renewal is even refused.
		if !strings.HasPrefix(line, "lost ") {
			t.Errorf("thawed holder said %q, want lost", line)
		}
		t.Logf("thawed holder: %s", line)
	case <-time.After(10 * time.Second):
		t.Fatal("thawed holder did not report the loss within 10s")
	}
	if err := <-exited; err == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("holder exit: %v, want code 3", err)
	}
	exited <- nil // for the deferred cleanup
	v := cli.Get(timeout(t, time.Second), key).Val()
	if !strings.HasSuffix(v, " waiter") || lw.Err() != nil {
		t.Errorf("after the old holder woke and exited: key %q, waiter's lease err %v; want the waiter's, held", v, lw.Err())
	}
	return nil
}
