package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backends"
	"github.com/baton-go/baton/internal/asynclog"
	"github.com/baton-go/baton/internal/obsend"
)

// electFlags are baton elect's flags: the shared ones and its own.
type electFlags struct {
	leaseCmd
	observe bool
	json    bool
}

func newElect(g *globals) *cobra.Command {
	f := electFlags{leaseCmd: leaseCmd{
		noun:     "election",
		noTokens: "use etcd://, zk:// or postgres://",
	}}
	cmd := &cobra.Command{
		Use:   "elect [flags] NAME -- COMMAND [ARGS...]",
		Short: "Run a command while this process leads the election NAME",
		Long: `elect campaigns in the election NAME and runs COMMAND for as long as this
process leads: one of many replicas runs the scheduler, the mailer, the
singleton worker. When leadership is lost, COMMAND's process group gets
SIGTERM (SIGKILL after --grace) and elect campaigns again; if that campaign
fails because the lock service is unreachable or the session ended (as
right after a partition), elect says so and tries again after a pause,
drawn at random from the upper half of a bound that starts at 250ms and
doubles up to 10s. When COMMAND exits by itself, elect resigns
and exits with COMMAND's code, or 76 if leadership turns out lost then (seen
as COMMAND exited, or by the resignation). As under baton run, elect
resigns only once no process of COMMAND's group is left (those still
running after COMMAND exited get SIGTERM, SIGKILL after --grace). SIGINT,
SIGTERM, SIGHUP and SIGQUIT sent to elect while COMMAND runs are passed on to its
process group, and elect then exits with COMMAND's code, or 76 if leadership
was lost meanwhile; any of them while elect still campaigns makes it exit
130; SIGHUP or SIGINT ignored when elect started (SIGHUP under nohup) stays
ignored (Go keeps those two ignored, not SIGTERM or SIGQUIT).
SIGUSR1, SIGUSR2 and SIGWINCH are passed on to the group alone while
COMMAND runs, and dropped between terms. Ctrl-Z stops COMMAND's group, then elect, and a killed elect takes
COMMAND's group with it, as under baton run. Processes of COMMAND's group
that baton may not signal (another user's, under sudo) are not stopped:
when some are still alive 5s after SIGKILL, elect exits 76 instead of
campaigning again, which would start COMMAND a second time beside them
(with /proc mounted hidepid=2, elect asks the kernel about those it cannot
see). Processes that put themselves out of the group (setsid, a daemon)
are neither stopped nor seen: elect campaigns again beside them.

Exit codes: COMMAND's when it exits by itself; 76 leadership lost when
COMMAND exited, at the resignation, or with processes left; 77 a fence ahead
of the lock service's tokens; 69 the lock service is unreachable at the
start (later outages are waited out); 127 COMMAND cannot be started; 130
interrupted while campaigning; 2 bad input; 1 any other failure.

COMMAND gets the same environment as under baton run: BATON_LOCK, BATON_HOLDER
and, on fenced backends, BATON_TOKEN (on etcd also ETCD_LOCK_KEY and
ETCD_LOCK_REV). With --fence, the fence for NAME is raised to the token
before each term's COMMAND starts; the fence store is given 10s to answer
(after that the term ends, and elect campaigns again after a pause, as after
a stale token), and SIGINT, SIGTERM, SIGHUP or SIGQUIT while elect waits for it make
it exit 130. A term whose lease ran out before COMMAND could start ends the
same way. A fence that refuses the token while the lock service still names
this replica the leader is ahead of every token the service has given (it
was raised with another lock service's tokens, or before this one was
rebuilt): elect exits 77, saying so, since no later term would fare better.

With --observe, elect does not campaign: it prints the current leader and
then every change of leader, including "no leader", one line each (with the
leader's token on fenced backends), until interrupted (exit 0), until the
lock service stops answering or the observation's session ends (exit 69,
saying why), or until its standard output, a pipe, has no reader left (exit
141 as soon as the reader goes: elect --observe | head -1). A PostgreSQL lock table that cannot be observed at the start
(no observers' triggers, which this user may not add) is exit 1. Redlock
cannot be observed (its nodes keep no common history to follow): elect
--observe on a redlock:// backend is exit 2.`,
		Example: `  # on every server: one runs the mailer at a time
  baton elect --backend etcd://10.0.0.1:2379 mailer -- ./mailer

  # watch who leads
  baton elect --observe mailer
  baton elect --observe --json mailer`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.observe {
				if len(args) != 1 || cmd.ArgsLenAtDash() >= 0 {
					return usageError("elect --observe takes one election name and no command: baton elect --observe NAME")
				}
				for _, flag := range []string{"ttl", "grace", "fence", "id"} {
					if cmd.Flags().Changed(flag) {
						return usageError("--%s is for campaigning; elect --observe takes only --backend and --json", flag)
					}
				}
				return observe(cmd, g, f, args[0])
			}
			if f.json {
				return usageError("--json is for elect --observe, which prints JSON; campaigning prints none")
			}
			name, argv, err := f.nameAndCommand(cmd, args)
			if err != nil {
				return err
			}
			return lead(cmd, g, f, name, argv)
		},
	}
	f.define(cmd, leaseHelp{
		backend: "lock service URL (env BATON_BACKEND)",
		ttl:     "lease time to live: how soon another replica takes over after the leader dies (overrides the URL's ttl=; session-timeout= on zk://)",
		grace:   "time between SIGTERM and SIGKILL when leadership is lost",
		fence:   "fence store URL; raise the fence for NAME before each term's COMMAND starts",
		id:      "holder identity (default host:pid)",
	})
	fl := cmd.Flags()
	fl.BoolVar(&f.observe, "observe", false, "print every change of leader instead of campaigning")
	fl.BoolVar(&f.json, "json", false, "with --observe: one JSON object per line")
	return cmd
}

// lead campaigns, runs argv while leading, and campaigns again after a loss.
func lead(cmd *cobra.Command, g *globals, f electFlags, name string, argv []string) error {
	if err := baton.ValidateName(name); err != nil {
		return err
	}
	if err := f.validate(cmd.Flags()); err != nil {
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
	var pause backoff // between a failed campaign or a stale term and the next
	for {
		h, err := s.take(ctx, name, (*baton.Locker).Campaign, (*baton.FencedLocker).Campaign)
		if err != nil {
			// The lock service answered at the start (s.open), so a
			// campaign that failed on an outage or a lost session is
			// made again, by a standby too: one that exited 69 or 76
			// when the service restarted would leave fewer replicas to
			// take over.
			if err := interrupted(ctx, err, "while campaigning"); !transient(err) {
				return err
			}
			if err := pause.wait(ctx, s.stderr, fmt.Sprintf("campaign for %s failed: %v", name, err)); err != nil {
				return err
			}
			continue
		}
		lease, token := h.lease, h.token()
		bg := context.WithoutCancel(ctx)
		if s.fenced != nil {
			fmt.Fprintf(s.stderr, "baton: leading %s (token %d)\n", name, token)
		} else { // Redis, Redlock: no token to show
			fmt.Fprintf(s.stderr, "baton: leading %s\n", name)
		}
		if s.store != nil {
			// A term lost already raises no fence: it ends, as one lost
			// before its command could start does.
			if err := leaseErr(lease); err != nil {
				_ = lease.Release(bg)
				if err := pause.wait(ctx, s.stderr, fmt.Sprintf("%v; the fence was not raised, %s not started", err, argv[0])); err != nil {
					return err
				}
				continue
			}
			if err := s.raise(ctx, name, h); err != nil {
				_ = lease.Release(bg)
				// A newer leader has written already (stale), or the store
				// did not answer (it may be down, or the raise waited on an
				// older holder's transaction): this term is over, and
				// another replica may lead meanwhile. Any other failure (no
				// tables, refused, a fence ahead of the lock service's
				// tokens) would only come back.
				var stale *baton.StaleTokenError
				if errors.As(err, &stale) && stale.Ahead || !errors.Is(err, baton.ErrStaleToken) && !errors.Is(err, baton.ErrUnavailable) {
					return err
				}
				if err := pause.wait(ctx, s.stderr, err.Error()); err != nil {
					return err
				}
				continue
			}
		}
		res, err := s.supervise(ctx, name, lease, token, argv)
		when := "by the resignation"
		if errors.Is(lease.Err(), baton.ErrLeaseLost) {
			when = "when it exited"
		}
		if rerr := lease.Release(bg); rerr != nil {
			fmt.Fprintf(s.stderr, "baton: could not resign (the next leader takes over within the TTL at the latest): %v\n", rerr) // rerr names the election and the service
		}
		var ee *exitError
		if errors.As(err, &ee) && ee.code == exitLeaseLost && ctx.Err() == nil {
			// Lost before the command could start: the term ends, as a
			// stale one does.
			if err := pause.wait(ctx, s.stderr, ee.msg); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		pause.reset() // the term's command ran
		switch {
		case res.signaled || ctx.Err() != nil:
			// Stopped by a signal: no new term. A leadership lost
			// meanwhile still says the command ran part of the time
			// without it.
			if res.lost != nil {
				return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%s (lock service %s); stopped %s (%s)", saidLost(res.lost), s.backendAt, argv[0], res.status)}
			}
			if err := lostLate(lease, argv, res, when); err != nil {
				return err
			}
			return codeOf(res.code)
		case res.lost != nil && res.left > 0:
			// A new term would start a second COMMAND beside what is
			// left of this one's.
			return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("leadership of %s lost; %s of %s still running after SIGKILL (another user's, or stuck in the kernel): not campaigning again, which would start %s a second time beside them", name, processes(res.left), argv[0], argv[0])}
		case res.lost != nil:
			fmt.Fprintf(s.stderr, "baton: leadership of %s lost; stopped %s (%s); campaigning again\n", name, argv[0], res.status)
		default:
			// The command ended by itself: resign, with its code, unless
			// the loss was seen only as it exited or by the release.
			if err := lostLate(lease, argv, res, when); err != nil {
				return err
			}
			return codeOf(res.code)
		}
	}
}

// transient reports whether a campaign that failed with err may succeed if
// made again: the session or lease ended under it (a partition just
// healed) or the lock service did not answer. A cancelled campaign is not.
func transient(err error) bool {
	var ee *exitError
	if errors.As(err, &ee) || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, baton.ErrLeaseLost) || errors.Is(err, baton.ErrUnavailable)
}

// Bounds of the pause before campaigning again.
const (
	backoffMin = 250 * time.Millisecond
	backoffMax = 10 * time.Second
)

// backoff is the pause before campaigning again: it doubles from
// backoffMin to backoffMax with each failure in a row, and each pause is
// drawn at random from its upper half, so replicas cut off together do not
// campaign in step.
type backoff struct{ failures int }

func (b *backoff) next() time.Duration {
	d := backoffMax
	if b.failures < 16 && backoffMin<<b.failures < backoffMax {
		d = backoffMin << b.failures
	}
	b.failures++
	return d/2 + rand.N(d/2+1)
}

func (b *backoff) reset() { b.failures = 0 }

// wait says why elect campaigns again (why, on w) and after how long, then
// waits the next pause, or returns exit 130 if SIGINT, SIGTERM, SIGHUP or SIGQUIT
// (ctx) comes first.
func (b *backoff) wait(ctx context.Context, w io.Writer, why string) error {
	if !b.sleep(ctx, w, why, "campaigning again") {
		return &exitError{code: exitInterrupted, msg: "interrupted while waiting to campaign again"}
	}
	return nil
}

// sleep says why baton tries again (why), what it will do (what) and
// after how long, on w, then waits the next pause; false if ctx ended
// first.
func (b *backoff) sleep(ctx context.Context, w io.Writer, why, what string) bool {
	d := b.next()
	fmt.Fprintf(w, "baton: %s; %s in %v\n", why, what, d.Round(time.Millisecond))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

type termJSON struct {
	Time     time.Time  `json:"time"`
	Election string     `json:"election"`
	Leader   string     `json:"leader,omitempty"`
	Token    int64      `json:"token,omitempty"`
	Key      string     `json:"key,omitempty"`
	Since    *time.Time `json:"since,omitempty"`
}

// observe prints each term until interrupted.
func observe(cmd *cobra.Command, g *globals, f electFlags, name string) error {
	if err := baton.ValidateName(name); err != nil {
		return err
	}
	if u, err := baton.ParseURL(f.backend); err == nil && !backends.Observable(u.Scheme) {
		return notObservable(f.backend) // before connecting: its nodes may be down
	}
	logger := g.logger(cmd.ErrOrStderr())
	ended := &endReason{Handler: logger.Handler(), held: &heldReason{}}
	locker, err := openLooking(cmd, slog.New(ended), f.backend)
	if err != nil {
		return err
	}
	defer closeBackend(cmd, g, f.backend, locker)
	// A reader that goes away (| head -1) ends the observation at once,
	// not at the next change of leader, which may be days away.
	ctx, cancel := context.WithCancelCause(cmd.Context())
	defer cancel(nil)
	stop := watchOutput(cmd.OutOrStdout(), func() { cancel(errOutputGone) })
	defer stop()
	terms, err := locker.Observe(ctx, name)
	if errors.Is(err, errors.ErrUnsupported) {
		return notObservable(f.backend)
	}
	if err != nil && errors.Is(context.Cause(ctx), errOutputGone) {
		return errOutputGone
	}
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	for t := range terms {
		if err := printTerm(out, f.json, t); err != nil {
			return err
		}
	}
	if errors.Is(context.Cause(ctx), errOutputGone) {
		return errOutputGone // exit 141, as SIGPIPE would end it
	}
	if ctx.Err() != nil {
		return nil // interrupted: the normal way to stop observing
	}
	// The backend gave up: the service stopped answering, the session the
	// observation was made on ended, or the election can no longer be
	// observed (exit 69, as a service that is unreachable at the start),
	// as the backend's warning, held back for this one line, says.
	// The backend's records reach ended from the log queue's goroutine.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	_ = asynclog.Flush(fctx, locker.Config().Logger)
	fcancel()
	why := ended.reason()
	if why == "" {
		why = "the lock service stopped answering, or the session the observation was made on ended"
	}
	return &baton.UnavailableError{Where: "lock service " + baton.Redact(f.backend), Err: fmt.Errorf("observation of %s ended: %s", name, why)}
}

// notObservable is the usage error of elect --observe on a backend that
// cannot report changes of leader.
func notObservable(backend string) error {
	return usageError("elect --observe: %s cannot report changes of leader; observe on etcd, zk, redis or postgres", baton.Redact(backend))
}

// endReason is a slog.Handler that holds back a backend's warning that an
// observation ended (see obsend), keeping its reason for baton's one line
// at any log level, and passes every other record on as the log level
// says.
type endReason struct {
	slog.Handler
	held *heldReason // shared with the handlers WithAttrs and WithGroup make
}

// heldReason is the first reason an endReason held back.
type heldReason struct {
	mu  sync.Mutex
	why string
}

// Enabled lets warnings through whatever the log level, to look for the
// one that says why the observation ended.
func (e *endReason) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn || e.Handler.Enabled(ctx, level)
}

func (e *endReason) Handle(ctx context.Context, r slog.Record) error {
	why, ok := strings.CutPrefix(r.Message, obsend.Prefix)
	if !ok {
		if !e.Handler.Enabled(ctx, r.Level) {
			return nil
		}
		return e.Handler.Handle(ctx, r)
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			why += ": " + a.Value.String()
			return false
		}
		return true
	})
	e.held.mu.Lock()
	if e.held.why == "" {
		e.held.why = why
	}
	e.held.mu.Unlock()
	return nil
}

func (e *endReason) WithAttrs(as []slog.Attr) slog.Handler {
	return &endReason{Handler: e.Handler.WithAttrs(as), held: e.held}
}

func (e *endReason) WithGroup(name string) slog.Handler {
	return &endReason{Handler: e.Handler.WithGroup(name), held: e.held}
}

func (e *endReason) reason() string {
	e.held.mu.Lock()
	defer e.held.mu.Unlock()
	return e.held.why
}

func printTerm(w io.Writer, asJSON bool, t baton.Term) error {
	now := time.Now()
	if asJSON {
		j := termJSON{Time: now, Election: t.Election, Leader: t.Leader, Token: int64(t.Token), Key: t.Key}
		if !t.Since.IsZero() {
			j.Since = &t.Since
		}
		return json.NewEncoder(w).Encode(j)
	}
	if t.NoLeader() {
		_, err := fmt.Fprintf(w, "%s  %s  no leader\n", now.Format(time.RFC3339), t.Election)
		return err
	}
	if t.Token == 0 { // a backend without tokens (Redis, Redlock): no token to show
		_, err := fmt.Fprintf(w, "%s  %s  leader %s\n", now.Format(time.RFC3339), t.Election, baton.Printable(t.Leader))
		return err
	}
	_, err := fmt.Fprintf(w, "%s  %s  leader %s  token %d\n", now.Format(time.RFC3339), t.Election, baton.Printable(t.Leader), t.Token)
	return err
}
