package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence"
)

type electFlags struct {
	backend string
	ttl     time.Duration
	ttlSet  bool // --ttl given: it then overrides a ttl= in the URL
	grace   time.Duration
	fence   string
	id      string
	observe bool
	json    bool
}

func newElect(g *globals) *cobra.Command {
	var f electFlags
	cmd := &cobra.Command{
		Use:   "elect [flags] NAME -- COMMAND [ARGS...]",
		Short: "Run a command while this process leads the election NAME",
		Long: `elect campaigns in the election NAME and runs COMMAND for as long as this
process leads: one of many replicas runs the scheduler, the mailer, the
singleton worker. When leadership is lost, COMMAND's process group gets
SIGTERM (SIGKILL after --grace) and elect campaigns again. When COMMAND exits
by itself, elect resigns and exits with COMMAND's code.

COMMAND gets the same environment as under baton run: BATON_LOCK, BATON_HOLDER
and, on fenced backends, BATON_TOKEN (on etcd also ETCD_LOCK_KEY and
ETCD_LOCK_REV). With --fence, the fence for NAME is raised to the token
before each term's COMMAND starts.

With --observe, elect does not campaign: it prints the current leader and
then every change of leader, including "no leader", one line each.`,
		Example: `  # on every server: one runs the mailer at a time
  baton elect --backend etcd://10.0.0.1:2379 mailer -- ./mailer

  # watch who leads
  baton elect --observe mailer
  baton elect --observe --json mailer`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if f.observe {
				if len(args) != 1 || dash >= 0 {
					return usageError("elect --observe takes one election name and no command: baton elect --observe NAME")
				}
				return observe(cmd, g, f, args[0])
			}
			switch {
			case len(args) == 0:
				return usageError("elect needs an election name and a command: baton elect NAME -- COMMAND [ARGS...]")
			case dash < 0:
				return usageError("put -- between the election name and the command: baton elect %s -- COMMAND [ARGS...]", args[0])
			case dash != 1:
				return usageError("give exactly one election name before --, got %d: %q", dash, args[:dash])
			case len(args) == 1:
				return usageError("no command after --: baton elect %s -- COMMAND [ARGS...]", args[0])
			}
			f.ttlSet = cmd.Flags().Changed("ttl")
			return lead(cmd, g, f, args[0], args[1:])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.backend, "backend", envOr("BATON_BACKEND", defaultBackend), "lock service URL (env BATON_BACKEND)")
	fl.DurationVar(&f.ttl, "ttl", 15*time.Second, "lease time to live: how soon another replica takes over after the leader dies")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when leadership is lost")
	fl.StringVar(&f.fence, "fence", "", "fence store URL; raise the fence for NAME before each term's COMMAND starts")
	fl.StringVar(&f.id, "id", "", "holder identity (default host:pid)")
	fl.BoolVar(&f.observe, "observe", false, "print every change of leader instead of campaigning")
	fl.BoolVar(&f.json, "json", false, "with --observe: one JSON object per line")
	return cmd
}

// lead campaigns, runs argv while leading, and campaigns again after a loss.
func lead(cmd *cobra.Command, g *globals, f electFlags, name string, argv []string) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	if err := baton.ValidateName(name); err != nil {
		return err
	}
	if f.grace < 0 {
		return usageError("--grace %v: must not be negative", f.grace)
	}
	log := g.logger(stderr)
	var opts []baton.Option
	if f.ttlSet {
		opts = append(opts, baton.WithTTL(f.ttl))
	}
	if f.id != "" {
		opts = append(opts, baton.WithHolder(f.id))
	}
	locker, err := openBackend(cmd, g, f.backend, opts...)
	if err != nil {
		return err
	}
	defer locker.Close()
	fl, fenced := locker.Fenced()
	var store fence.Store
	if f.fence != "" {
		if !fenced {
			return usageError("--fence needs fencing tokens, and %s gives none: use etcd://, zk:// or postgres://", baton.Redact(f.backend))
		}
		if store, err = fence.Open(ctx, f.fence); err != nil {
			return err
		}
		defer store.Close()
	}
	for {
		lease, token, err := campaign(ctx, locker, fl, name)
		if err != nil {
			return interrupted(ctx, err)
		}
		bg := context.WithoutCancel(ctx)
		fmt.Fprintf(stderr, "baton: leading %s (token %d)\n", name, token)
		if store != nil {
			if err := store.Raise(bg, name, token); err != nil {
				_ = lease.Release(bg)
				if !errors.Is(err, baton.ErrStaleToken) {
					return err // the store failed: campaigning again would loop on it
				}
				// A newer leader has written already: our term is over.
				fmt.Fprintf(stderr, "baton: %v; campaigning again\n", err)
				continue
			}
		}
		res, err := supervise(lease, argv, commandEnv(f.backend, name, lease, token, fenced), f.grace, cmd.InOrStdin(), cmd.OutOrStdout(), stderr, log)
		if err != nil {
			_ = lease.Release(bg)
			return err
		}
		_ = lease.Release(bg)
		switch {
		case res.signaled || ctx.Err() != nil:
			return codeOf(res.code)
		case res.lost != nil:
			fmt.Fprintf(stderr, "baton: leadership of %s lost; stopped %s (%s); campaigning again\n", name, argv[0], res.status)
		default:
			return codeOf(res.code) // the command ended by itself: resign
		}
	}
}

func codeOf(code int) error {
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

// campaign blocks until this process leads, through the fenced view when
// there is one.
func campaign(ctx context.Context, l *baton.Locker, fl *baton.FencedLocker, name string) (*baton.Lease, baton.Token, error) {
	if fl != nil {
		fe, err := fl.Campaign(ctx, name)
		if err != nil {
			return nil, 0, err
		}
		return fe.Lease(), fe.Token(), nil
	}
	lease, err := l.Campaign(ctx, name)
	return lease, 0, err
}

// commandEnv is the environment of a command run under a lease.
func commandEnv(backend, name string, lease *baton.Lease, token baton.Token, fenced bool) []string {
	env := append(os.Environ(), "BATON_LOCK="+name, "BATON_HOLDER="+lease.Holder())
	if fenced {
		env = append(env, "BATON_TOKEN="+strconv.FormatInt(int64(token), 10))
	}
	if u, err := baton.ParseURL(backend); err == nil && u.Scheme == "etcd" {
		env = append(env, "ETCD_LOCK_KEY="+lease.Key(), "ETCD_LOCK_REV="+strconv.FormatInt(int64(token), 10))
	}
	return env
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
	locker, err := openBackend(cmd, g, f.backend, baton.WithTTL(lookTTL))
	if err != nil {
		return err
	}
	defer locker.Close()
	ctx := cmd.Context()
	terms, err := locker.Observe(ctx, name)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	for t := range terms {
		if err := printTerm(out, f.json, t); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // interrupted: the normal way to stop observing
	}
	return fmt.Errorf("observation of %s ended: %w", name, errors.New("the lock service stopped answering"))
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
	_, err := fmt.Fprintf(w, "%s  %s  leader %s  token %d\n", now.Format(time.RFC3339), t.Election, t.Leader, t.Token)
	return err
}
