package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backends"
	"github.com/baton-go/baton/fence"
)

// leaseCmd is what baton run and baton elect share: the flags that say
// where the lock is and how a lease on it behaves, the check of
// NAME -- COMMAND [ARGS...], and the opening of the lock service and the
// fence store. Each command words the help and messages for what it does.
type leaseCmd struct {
	noun     string // what NAME names, in messages: "lock" or "election"
	noTokens string // the advice when --fence names a backend without tokens

	backend string
	ttl     time.Duration
	grace   time.Duration
	fence   string
	id      string
}

// leaseHelp is the help of each shared flag, in one command's words.
type leaseHelp struct{ backend, ttl, grace, fence, id string }

// define adds the shared flags to cmd, with their defaults.
func (c *leaseCmd) define(cmd *cobra.Command, h leaseHelp) {
	fl := cmd.Flags()
	backendFlag(fl, &c.backend, h.backend)
	fl.DurationVar(&c.ttl, "ttl", 15*time.Second, h.ttl)
	fl.DurationVar(&c.grace, "grace", 10*time.Second, h.grace)
	fl.StringVar(&c.fence, "fence", "", h.fence)
	fl.StringVar(&c.id, "id", "", h.id)
}

// nameAndCommand splits the arguments NAME -- COMMAND [ARGS...].
func (c *leaseCmd) nameAndCommand(cmd *cobra.Command, args []string) (string, []string, error) {
	use := "baton " + cmd.Name()
	dash := cmd.ArgsLenAtDash()
	switch {
	case len(args) == 0:
		a := "a"
		if strings.IndexByte("aeiou", c.noun[0]) >= 0 {
			a = "an"
		}
		return "", nil, usageError("%s needs %s %s name and a command: %s NAME -- COMMAND [ARGS...]", cmd.Name(), a, c.noun, use)
	case dash < 0:
		return "", nil, usageError("put -- between the %s name and the command: %s %s -- COMMAND [ARGS...]", c.noun, use, args[0])
	case dash == 0:
		return "", nil, usageError("give the %s name before --: %s NAME -- %s", c.noun, use, strings.Join(args, " "))
	case dash != 1:
		return "", nil, usageError("give exactly one %s name before --, got %d: %q", c.noun, dash, args[:dash])
	case len(args) == 1:
		return "", nil, usageError("no command after --: %s %s -- COMMAND [ARGS...]", use, args[0])
	}
	return args[0], args[1:], nil
}

// findCommand looks COMMAND up as starting it will (exec.LookPath), before
// the lock service is touched: one that is not there, or not executable,
// or a script whose #! line names an interpreter that is not there (which
// exec reports as the script itself not found), is exit 127 at once, not
// once the lock is taken and a fence raised.
func findCommand(argv []string) error {
	path, err := exec.LookPath(argv[0])
	if err == nil {
		err = checkInterpreter(path)
	}
	if err != nil {
		return cannotRun(argv, err)
	}
	return nil
}

// checkInterpreter returns an error when path is a script whose #! line
// names no interpreter, or one that is not there or not executable, or a
// text file with no #! line, which the kernel will not run (a shell
// falls back to running it with sh; exec does not). A file it cannot read
// (execute-only), or one that may be a binary (not text: an ELF file, a
// format the kernel was taught with binfmt_misc), is left to the start
// to judge. (A text format that binfmt_misc was taught to run by its
// file's extension, which is rare, is refused too.)
func checkInterpreter(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var buf [256]byte // Linux reads a #! line of up to 256 bytes
	n, _ := io.ReadFull(f, buf[:])
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		text := buf[:n]
		if n == len(buf) {
			// A character cut at the end of what was read is not a
			// binary's: drop its first bytes, at most UTFMax-1 of them.
			for i := 1; i < utf8.UTFMax && i <= n; i++ {
				if utf8.RuneStart(text[n-i]) {
					if !utf8.FullRune(text[n-i:]) {
						text = text[:n-i]
					}
					break
				}
			}
		}
		if n > 0 && utf8.Valid(text) && !bytes.ContainsFunc(text, isControl) {
			return errors.New("it has no #! line, so the kernel will not run it: make its first line #!/bin/sh (or its interpreter's), or run it as sh SCRIPT")
		}
		return nil
	}
	// The kernel splits the line at spaces and tabs only: a "\r" of a
	// file with Windows line ends is part of the interpreter's name.
	fields := strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(fields) == 0 {
		return errors.New("its #! line names no interpreter")
	}
	interp := fields[0]
	st, err := os.Stat(interp)
	switch {
	case errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(interp, "\r"):
		return fmt.Errorf("its #! line names %q, which is not there: the file has Windows line ends (\\r\\n); convert it, as with dos2unix", interp)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("its #! line names %q, which is not there", interp)
	case err != nil:
		return fmt.Errorf("its #! line names %q: %w", interp, err)
	case st.IsDir() || st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("its #! line names %q, which is not executable", interp)
	}
	return nil
}

// isControl reports whether r is a control character that text has not
// (a binary's bytes): any but tab, line feed, carriage return and form
// feed.
func isControl(r rune) bool {
	return (r < 0x20 && r != '\t' && r != '\n' && r != '\r' && r != '\f') || r == 0x7f
}

// cannotRun is the error, exit 127, of a command that could not start.
func cannotRun(argv []string, err error) error {
	return &exitError{code: exitCannotRun, msg: fmt.Sprintf("cannot start %q: %v", argv[0], err)}
}

// validate checks the shared flags that need no lock service; fl says
// which were given. A --fence given empty (--fence "$FENCE" with FENCE
// unset) is refused, not taken for no fence; so is an --id that is empty
// or blank.
func (c *leaseCmd) validate(fl *pflag.FlagSet) error {
	if c.grace < 0 {
		return usageError("--grace %v: must not be negative", c.grace)
	}
	if fl.Changed("id") && strings.TrimSpace(c.id) == "" {
		// --id "$ID" with ID unset: refused, not taken for the default.
		return usageError(`--id %q names no holder: give one, such as --id "$(hostname)", or leave it out for the default`, c.id)
	}
	if fl.Changed("fence") {
		return checkStoreURL("--fence", c.fence)
	}
	return nil
}

// open opens the lock service, with --ttl when it is given (it then
// overrides a ttl= in the URL) and --id, and the fence store of --fence,
// which only a backend that gives fencing tokens can serve.
func (c *leaseCmd) open(cmd *cobra.Command, g *globals) (*leaseSession, error) {
	var opts []baton.Option
	if cmd.Flags().Changed("ttl") {
		opts = append(opts, baton.WithTTL(c.ttl))
	}
	if c.id != "" {
		opts = append(opts, baton.WithHolder(c.id))
	}
	if u, err := baton.ParseURL(c.backend); err == nil && c.fence != "" && backends.Unfenced(u.Scheme) {
		// Said before connecting: the answer does not depend on the server.
		return nil, c.noFence()
	}
	locker, err := openBackend(cmd, g, c.backend, opts...)
	if err != nil {
		return nil, err
	}
	s := &leaseSession{
		locker:    locker,
		backend:   c.backend,
		backendAt: baton.Redact(c.backend),
		grace:     c.grace,
		log:       g.logger(cmd.ErrOrStderr()),
		stdin:     cmd.InOrStdin(),
		stdout:    commandOutput(cmd.OutOrStdout()),
		stderr:    cmd.ErrOrStderr(),
	}
	s.fenced, _ = locker.Fenced()
	if c.fence == "" {
		return s, nil
	}
	if s.fenced == nil {
		s.Close()
		return nil, c.noFence()
	}
	s.storeAt = "fence store " + baton.Redact(c.fence)
	err = s.fenceCall(cmd.Context(), "open it", "", func(ctx context.Context) (err error) {
		s.store, err = fence.Open(ctx, c.fence)
		return err
	})
	if err != nil {
		s.Close() // s.store is nil: Open returns none with an error
		return nil, interrupted(cmd.Context(), err, "while opening the "+s.storeAt)
	}
	return s, nil
}

// noFence is the usage error for --fence on a backend without tokens.
func (c *leaseCmd) noFence() error {
	return usageError("--fence needs fencing tokens, and %s gives none: %s", baton.Redact(c.backend), c.noTokens)
}

// leaseSession is an open lock service, with its fenced view and the fence
// store of --fence, ready to take leases and run a command under them.
type leaseSession struct {
	locker  *baton.Locker
	fenced  *baton.FencedLocker // nil: the backend gives no fencing tokens
	store   fence.Store         // nil without --fence
	storeAt string              // the store, for messages: its URL without the password
	backend string
	// backendAt is the lock service, for messages: its URL without the
	// password.
	backendAt string
	grace     time.Duration
	log       *slog.Logger
	stdin     io.Reader
	stdout    io.Writer
	stderr    io.Writer
}

// unavailable is err as the lock service's failure to answer (exit 69),
// with what to do.
func (s *leaseSession) unavailable(err error) error {
	return withHint(s.backend, &baton.UnavailableError{Where: s.backendAt, Err: err})
}

// closeTimeout bounds the wait for the fence store, then the lock
// service, to close: a PostgreSQL pool whose server stopped answering
// mid-statement waits for the cancel request it sends (through the same
// cut-off network) for up to 15s, and a lock service that stopped
// answering is waited for up to the release timeout again (its session's
// revoke), after leaving its queue took as long. baton exits next, which
// ends what is left: a session not revoked ends with its TTL.
const closeTimeout = 2 * time.Second

// Close closes the fence store, then the lock service, waiting
// closeTimeout at most for each.
func (s *leaseSession) Close() {
	if s.store != nil {
		closeWithin(s.log, "the "+s.storeAt, s.store.Close)
	}
	closeWithin(s.log, "the lock service "+s.backendAt, s.locker.Close)
}

// closeWithin calls closeFn, which closes what (a fence store or lock
// service, and its URL), waiting closeTimeout at most for it to return.
func closeWithin(log *slog.Logger, what string, closeFn func() error) {
	closed := make(chan struct{})
	go func() { _ = closeFn(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(closeTimeout):
		log.Warn(what+" did not close in time; not waiting for it", "waited", closeTimeout)
	}
}

// take takes a lease on name with a Locker method (TryAcquire, Acquire or
// Campaign), through the fenced view's method of the same name when the
// backend has one, to keep the fenced view.
func (s *leaseSession) take(ctx context.Context, name string,
	plain func(*baton.Locker, context.Context, string) (*baton.Lease, error),
	fenced func(*baton.FencedLocker, context.Context, string) (*baton.FencedLease, error),
) (held, error) {
	if s.fenced == nil {
		lease, err := plain(s.locker, ctx, name)
		return held{lease: lease}, err
	}
	fe, err := fenced(s.fenced, ctx, name)
	if err != nil {
		return held{}, err
	}
	return held{lease: fe.Lease(), fenced: fe}, nil
}

// held is a lease baton run or elect took, with its fenced view on a
// backend that gives tokens.
type held struct {
	lease  *baton.Lease
	fenced *baton.FencedLease // nil without tokens
}

// token is the lease's fencing token, 0 without one.
func (h held) token() baton.Token {
	if h.fenced == nil {
		return 0
	}
	return h.fenced.Token()
}

// slowRaise says why a raise may go unanswered while the store works.
const slowRaise = "a PostgreSQL raise also waits for the fenced transactions of an older holder under way to end: one held open, or frozen, keeps it waiting"

// raise raises the fence of --fence for name to h's token, as
// FencedLease.Raise does (a refusal tells a later holder from a fence
// ahead of the lock service), bounded and interrupted as fenceCall says.
func (s *leaseSession) raise(ctx context.Context, name string, h held) error {
	return s.fenceCall(ctx, fmt.Sprintf("raise the fence of %s to %d", name, h.token()), slowRaise, func(ctx context.Context) error {
		return h.fenced.Raise(ctx, s.store)
	})
}

// supervise runs argv under lease (see supervise) with the environment of a
// command run under a lease, and stops it --grace after a SIGTERM when the
// lease is lost. A stop signal that came after the lease was granted but
// before the command could start (ctx is cancelled then) starts nothing:
// exit 130, and the caller releases the lease.
func (s *leaseSession) supervise(ctx context.Context, name string, lease *baton.Lease, token baton.Token, argv []string) (supervised, error) {
	env := commandEnv(s.backend, name, lease, token, s.fenced != nil)
	return supervise(ctx, lease, argv, env, s.grace, s.stdin, s.stdout, s.stderr, s.log)
}

// storeTimeout bounds each request baton run and elect make to the fence
// store: raising the fence, checking or marking a run done. Their help
// says so.
const storeTimeout = 10 * time.Second

// fenceCall makes call, a request to the fence store described by what
// ("raise the fence ..."), on ctx bounded by storeTimeout. A store that does
// not answer within it fails the call as unavailable (exit 69); SIGINT,
// SIGTERM, SIGHUP or SIGQUIT (ctx cancelled) interrupt it (exit 130). Pass a
// detached ctx for a request no signal may interrupt.
func (s *leaseSession) fenceCall(ctx context.Context, what, slow string, call func(context.Context) error) error {
	hint := "check that it runs and is reachable"
	if slow != "" {
		hint += " (" + slow + ")"
	}
	late := &baton.UnavailableError{Where: s.storeAt, Err: fmt.Errorf("no answer within %v to %s; %s", storeTimeout, what, hint)}
	cctx, cancel := context.WithTimeoutCause(ctx, storeTimeout, late)
	defer cancel()
	err := call(cctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, baton.ErrStaleToken):
		// The store answered: a refusal stands, whatever became of the
		// look at the lock service a raise makes after it (see raise).
		// The refusal has settled whether the fence is ahead of the lock
		// service (FencedLease.CheckStale, in call); a newer holder's
		// needs nothing done.
		suffix := ""
		if st := (*baton.StaleTokenError)(nil); errors.As(err, &st) && !st.Ahead {
			suffix = ": nothing to do here (the newer holder does the job)"
		}
		return fmt.Errorf("%s, asked to %s: %w%s", s.storeAt, what, err, suffix)
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return &exitError{code: exitInterrupted, msg: "interrupted while waiting for the fence store to " + what}
	case cctx.Err() != nil && !errors.Is(err, baton.ErrUnavailable):
		return late // the store said only that the deadline passed
	}
	return err
}

// interrupted turns a wait cut short by one of passedOn (ctx cancelled)
// into exit 130, saying what was interrupted ("while waiting for the
// lock").
func interrupted(ctx context.Context, err error, while string) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return &exitError{code: exitInterrupted, msg: "interrupted " + while}
	}
	return err
}
