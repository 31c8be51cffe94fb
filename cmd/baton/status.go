package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backends"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/zk"
)

func newStatus(g *globals) *cobra.Command {
	var backend string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [NAME...]",
		Short: "Show who holds each lock, its token, and how long its lease has left",
		Long: `status lists every held lock on the backend, or the named locks, held or not:
NAME, HOLDER, TOKEN, TTL LEFT (until the lock service may free it), SINCE (by
the holder's clock; the database's on postgres://) and WAITERS (acquisitions queued behind the holder).

A column the backend cannot tell shows - (or ?, for TTL LEFT): TOKEN on
redis and redlock, which give none; TTL LEFT on ZooKeeper, where the lease is
the holder's session, whose time left only its server knows; SINCE on redis
and redlock, whose keys hold no time.

A lock whose key names no holder (written by a client of another kind) shows
(unnamed). Listing every lock, one that cannot be read (a key of another type
under the prefix, written by another tool; keys or nodes that the credentials
may not read) shows (unreadable), with an "error" in JSON; the others are
listed, each such lock's error follows on stderr, one line each, and status
exits 1.

Exit codes: 0 listed; 2 bad input, or a server that refuses the URL's
credentials; 69 the lock service is unreachable; 130 interrupted (SIGINT,
SIGTERM, SIGHUP or SIGQUIT); 141 the output had no reader left; 1 a lock
that could not be read, or any other failure.`,
		Example: `  baton status
  baton status invoices stock --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var names []string // each once, in the order given
			for _, n := range args {
				if err := baton.ValidateName(n); err != nil {
					return err
				}
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
			locker, err := openLooking(cmd, g.logger(cmd.ErrOrStderr()), backend)
			if err != nil {
				return err
			}
			defer closeBackend(cmd, g, backend, locker)
			insp, ok := locker.Backend().(baton.Inspector)
			if !ok {
				return fmt.Errorf("%s cannot list its locks", baton.Redact(backend))
			}
			infos, err := insp.Inspect(cmd.Context(), names...)
			if err != nil {
				return interrupted(cmd.Context(), err, "while listing the locks")
			}
			write := writeTable
			if asJSON {
				write = writeJSON
			}
			if err := write(cmd.OutOrStdout(), infos); err != nil {
				return err
			}
			return unreadable(cmd.ErrOrStderr(), infos)
		},
	}
	backendFlag(cmd.Flags(), &backend, "lock service URL (env BATON_BACKEND)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one array of objects")
	return cmd
}

// openLooking opens backend for a command that only looks (status,
// release, elect --observe), with lookOptions and logger. A ZooKeeper that
// grants another session timeout than lookTTL (a tickTime of 2.5s or more,
// or limits set in its configuration) is dialled again with the one it
// grants: the command holds nothing, so any timeout the server takes will
// do. A TTL the URL sets is the user's, and stays refused.
func openLooking(cmd *cobra.Command, logger *slog.Logger, backend string) (*baton.Locker, error) {
	opts := lookOptions(backend)
	locker, err := openLogged(cmd, logger, backend, opts...)
	var ste *zk.SessionTimeoutError
	if len(opts) > 0 && errors.As(err, &ste) {
		locker, err = openLogged(cmd, logger, backend, baton.WithTTL(ste.Granted))
	}
	return locker, err
}

// lookTTL is the TTL of the commands that only look (status, release,
// elect --observe): they hold no lease, but a backend's session needs one
// the server accepts (ZooKeeper's maximum session timeout is tickTime x 20,
// 40s by default; its minimum 4s).
const lookTTL = 5 * time.Second

// lookOptions are the options of the commands that only look: lookTTL,
// unless the backend URL sets its own TTL (ttl=, or ZooKeeper's
// session-timeout=), which must then win: a ZooKeeper whose minimum
// session timeout is above lookTTL refuses it, and so would refuse them.
// Nor when it sets renew-every= or drift=, which were chosen for its own
// (or the default) TTL and may not fit lookTTL: a URL that baton run
// takes must do for baton status too.
func lookOptions(backend string) []baton.Option {
	if u, err := baton.ParseURL(backend); err == nil {
		q := u.Query()
		for _, k := range []string{"ttl", "session-timeout", "renew-every", "drift"} {
			if q.Has(k) {
				return nil
			}
		}
	}
	return []baton.Option{baton.WithTTL(lookTTL)}
}

// openers are the lock services by URL scheme: all of baton's backends,
// and in tests a fake one.
var openers = backends.All()

// openBackend opens the backend URL with the logger, saying what to do when
// it cannot be reached.
func openBackend(cmd *cobra.Command, g *globals, backend string, opts ...baton.Option) (*baton.Locker, error) {
	return openLogged(cmd, g.logger(cmd.ErrOrStderr()), backend, opts...)
}

// openLogged is openBackend with the Locker's logger.
func openLogged(cmd *cobra.Command, logger *slog.Logger, backend string, opts ...baton.Option) (*baton.Locker, error) {
	opts = append(opts, baton.WithLogger(logger))
	locker, err := openers.Open(cmd.Context(), backend, opts...)
	return locker, withHint(backend, interrupted(cmd.Context(), err, "while connecting to "+baton.Redact(backend)))
}

// closeBackend closes locker, opened on backend, waiting closeTimeout at
// most (see closeWithin): a lock service that stopped answering would
// hold baton's exit up by the release timeout.
func closeBackend(cmd *cobra.Command, g *globals, backend string, locker *baton.Locker) {
	closeWithin(g.logger(cmd.ErrOrStderr()), "the lock service "+baton.Redact(backend), locker.Close)
}

// closeStore closes s, the fence store at store, waiting closeTimeout at
// most (see closeWithin).
func closeStore(cmd *cobra.Command, g *globals, store string, s fence.Store) {
	closeWithin(g.logger(cmd.ErrOrStderr()), "the fence store "+baton.Redact(store), s.Close)
}

// withHint adds what to do to an unreachable lock service's error.
func withHint(backend string, err error) error {
	if err == nil || !errors.Is(err, baton.ErrUnavailable) {
		return err
	}
	if u, perr := baton.ParseURL(backend); perr == nil && u.Scheme == "etcd" && loopbackOnly(u.Host) {
		return fmt.Errorf("%w; start one with `baton serve` or pass --backend", err)
	}
	return fmt.Errorf("%w; check that it runs and is reachable, or pass --backend", err)
}

// loopbackOnly reports whether every host:port in hosts (comma-separated)
// is on this machine, where `baton serve` could be what is missing.
func loopbackOnly(hosts string) bool {
	for _, hp := range strings.Split(hosts, ",") {
		h, _, err := net.SplitHostPort(hp)
		if err != nil {
			h = hp
		}
		if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

type statusJSON struct {
	Name       string     `json:"name"`
	Holder     string     `json:"holder,omitempty"`
	Key        string     `json:"key,omitempty"`
	Token      int64      `json:"token,omitempty"`
	TTLLeftSec *float64   `json:"ttl_left_seconds,omitempty"`
	Since      *time.Time `json:"since,omitempty"`
	Waiters    int        `json:"waiters"`
	Error      string     `json:"error,omitempty"` // why the lock could not be read
}

// unreadable writes a line to w for each lock in infos that could not be
// read, and then returns an error that makes status exit 1 (having said
// all), or nil when there is none.
func unreadable(w io.Writer, infos []baton.LockInfo) error {
	n := 0
	for _, i := range infos {
		if i.Err != nil {
			fmt.Fprintf(w, "baton: lock %s could not be read: %s\n", i.Name, joinLines(i.Err.Error()))
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return &exitError{code: exitFailure}
}

func writeJSON(w io.Writer, infos []baton.LockInfo) error {
	out := make([]statusJSON, 0, len(infos))
	for _, i := range infos {
		s := statusJSON{Name: i.Name, Holder: i.Holder, Key: i.Key, Token: int64(i.Token), Waiters: i.Waiters}
		if i.Err != nil {
			s.Error = i.Err.Error()
			out = append(out, s)
			continue
		}
		if isHeld(i) && i.TTLLeft >= 0 {
			sec := i.TTLLeft.Seconds()
			s.TTLLeftSec = &sec
		}
		if !i.Since.IsZero() {
			since := i.Since
			s.Since = &since
		}
		out = append(out, s)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeTable writes infos as a table; its error is the writer's, as
// writeJSON's is (a reader gone: exit 141).
func writeTable(w io.Writer, infos []baton.LockInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tTTL LEFT\tSINCE\tWAITERS")
	for _, i := range infos {
		if i.Err != nil {
			fmt.Fprintf(tw, "%s\t(unreadable)\t-\t-\t-\t-\n", i.Name) // its error follows on stderr
			continue
		}
		if !isHeld(i) {
			fmt.Fprintf(tw, "%s\t(free)\t-\t-\t-\t%d\n", i.Name, i.Waiters)
			continue
		}
		holder := baton.Printable(i.Holder) // a holder's newline would make a row
		if i.Holder == "" {
			holder = "(unnamed)" // a key whose value names no one: a client of another kind
		}
		tok, ttl, since := "-", "?", "-"
		if i.Token != 0 {
			tok = fmt.Sprint(i.Token)
		}
		if i.TTLLeft >= 0 {
			ttl = i.TTLLeft.Round(100 * time.Millisecond).String() // alike on every backend: 13.5s, not 13.996178s
		}
		if !i.Since.IsZero() {
			since = i.Since.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", i.Name, holder, tok, ttl, since, i.Waiters)
	}
	return tw.Flush()
}

// isHeld reports whether i is a held lock: it has a holder's key, or names a
// holder. A key whose value names no one (written by a client of another
// kind) is held all the same, as Locker.Leader and release --force take it.
func isHeld(i baton.LockInfo) bool { return i.Key != "" || i.Holder != "" }
