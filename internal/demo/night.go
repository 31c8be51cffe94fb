package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/examples/warehouse"
	"github.com/baton-go/baton/internal/proc"
	"github.com/baton-go/baton/internal/syncbuf"
)

// Config describes one night.
type Config struct {
	Etcd     string        // etcd endpoint both runners use
	Ledger   string        // ledger URL both runners write to
	Fenced   bool          // runners write through the fence
	TTL      time.Duration // lease TTL; default 2s
	Clients  int           // default 10
	Interval time.Duration // per client; default 300ms
	Month    string        // default 2026-10
	// FreezeAfter is how many clients runner 1 bills before it is frozen
	// (before its next write; fenced, after its lease check). Default 3.
	FreezeAfter int
	// WakeAfter is how many clients runner 2 handles before runner 1 is
	// woken. Default 2.
	WakeAfter int
	// Command makes the command that starts a runner process with args;
	// Night sets its process group, output and death signal.
	Command func(args []string) *exec.Cmd
	// Log, when set, receives every event as it happens.
	Log func(warehouse.Event)
}

func (c *Config) defaults() {
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.Clients == 0 {
		c.Clients = 10
	}
	if c.Interval == 0 {
		c.Interval = 300 * time.Millisecond
	}
	if c.Month == "" {
		c.Month = "2026-10"
	}
	if c.FreezeAfter == 0 {
		c.FreezeAfter = 3
	}
	if c.WakeAfter == 0 {
		c.WakeAfter = 2
	}
}

// Result is what happened, from the runners' events and the database.
type Result struct {
	Token1      baton.Token   // runner 1's token
	Token2      baton.Token   // runner 2's token
	Takeover    time.Duration // from the freeze to runner 2 holding the lock
	Frozen      time.Duration // how long runner 1 was frozen
	StaleWrites []int         // clients runner 1 billed after runner 2 took over
	// StaleSkipped has the clients runner 1 wrote after waking whose
	// write reached the database and was turned away there by the primary
	// key: on the fenced night, writes the fence should have refused.
	StaleSkipped []int
	// FirstWake is runner 1's first write after waking, whatever came of
	// it (billed, skipped or rejected); nil when it wrote nothing.
	FirstWake *warehouse.Event
	Rejected  *warehouse.Event // runner 1's first write the fence refused
	// Duplicates has a client for each second invoice a runner wrote for
	// it that reached the database and was turned away there by the
	// primary key (client_id, month): the insert did nothing ("skipped").
	// Without that key each would be a second bill. A write the fence
	// refused never reaches the key and is not counted. In client order.
	Duplicates  []int
	Billed      map[int]baton.Token // client -> token that billed it, read from the database
	Runner1Exit int
	Runner2Exit int
	// FreezeAfter and Clients are the night's, defaults filled in.
	FreezeAfter int
	Clients     int
}

// FenceHeld reports, from the database and the runners' events, whether a
// fenced night went as the fence promises, and an error naming each thing
// that did not: runner 2's token is above runner 1's, runner 1's write on
// waking was refused and none after it reached the database, the ledger
// has runner 1's token for the clients it billed before the freeze and
// runner 2's for every other, and runner 1 exited with a failure (its
// lease was lost) while runner 2 succeeded.
func (r *Result) FenceHeld() error {
	var errs []error
	if r.Token2 <= r.Token1 {
		errs = append(errs, fmt.Errorf("runner 2's token %d is not above runner 1's %d", r.Token2, r.Token1))
	}
	switch {
	case r.FirstWake == nil:
		errs = append(errs, errors.New("runner 1 wrote nothing after waking: the fence was never put to the test"))
	case r.FirstWake.Kind != "rejected":
		errs = append(errs, fmt.Errorf("runner 1's first write after waking (client %d) was %s, not refused by the fence", r.FirstWake.Client, r.FirstWake.Kind))
	case r.FirstWake.Token != r.Token1 || r.FirstWake.Newest != r.Token2:
		errs = append(errs, fmt.Errorf("the fence refused token %d for having seen %d; want runner 1's %d refused for runner 2's %d", r.FirstWake.Token, r.FirstWake.Newest, r.Token1, r.Token2))
	}
	if len(r.StaleWrites) > 0 {
		errs = append(errs, fmt.Errorf("runner 1 billed clients %v after the takeover", r.StaleWrites))
	}
	if len(r.StaleSkipped) > 0 {
		errs = append(errs, fmt.Errorf("runner 1's writes of clients %v reached the database after the takeover (the primary key turned them away)", r.StaleSkipped))
	}
	for c := 1; c <= r.Clients; c++ {
		want, who := r.Token2, "runner 2"
		if c <= r.FreezeAfter {
			want, who = r.Token1, "runner 1"
		}
		if got, ok := r.Billed[c]; !ok {
			errs = append(errs, fmt.Errorf("the ledger has no invoice for client %d", c))
		} else if got != want {
			errs = append(errs, fmt.Errorf("the ledger has client %d billed with token %d, want %s's %d", c, got, who, want))
		}
	}
	if r.Runner1Exit == 0 {
		errs = append(errs, errors.New("runner 1 exited 0: it did not learn that its lease was lost"))
	}
	if r.Runner2Exit != 0 {
		errs = append(errs, fmt.Errorf("runner 2 exited %d", r.Runner2Exit))
	}
	return errors.Join(errs...)
}

// runner is one runner process and its event stream.
type runner struct {
	name   string        // its name in the events, and its lock holder's
	ttl    time.Duration // its lease's TTL
	cmd    *exec.Cmd
	events chan warehouse.Event
	exited chan struct{}
	exit   int
	stderr syncbuf.Buffer
	stop   chan struct{} // closed by kill: no one reads events any more
	once   sync.Once
	// goAhead is the runner's stdin: the line it waits for at PauseAt.
	goAhead io.WriteCloser
}

func start(ctx context.Context, cfg *Config, name string, pauseAt int) (*runner, error) {
	args := RunnerArgs{Etcd: cfg.Etcd, Ledger: cfg.Ledger, Name: name, Fenced: cfg.Fenced, TTL: cfg.TTL,
		Clients: cfg.Clients, Interval: cfg.Interval, Month: cfg.Month, PauseAt: pauseAt}.Args()
	r := &runner{name: name, ttl: cfg.TTL, cmd: cfg.Command(args), events: make(chan warehouse.Event, 64), exited: make(chan struct{}), stop: make(chan struct{})}
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r.cmd.Stderr = &r.stderr
	in, err := r.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	r.goAhead = in
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		defer close(r.exited)
		defer close(r.events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e warehouse.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				select {
				case r.events <- e:
				case <-r.stop: // drop it: the reader must get to Wait
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = r.cmd.Wait()
		r.exit = r.cmd.ProcessState.ExitCode()
	}()
	return r, nil
}

func (r *runner) signal(sig syscall.Signal) error {
	return syscall.Kill(-r.cmd.Process.Pid, sig) // the whole process group
}

// waitStopped waits until the runner's process is stopped (state T in
// /proc), it exits, or ctx ends.
func (r *runner) waitStopped(ctx context.Context) error {
	for {
		if proc.Stopped(r.cmd.Process.Pid) {
			return nil
		}
		select {
		case <-r.exited:
			return fmt.Errorf("it exited (%d) instead: %s", r.exit, strings.TrimSpace(r.stderr.String()))
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Millisecond):
		}
	}
}

func (r *runner) kill() {
	r.once.Do(func() { close(r.stop) })
	_ = r.signal(syscall.SIGCONT)
	_ = r.signal(syscall.SIGKILL)
	<-r.exited
}

// Night runs runner 1, starts runner 2 queued behind it, freezes runner 1,
// lets runner 2 take over, wakes runner 1 while runner 2 is still billing,
// and reports what reached the database.
func Night(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	res := &Result{FreezeAfter: cfg.FreezeAfter, Clients: cfg.Clients}
	var mu sync.Mutex
	var events []warehouse.Event // in the order this process read them
	record := func(e warehouse.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		if cfg.Log != nil {
			cfg.Log(e)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	pauseAt := cfg.FreezeAfter + 1 // the client runner 1 is frozen on, after its check
	r1, err := start(ctx, &cfg, "runner-1", pauseAt)
	if err != nil {
		return nil, err
	}
	defer r1.kill()
	// 1. Runner 1 bills FreezeAfter clients; freeze it as it starts on the
	// next (fenced, after its lease check), before the write.
	if _, err := next(ctx, r1, record, func(e warehouse.Event) bool {
		if e.Kind == "acquired" {
			res.Token1 = e.Token
		}
		return e.Kind == "checked" && e.Client == pauseAt // where it waits
	}); err != nil {
		return nil, fmt.Errorf("runner 1 before the freeze: %w", err)
	}

	// 2. Runner 2 starts while runner 1 waits there, and queues for the
	// lock behind it, so that the takeover measured from the freeze is
	// the lease running out and runner 2 hearing of it, not also runner
	// 2's start and dial. Runner 2 in turn waits after its check of the
	// client runner 1 was frozen on, until runner 1's write of that
	// client is done (unless WakeAfter has runner 2 handle that client
	// before runner 1 wakes): the woken runner's write comes first, as
	// the interval it has in hand makes it do on an idle machine,
	// however slowly runner 1 comes back on a loaded one.
	pause2 := pauseAt
	if cfg.WakeAfter >= pauseAt {
		pause2 = 0
	}
	r2, err := start(ctx, &cfg, "runner-2", pause2)
	if err != nil {
		return nil, err
	}
	defer r2.kill()
	var goAhead2 sync.Once
	letRunner2On := func() {
		goAhead2.Do(func() {
			if pause2 != 0 {
				_, _ = io.WriteString(r2.goAhead, "go\n") // fails only once runner 2 is gone
			}
		})
	}
	if err := queued(ctx, cfg.Etcd, r1, r2, record); err != nil {
		return nil, fmt.Errorf("runner 2 queueing for the lock: %w", err)
	}

	if err := r1.signal(syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("freeze runner 1: %w", err)
	}
	// The kernel stops a process when it next comes to run, not at the
	// kill: until it is seen stopped it may still read the go-ahead below.
	if err := r1.waitStopped(ctx); err != nil {
		return nil, fmt.Errorf("freeze runner 1: %w", err)
	}
	frozen := time.Now()
	record(warehouse.Event{At: frozen, Runner: "runner-1", Kind: "frozen"})
	// Runner 1 waits for this line after its check (PauseAt): it reads it
	// only once woken, so it cannot have written since the check.
	if _, err := io.WriteString(r1.goAhead, "go\n"); err != nil {
		return nil, fmt.Errorf("tell runner 1 to go on once woken: %w", err)
	}

	// 3. Runner 2 takes over.
	handled := 0
	if _, err := next(ctx, r2, record, func(e warehouse.Event) bool {
		switch e.Kind {
		case "acquired":
			res.Token2 = e.Token
			res.Takeover = e.At.Sub(frozen)
		case "billed", "skipped":
			handled++
		}
		return handled == cfg.WakeAfter
	}); err != nil {
		return nil, fmt.Errorf("runner 2 taking over: %w", err)
	}

	// 4. Wake runner 1 while runner 2 is still billing.
	if err := r1.signal(syscall.SIGCONT); err != nil {
		return nil, fmt.Errorf("wake runner 1: %w", err)
	}
	woke := time.Now()
	res.Frozen = woke.Sub(frozen)
	record(warehouse.Event{At: woke, Runner: "runner-1", Kind: "woken"})

	// 5. Let both finish; runner 2 goes on past the client runner 1 was
	// frozen on once runner 1's write of it is done, or runner 1 is.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, r := range []*runner{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = next(ctx, r, record, func(e warehouse.Event) bool {
				if r == r1 && e.Client == pauseAt && written(e.Kind) {
					letRunner2On()
				}
				return false
			})
			if r == r1 {
				letRunner2On()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, errExited) {
			return nil, err
		}
	}
	<-r1.exited
	<-r2.exited
	res.Runner1Exit, res.Runner2Exit = r1.exit, r2.exit

	// Runner 1 emits nothing while frozen, so every event of its read after
	// the freeze happened after it woke. (Its timestamps cannot tell: it may
	// write before this process has read the clock after SIGCONT.)
	afterFreeze := false
	for _, e := range events {
		if e.Runner == "runner-2" && (e.Kind == "lost" || e.Kind == "released") {
			// Not what the night is about, nor a fault of the fence's:
			// runner 2 held its lease until a stall ended it.
			return nil, fmt.Errorf("runner 2 lost its lease while billing (was the machine stalled past the %v TTL?); run the demo again", cfg.TTL)
		}
		if e.Kind == "skipped" {
			res.Duplicates = append(res.Duplicates, e.Client)
		}
		if e.Runner != "runner-1" {
			continue
		}
		if e.Kind == "frozen" {
			afterFreeze = true
			continue
		}
		if !afterFreeze {
			continue
		}
		if res.FirstWake == nil && written(e.Kind) {
			res.FirstWake = &e
		}
		switch e.Kind {
		case "billed":
			res.StaleWrites = append(res.StaleWrites, e.Client)
		case "skipped":
			res.StaleSkipped = append(res.StaleSkipped, e.Client)
		case "rejected":
			if res.Rejected == nil {
				res.Rejected = &e
			}
		}
	}

	slices.Sort(res.Duplicates)

	// 6. Ask the database who billed each client. (Asking it for clients
	// billed twice would be asking the primary key whether it works: the
	// second invoices it turned away are counted above instead.)
	ledger, err := warehouse.OpenLedger(ctx, cfg.Ledger)
	if err != nil {
		return nil, err
	}
	defer ledger.Close()
	if res.Billed, err = ledger.Billed(ctx, cfg.Month); err != nil {
		return nil, fmt.Errorf("read invoices: %w", err)
	}
	return res, nil
}

var errExited = errors.New("runner exited")

// written reports whether an event of kind ends a runner's write of a
// client, whatever came of it. (An error event ends the runner's events:
// see next.)
func written(kind string) bool {
	switch kind {
	case "billed", "skipped", "rejected":
		return true
	}
	return false
}

// queued waits until waiter queues for the job's lock behind holder, as
// etcd (at endpoints) shows it. It fails at once when waiter holds the lock
// instead (holder lost it before the freeze: the machine stalled past the
// TTL), or exits (with the error it reported, its events recorded), or
// when ctx ends.
func queued(ctx context.Context, endpoints string, holder, waiter *runner, record func(warehouse.Event)) error {
	locker, err := etcd.Dial(ctx, strings.Split(endpoints, ","))
	if err != nil {
		return err
	}
	defer locker.Close()
	insp, ok := locker.Locker().Backend().(baton.Inspector)
	if !ok {
		return errors.New("etcd cannot list its locks")
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		infos, err := insp.Inspect(ctx, warehouse.Job)
		if err != nil {
			return err
		}
		if len(infos) == 1 {
			switch infos[0].Holder {
			case holder.name:
				if infos[0].Waiters > 0 {
					return nil
				}
			case waiter.name:
				return fmt.Errorf("%s holds the lock before %s was frozen: %s lost it early (was the machine stalled past the %v TTL?); run the demo again", waiter.name, holder.name, holder.name, holder.ttl)
			}
		}
		select {
		case <-waiter.exited:
			_, err := next(ctx, waiter, record, func(warehouse.Event) bool { return false })
			return err
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// next reads r's events until until returns true (returning that event),
// the runner exits (errExited), or ctx ends.
func next(ctx context.Context, r *runner, record func(warehouse.Event), until func(warehouse.Event) bool) (warehouse.Event, error) {
	for {
		select {
		case <-ctx.Done():
			return warehouse.Event{}, fmt.Errorf("%w (runner stderr: %s)", context.Cause(ctx), strings.TrimSpace(r.stderr.String()))
		case e, ok := <-r.events:
			if !ok {
				<-r.exited
				return warehouse.Event{}, fmt.Errorf("%w with status %d", errExited, r.exit)
			}
			record(e)
			if e.Kind == "error" {
				return e, fmt.Errorf("%s: %s", e.Runner, e.Err)
			}
			if until(e) {
				return e, nil
			}
		}
	}
}
