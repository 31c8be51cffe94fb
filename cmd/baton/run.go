package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/baton-go/baton"
)

// runFlags are baton run's flags: the shared ones and its own.
type runFlags struct {
	leaseCmd
	wait time.Duration
	once string
}

func newRun(g *globals) *cobra.Command {
	f := runFlags{leaseCmd: leaseCmd{
		noun:     "lock",
		noTokens: "it is an efficiency lock; use etcd://, zk:// or postgres:// for a correctness lock",
	}}
	cmd := &cobra.Command{
		Use:   "run [flags] NAME -- COMMAND [ARGS...]",
		Short: "Run a command while holding the lock NAME",
		Long: `run takes the lock NAME, runs COMMAND while renewing the lease, and releases
the lock when COMMAND exits: like 'etcdctl lock NAME -- COMMAND', on any
backend, with fencing. Put it in the crontab of every server; one runs the
job, the others exit 75.

COMMAND gets BATON_LOCK, BATON_HOLDER and, on fenced backends (etcd, zk,
postgres), BATON_TOKEN, the fencing token; on etcd also ETCD_LOCK_KEY and
ETCD_LOCK_REV, as etcdctl lock sets them. An outer run's values of these
are never passed on to an inner run's COMMAND.

COMMAND runs in its own process group, in the background as far as the
terminal goes: a COMMAND that reads from the terminal is stopped by the
kernel, so give it its input from elsewhere (< /dev/null, a file, a pipe);
baton warns once COMMAND has been stopped for 5s, holding the lease. If
the lease is lost while COMMAND runs, the group gets SIGTERM at once and
SIGKILL after --grace. The lock is released only once no process of the group
is left: if COMMAND exits while processes it started still run, they get
SIGTERM and SIGKILL after --grace, and baton then exits with COMMAND's code.
Processes that leave the group (setsid, daemons) are neither waited for nor
stopped, and one that baton may not signal (another user's, as under sudo)
cannot be stopped: baton says so and releases the lock 5s after the SIGKILL
it could not send. As a container's PID 1, baton does not reap the orphans
that daemons leave behind: run it under an init (docker run --init, tini). If baton itself is
killed (SIGKILL, the OOM killer), COMMAND's group dies with it: its main
process by its parent-death signal, the rest by a guard, a copy of baton in a
group of its own, unless that is killed too (pkill -9 baton). SIGINT, SIGTERM,
SIGHUP and SIGQUIT sent to baton while COMMAND runs are passed on to its
process group, each SIGTERM or passed-on signal followed by SIGCONT so that a
stopped process acts on it, and baton then exits with COMMAND's code; any of
them while baton still waits for the lock makes it exit 130. SIGHUP or SIGINT
ignored when baton started (SIGHUP under nohup) stays ignored, for baton and
COMMAND (Go keeps those two ignored, not SIGTERM or SIGQUIT). SIGUSR1, SIGUSR2 and
SIGWINCH sent to baton while COMMAND runs are passed on to its group alone
(a log rotation, a terminal's resize), and change nothing else; while baton
waits, they are dropped. Ctrl-Z (SIGTSTP, and
SIGTTIN or SIGTTOU) stops COMMAND's group, then baton; continued, baton
continues COMMAND only while the lease holds (a lease that ran out meanwhile
is lost: COMMAND gets SIGKILL, still stopped, and baton exits 76; so does a
signal sent to baton then, instead of being passed on). A background baton
whose message to the terminal raises SIGTTOU (stty tostop) stops the same way,
COMMAND's group first.

The loss is seen at the lease's local deadline, just before the lock service
may free the lock, so the --grace that follows runs past the lease: without
--fence, keep it short, or have COMMAND stop at once on SIGTERM.

With --fence, the fence for NAME in that store is raised to the token before
COMMAND starts: from then on no older holder can write through it. With
--once RUN_ID, a run already marked done in the fence store is skipped, and
a run whose COMMAND exits 0 is marked done (fenced: a stale holder cannot),
before the lock is released and unless the lease was seen lost, or baton
passed a stop signal on to COMMAND (then baton exits 128+N); a fence
that moved past the token meanwhile leaves it unmarked (exit 77). Each request
to the fence store is given 10s: one that gets no answer in time makes baton
exit 69, and SIGINT, SIGTERM, SIGHUP or SIGQUIT while baton waits for one before
COMMAND starts, 130; marking a run done, after COMMAND, is not cut short
(the lock is released either way). A run cut off before its mark (a lost
lease, a failed command) runs again on the next try: COMMAND's writes must
be fenced or idempotent for that.

--wait defaults to 0, one attempt: replicas started by cron at the same time
should not queue up and run the job again after the winner. A longer wait
goes on through a lock service that stops answering for a while (or loses
the session the wait was made on); when it runs out, one last attempt (given
2s) names the holder (exit 75) or finds the lock service unreachable (exit
69; leaving its queue on a service that stopped answering can then take up
to the release timeout, 5s by default, and closing its session 2s more).

Exit codes:
  COMMAND's own  COMMAND ran to the end holding the lease (128+N if killed by signal N)
  75             not acquired within --wait (another holder has it)
  76             the lease was lost while COMMAND ran (also if found only as it exited, or by the release), or before it could start
  77             the fence refused the token (a newer holder exists, or the fence is ahead of the lock service's tokens: the message says which)
  69             the lock service or fence store is unreachable
  127            COMMAND could not be started (not found, not executable, its #! interpreter missing, or a text file with no #! line: looked up before the lock is taken)
  130            interrupted (SIGINT, SIGTERM, SIGHUP or SIGQUIT) while waiting for the lock or the fence store
  141            not from run, which writes no output of its own: a subcommand's output (elect --observe) had no reader left, as SIGPIPE would end it
  2              usage error, or a server that refuses the URL's credentials, database, parameters, or (etcd, ZooKeeper) prefix, or a user the server does not let write the locks
  1              any other failure (such as a fence store without baton's tables)
Each of baton's own codes comes with a line on stderr saying why; COMMAND's own
exit code comes with none, even when it is one of these.`,
		Example: `  # every server's crontab: the first to start bills, the others exit 75
  0 2 * * *  baton run --backend etcd://10.0.0.1:2379,10.0.0.2:2379 invoices -- ./invoices.sh

  # fenced; retries skip the night once its run is marked done
  baton run --backend etcd://10.0.0.1:2379 --fence postgres://app@db/billing \
    --once "$(date +%F)" invoices -- ./invoices.sh

  # wait up to a minute for the lock
  baton run --wait 1m stock -- ./rebuild-stock-report`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv, err := f.nameAndCommand(cmd, args)
			if err != nil {
				return err
			}
			return runLocked(cmd, g, f, name, argv)
		},
	}
	f.define(cmd, leaseHelp{
		backend: "lock service URL: etcd://h:p[,h:p][/prefix], zk://h:p[,h:p][/root], postgres://user@h:p/db, redis://h:p[/db], redlock://h:p,h:p,h:p (env BATON_BACKEND)",
		ttl:     "lease time to live: how soon another server can take over after this one dies (overrides the URL's ttl=; session-timeout= on zk://)",
		grace:   "time between SIGTERM and SIGKILL when the lease is lost",
		fence:   "fence store URL (postgres://... or sqlite:PATH); raise the fence for NAME before COMMAND starts",
		id:      "holder identity stored with the lock (default host:pid)",
	})
	fl := cmd.Flags()
	fl.DurationVar(&f.wait, "wait", 0, "how long to wait for the lock; 0 makes one attempt")
	fl.StringVar(&f.once, "once", "", "run id (such as a date): skip if already done, mark done on success; needs --fence")
	return cmd
}

// validate checks NAME and the flags that need no lock service, in the
// order their messages have always come.
func (f *runFlags) validate(fl *pflag.FlagSet, name string) error {
	if err := baton.ValidateName(name); err != nil {
		return err
	}
	if f.wait < 0 {
		return usageError("--wait %v: must not be negative; 0 makes one attempt", f.wait)
	}
	if err := f.leaseCmd.validate(fl); err != nil {
		return err
	}
	if fl.Changed("once") && strings.TrimSpace(f.once) == "" {
		// --once "$RUN_ID" with RUN_ID unset would run the job again on
		// every retry.
		return usageError(`--once is empty: give the run's id, such as --once "$(date +%%F)"`)
	}
	if f.once != "" && f.fence == "" {
		return usageError("--once needs --fence: the fence store records which runs are done")
	}
	return nil
}

// runLocked is baton run after its arguments are split.
func runLocked(cmd *cobra.Command, g *globals, f runFlags, name string, argv []string) error {
	if err := f.validate(cmd.Flags(), name); err != nil {
		return err
	}
	if err := findCommand(argv); err != nil {
		return err
	}
	ctx := cmd.Context()
	s, err := f.open(cmd, g)
	if err != nil {
		return err
	}
	defer s.Close()
	if s.store != nil && f.once != "" {
		if done, err := s.runDone(ctx, name, f.once); err != nil || done {
			return err
		}
	}

	h, err := acquire(ctx, s, name, f.wait)
	if err != nil {
		return err
	}
	lease, token := h.lease, h.token()
	bg := context.WithoutCancel(ctx)
	defer lease.Release(bg)
	if s.store != nil {
		// A lease lost already (granted just before its deadline) raises
		// nothing: the fence is the next holder's to raise.
		if err := leaseErr(lease); err != nil {
			return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%v; the fence was not raised, %s not started", err, argv[0])}
		}
		// On ctx: a signal stops a store that does not answer; the
		// deferred release then frees the lock.
		if err := s.raise(ctx, name, h); err != nil {
			return err
		}
		if f.once != "" {
			// Another replica may have finished the run while we waited.
			if done, err := s.runDone(ctx, name, f.once); err != nil || done {
				return err
			}
		}
	}

	res, err := s.supervise(ctx, name, lease, token, argv)
	if err != nil {
		return err
	}
	if res.lost != nil {
		return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%s (lock service %s); stopped %s (%s)", saidLost(res.lost), s.backendAt, argv[0], res.status)}
	}
	// A loss seen only as the command exited (both were ready at once, or
	// the local deadline passed and the timer has not fired yet) still
	// means the command ran part of the time unheld: exit 76, and mark no
	// run done. One found only by the release (the key deleted by a forced
	// release, not yet noticed) comes after the run was marked done: the
	// fence kept any write of ours after a newer holder's raise out, so the
	// record stands, and exit 76 says the command may have overlapped.
	if err := lostLate(lease, argv, res, "when it exited"); err != nil {
		return err
	}
	// A command that stops cleanly on SIGTERM exits 0 halfway through its
	// run: one that baton passed a stop signal on to is not known to have
	// finished it. Not marked done, the next try runs it.
	interrupted := res.code == 0 && f.once != "" && res.interrupted
	switch {
	case interrupted:
		fmt.Fprintf(s.stderr, "baton: %s exited 0 after baton passed %s on to it: run %q of %s not marked done, as it may have stopped short; the next try runs it again\n", argv[0], unix.SignalName(res.signal), f.once, name)
	case res.code == 0 && f.once != "":
		// Detached: the command has done the run, which must be recorded
		// even when a signal came as it ended.
		err := s.fenceCall(bg, fmt.Sprintf("mark run %q of %s done", f.once, name), "", func(ctx context.Context) error {
			// A refusal: the fence moved past our token while the
			// command ran. Ask the lock service whether a later holder
			// moved it, or it is ahead of the service, as a raise does.
			return h.fenced.CheckStale(ctx, s.store.MarkDone(ctx, name, f.once, token))
		})
		if errors.Is(err, baton.ErrStaleToken) {
			return fmt.Errorf("%s ran to its end (exit 0), but run %q of %s was not marked done: %w", argv[0], f.once, name, err)
		}
		if err != nil {
			return err // the store's errors say which run
		}
	}
	if err := lease.Release(bg); err != nil { // a loss it finds is not an error: lostLate's
		fmt.Fprintf(s.stderr, "baton: could not release the lock, which stays taken until its TTL runs out at the latest: %v\n", err) // err names the lock and the service
	}
	if err := lostLate(lease, argv, res, "by the release"); err != nil {
		return err
	}
	if interrupted {
		return codeOf(128 + int(res.signal))
	}
	return codeOf(res.code)
}

// lostLate returns exit 76 if lease was lost although supervise saw no loss
// while the command ran: the loss was found when, as when says.
// Before the release, a local deadline already passed counts as the loss
// it is, though the timer that reports it may not have fired yet.
func lostLate(lease *baton.Lease, argv []string, res supervised, when string) error {
	err := leaseErr(lease)
	if !errors.Is(err, baton.ErrLeaseLost) {
		return nil
	}
	return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%v (found %s); %s (%s) may have run part of the time without the lock", err, when, argv[0], res.status)}
}

// runDone reports whether run id of name is marked done in the fence
// store, and says so when it is.
func (s *leaseSession) runDone(ctx context.Context, name, id string) (bool, error) {
	var done bool
	err := s.fenceCall(ctx, fmt.Sprintf("say whether run %q of %s is done", id, name), "", func(ctx context.Context) (err error) {
		done, err = s.store.Done(ctx, name, id)
		return err
	})
	if done {
		fmt.Fprintf(s.stderr, "baton: run %q of %s is already done; skipping\n", id, name)
	}
	return done, err
}

// errWaited is the cause of an acquisition that ran out of --wait.
var errWaited = errors.New("not acquired within --wait")

// acquire takes the lock, once when wait is 0. A wait goes on through a
// lock service that stops answering, or loses the session the wait was
// made on (a pause longer than the TTL): nothing was held, and --wait
// still runs. When --wait runs out, one last attempt says why the lock was
// not acquired: another holder has it (exit 75, naming it), or the lock
// service does not answer (exit 69), which a wait blocked on a silent
// service cannot tell apart from a long queue.
func acquire(ctx context.Context, s *leaseSession, name string, wait time.Duration) (held, error) {
	if wait == 0 {
		return tryOnce(ctx, s, name, "--wait 0 makes one attempt")
	}
	wctx, cancel := context.WithTimeoutCause(ctx, wait, errWaited)
	defer cancel()
	var pause backoff
	for {
		h, err := s.take(wctx, name, (*baton.Locker).Acquire, (*baton.FencedLocker).Acquire)
		switch {
		case err == nil:
			return h, nil
		case errors.Is(context.Cause(wctx), errWaited):
			return lastTry(ctx, s, name, wait)
		case ctx.Err() == nil && transient(err):
			pause.sleep(wctx, s.stderr, err.Error(), "waiting on for the lock, again") // the loop looks at wctx
			continue
		}
		return held{}, interrupted(ctx, err, "while waiting for the lock")
	}
}

// lastTryTimeout bounds the attempt after --wait ran out: a lock service
// that answers at all answers it at once, and the wait is over.
const lastTryTimeout = 2 * time.Second

// errLastTry is the cause of a last attempt that got no answer in time.
var errLastTry = errors.New("no answer")

// lastTry is the attempt after --wait ran out, bounded by lastTryTimeout:
// it tells a held lock (75) from a lock service that stopped answering
// (69).
func lastTry(ctx context.Context, s *leaseSession, name string, wait time.Duration) (held, error) {
	bound := min(lastTryTimeout, s.locker.Config().RequestTimeout)
	lctx, cancel := context.WithTimeoutCause(ctx, bound, errLastTry)
	defer cancel()
	h, err := tryOnce(lctx, s, name, fmt.Sprintf("waited --wait %v, then tried once more", wait))
	if err != nil && ctx.Err() == nil && errors.Is(err, errLastTry) {
		err = s.unavailable(fmt.Errorf("no answer within %v to one last attempt after --wait %v", bound, wait))
	}
	return h, err
}

// tryOnce makes one attempt at the lock; how says how baton came to it,
// for the message when another holder has the lock (exit 75). A session
// the lock service lost during the attempt held nothing: exit 69, not 76.
func tryOnce(ctx context.Context, s *leaseSession, name, how string) (held, error) {
	h, err := s.take(ctx, name, (*baton.Locker).TryAcquire, (*baton.FencedLocker).TryAcquire)
	switch {
	case err == nil:
		return h, nil
	case errors.Is(err, baton.ErrNotAcquired):
		return held{}, &exitError{code: exitNotAcquired, msg: fmt.Sprintf("%v (lock service %s); not acquired (%s)", unwrapNotAcquired(err), s.backendAt, how)}
	case errors.Is(err, baton.ErrLeaseLost) && ctx.Err() == nil:
		return held{}, s.unavailable(fmt.Errorf("%v; nothing was held", err)) // not %w: ErrLeaseLost would make it exit 76
	}
	return held{}, withHint(s.backend, interrupted(ctx, err, "while waiting for the lock"))
}

func unwrapNotAcquired(err error) error {
	var nae *baton.NotAcquiredError
	if errors.As(err, &nae) {
		return nae
	}
	return err
}
