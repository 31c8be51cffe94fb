package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backends"
	"github.com/baton-go/baton/fence"
)

// defaultBackend is used when neither --backend nor BATON_BACKEND is set;
// `baton serve` serves it.
const defaultBackend = "etcd://127.0.0.1:2379"

type runFlags struct {
	backend string
	ttl     time.Duration
	ttlSet  bool // --ttl given: it then overrides a ttl= in the URL
	wait    time.Duration
	grace   time.Duration
	fence   string
	once    string
	id      string
}

func newRun(g *globals) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] NAME -- COMMAND [ARGS...]",
		Short: "Run a command while holding the lock NAME",
		Long: `run takes the lock NAME, runs COMMAND while renewing the lease, and releases
the lock when COMMAND exits: like 'etcdctl lock NAME -- COMMAND', on any
backend, with fencing. Put it in the crontab of every server; one runs the
job, the others exit 75.

COMMAND runs in its own process group with BATON_LOCK, BATON_HOLDER and, on
fenced backends (etcd, zk, postgres), BATON_TOKEN, the fencing token; on etcd
also ETCD_LOCK_KEY and ETCD_LOCK_REV, as etcdctl lock sets them. If the lease
is lost while COMMAND runs, its process group gets SIGTERM at once and
SIGKILL after --grace. SIGINT, SIGTERM and SIGHUP sent to baton while COMMAND
runs are passed on to its process group, and baton then exits with COMMAND's
code; any of them while baton still waits for the lock makes it exit 130.

With --fence, the fence for NAME in that store is raised to the token before
COMMAND starts: from then on no older holder can write through it. With
--once RUN_ID, a run already marked done in the fence store is skipped, and
a run whose COMMAND exits 0 is marked done (fenced: a stale holder cannot).

--wait defaults to 0, one attempt: replicas started by cron at the same time
should not queue up and run the job again after the winner.

Exit codes:
  COMMAND's own  COMMAND ran to the end holding the lease (128+N if killed by signal N)
  75             not acquired within --wait (another holder has it)
  76             the lease was lost while COMMAND ran
  77             the fence refused the token (a newer holder exists)
  69             the lock service or fence store is unreachable
  127            COMMAND could not be started (not found, not executable)
  130            interrupted (SIGINT, SIGTERM or SIGHUP) while waiting for the lock
  2              usage error
  1              any other failure (such as a fence store without baton's tables)`,
		Example: `  # every server's crontab: the first to start bills, the others exit 75
  0 2 * * *  baton run --backend etcd://10.0.0.1:2379,10.0.0.2:2379 invoices -- ./invoices.sh

  # fenced, and at most once per night even across retries
  baton run --fence postgres://app@db/billing --once "$(date +%F)" invoices -- ./invoices.sh

  # wait up to a minute for the lock
  baton run --wait 1m stock -- ./rebuild-stock-report`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(args) == 0:
				return usageError("run needs a lock name and a command: baton run NAME -- COMMAND [ARGS...]")
			case dash < 0:
				return usageError("put -- between the lock name and the command: baton run %s -- COMMAND [ARGS...]", args[0])
			case dash != 1:
				return usageError("give exactly one lock name before --, got %d: %q", dash, args[:dash])
			case len(args) == 1:
				return usageError("no command after --: baton run %s -- COMMAND [ARGS...]", args[0])
			}
			f.ttlSet = cmd.Flags().Changed("ttl")
			return runLocked(cmd.Context(), g, f, args[0], args[1:], cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.backend, "backend", envOr("BATON_BACKEND", defaultBackend), "lock service URL: etcd://h:p[,h:p], zk://h:p/root, postgres://..., redis://h:p/db, redlock://h:p,h:p,h:p (env BATON_BACKEND)")
	fl.DurationVar(&f.ttl, "ttl", 15*time.Second, "lease time to live: how soon another server can take over after this one dies (overrides the URL's ttl=)")
	fl.DurationVar(&f.wait, "wait", 0, "how long to wait for the lock; 0 makes one attempt")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the lease is lost")
	fl.StringVar(&f.fence, "fence", "", "fence store URL (postgres://... or sqlite:PATH); raise the fence for NAME before COMMAND starts")
	fl.StringVar(&f.once, "once", "", "run id (such as a date): skip if already done, mark done on success; needs --fence")
	fl.StringVar(&f.id, "id", "", "holder identity stored with the lock (default host:pid)")
	return cmd
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// runLocked is baton run after its arguments are checked.
func runLocked(ctx context.Context, g *globals, f runFlags, name string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := baton.ValidateName(name); err != nil {
		return err
	}
	switch {
	case f.wait < 0:
		return usageError("--wait %v: must not be negative; 0 makes one attempt", f.wait)
	case f.grace < 0:
		return usageError("--grace %v: must not be negative", f.grace)
	case f.once != "" && f.fence == "":
		return usageError("--once needs --fence: the fence store records which runs are done")
	}
	log := g.logger(stderr)
	opts := []baton.Option{baton.WithLogger(log)}
	if f.ttlSet {
		opts = append(opts, baton.WithTTL(f.ttl))
	}
	if f.id != "" {
		opts = append(opts, baton.WithHolder(f.id))
	}
	locker, err := backends.Open(ctx, f.backend, opts...)
	if err != nil {
		return withHint(f.backend, err)
	}
	defer locker.Close()

	var store fence.Store
	fl, fenced := locker.Fenced()
	if f.fence != "" {
		if !fenced {
			return usageError("--fence needs fencing tokens, and %s gives none: it is an efficiency lock; use etcd://, zk:// or postgres:// for a correctness lock", baton.Redact(f.backend))
		}
		if store, err = fence.Open(ctx, f.fence); err != nil {
			return err
		}
		defer store.Close()
		if f.once != "" {
			done, err := store.Done(ctx, name, f.once)
			if err != nil {
				return err
			}
			if done {
				fmt.Fprintf(stderr, "baton: run %q of %s is already done; skipping\n", f.once, name)
				return nil
			}
		}
	}

	lease, token, err := acquire(ctx, locker, fl, name, f.wait)
	if err != nil {
		return err
	}
	bg := context.WithoutCancel(ctx)
	defer lease.Release(bg)
	if store != nil {
		if err := store.Raise(bg, name, token); err != nil {
			return err
		}
		if f.once != "" {
			// Another replica may have finished the run while we waited.
			if done, err := store.Done(bg, name, f.once); err != nil {
				return err
			} else if done {
				fmt.Fprintf(stderr, "baton: run %q of %s is already done; skipping\n", f.once, name)
				return nil
			}
		}
	}

	res, err := supervise(lease, argv, commandEnv(f.backend, name, lease, token, fenced), f.grace, stdin, stdout, stderr, log)
	if err != nil {
		return err
	}
	if res.lost != nil {
		return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%v; stopped %s (%s)", res.lost, argv[0], res.status)}
	}
	code := res.code
	if code == 0 && f.once != "" {
		if err := store.MarkDone(bg, name, f.once, token); err != nil {
			return fmt.Errorf("mark run %q of %s done: %w", f.once, name, err)
		}
	}
	if err := lease.Release(bg); err != nil {
		log.Warn("release failed; the lock ends with its TTL", "err", err)
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// errWaited is the cause of an acquisition that ran out of --wait.
var errWaited = errors.New("not acquired within --wait")

// acquire takes the lock, through the fenced view when there is one (to
// get the token), once when wait is 0.
func acquire(ctx context.Context, l *baton.Locker, fl *baton.FencedLocker, name string, wait time.Duration) (*baton.Lease, baton.Token, error) {
	take := func(ctx context.Context) (*baton.Lease, baton.Token, error) {
		switch {
		case fl != nil && wait == 0:
			fe, err := fl.TryAcquire(ctx, name)
			if err != nil {
				return nil, 0, err
			}
			return fe.Lease(), fe.Token(), nil
		case fl != nil:
			fe, err := fl.Acquire(ctx, name)
			if err != nil {
				return nil, 0, err
			}
			return fe.Lease(), fe.Token(), nil
		case wait == 0:
			lease, err := l.TryAcquire(ctx, name)
			return lease, 0, err
		default:
			lease, err := l.Acquire(ctx, name)
			return lease, 0, err
		}
	}
	if wait == 0 {
		lease, token, err := take(ctx)
		if err != nil && errors.Is(err, baton.ErrNotAcquired) {
			return nil, 0, &exitError{code: exitNotAcquired, msg: fmt.Sprintf("%v; not acquired (--wait 0 makes one attempt)", unwrapNotAcquired(err))}
		}
		return lease, token, interrupted(ctx, err)
	}
	wctx, cancel := context.WithTimeoutCause(ctx, wait, errWaited)
	defer cancel()
	lease, token, err := take(wctx)
	if err != nil && errors.Is(err, errWaited) {
		return nil, 0, &exitError{code: exitNotAcquired, msg: fmt.Sprintf("lock %q not acquired within --wait %v: another holder has it", name, wait)}
	}
	return lease, token, interrupted(ctx, err)
}

func unwrapNotAcquired(err error) error {
	var nae *baton.NotAcquiredError
	if errors.As(err, &nae) {
		return nae
	}
	return err
}

// interrupted turns a wait cut short by SIGINT, SIGTERM or SIGHUP into exit 130.
func interrupted(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return &exitError{code: exitInterrupted, msg: "interrupted while waiting for the lock"}
	}
	return err
}

// supervised is how a supervised command ended.
type supervised struct {
	code     int   // its exit code (128+N if killed by signal N)
	lost     error // the lease's loss, if that is why it was stopped
	signaled bool  // baton got SIGINT, SIGTERM or SIGHUP and passed it on
	status   string
}

// passedOn are the signals baton passes on to a supervised command's
// process group; run's help lists them.
var passedOn = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// supervise runs argv in its own process group until it exits, passing on
// the signals in passedOn, and stops it when the lease is lost: SIGTERM to
// the group at once, SIGKILL after grace.
func supervise(lease *baton.Lease, argv, env []string, grace time.Duration, stdin io.Reader, stdout, stderr io.Writer, log *slog.Logger) (supervised, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// Its own process group, so a loss can stop all of it; and the command
	// (not what it forks: the kernel signals direct children only) is killed
	// if baton itself dies, since nothing would renew the lease or stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, passedOn...)
	defer signal.Stop(sigs)

	if err := cmd.Start(); err != nil {
		return supervised{}, &exitError{code: exitCannotRun, msg: fmt.Sprintf("cannot start %q: %v", argv[0], err)}
	}
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	var res supervised
	var kill <-chan time.Time
	for {
		select {
		case <-exited:
			res.code, res.status = exitStatus(cmd.ProcessState), status(cmd.ProcessState)
			return res, nil
		case s := <-sigs:
			log.Info("passing signal on to the command", "signal", s)
			res.signaled = true
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-lease.Done():
			if res.lost != nil || !errors.Is(lease.Err(), baton.ErrLeaseLost) {
				continue
			}
			res.lost = lease.Err()
			fmt.Fprintf(stderr, "baton: %v: sending SIGTERM to %s (SIGKILL in %v)\n", res.lost, argv[0], grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			kill = time.After(grace)
		case <-kill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}

func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func status(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return "exit " + strconv.Itoa(ps.ExitCode())
}
