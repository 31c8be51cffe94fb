package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/baton-go/baton"
)

// defaultBackend is used when neither --backend nor BATON_BACKEND is set;
// `baton serve` serves it.
const defaultBackend = "etcd://127.0.0.1:2379"

// envOr returns the environment variable k, or def when it is unset or empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// backendFlag defines --backend on fl into p, defaulting to BATON_BACKEND
// or defaultBackend. The help shows that default with its password
// redacted: it comes from the environment, and --help goes to terminals
// and bug reports.
func backendFlag(fl *pflag.FlagSet, p *string, usage string) {
	def := envOr("BATON_BACKEND", defaultBackend)
	fl.StringVar(p, "backend", def, usage)
	fl.Lookup("backend").DefValue = baton.Redact(def)
}

// globals are the flags every command takes.
type globals struct {
	logLevel string
}

// logger returns the logger for a command, writing text to w.
func (g *globals) logger(w io.Writer) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(g.logLevel)); err != nil {
		lv = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv}))
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "baton",
		Short: "Run a job once across many replicas, and make a paused holder harmless",
		Long: `baton runs a job once across many replicas. It takes a lease on a lock
service (etcd, ZooKeeper, PostgreSQL or Redis), renews it while the job runs,
hands the job a fencing token that a database can check, and stops the job
when the lease is lost.

Start with 'baton demo': it replays the guide's month-end night, where a
frozen server wakes up and keeps billing, on an embedded etcd.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "error", "log level: debug, info, warn or error (failures are always reported on one line)")
	// Every command (cobra asks the nearest parent that has one) reports the
	// flags it cannot parse as usage errors.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return cobraUsage(cmd, err) })
	// The root's persistent hook runs before every command, as no command
	// has one of its own.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		var lv slog.Level
		if err := lv.UnmarshalText([]byte(g.logLevel)); err != nil {
			return usageError("--log-level %q: use debug, info, warn or error", g.logLevel)
		}
		if err := tookAFlag(cmd.Flags()); err != nil {
			return err
		}
		// Cobra checks required flags and flag groups after this hook and
		// returns their errors as they are; checked here first, they are
		// usage errors.
		if err := cmd.ValidateRequiredFlags(); err != nil {
			return cobraUsage(cmd, err)
		}
		return cobraUsage(cmd, cmd.ValidateFlagGroups())
	}
	root.AddCommand(newRun(g), newElect(g), newStatus(g), newRelease(g), newFence(g), newServe(g), newDemo(), newVersion())
	// Cobra adds its help and completion commands when it executes, unless
	// they are there: made now, their argument checks are marked too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	strictHelp(root)
	strictCompletion(root)
	markArgErrors(root)
	return root
}

// storeURLs is how a fence store's URL is written, for messages.
const storeURLs = "sqlite:PATH or postgres://user@host:port/database"

// urlFlags are the flags that take a URL, with an example of one.
var urlFlags = []struct{ name, example string }{
	{"backend", "etcd://127.0.0.1:2379"},
	{"fence", storeURLs},
	{"store", storeURLs},
}

// nameFlags are the other flags that take a word, with an example of one.
var nameFlags = []struct{ name, example string }{
	{"id", "web-1"},
	{"once", "2026-10-31"},
}

// tookAFlag refuses a URL flag whose value looks like a flag, or an --id or
// --once whose value is one of the command's flags: given without a value,
// it took the next flag for one (--fence --backend URL), which moves the
// arguments, and every message after would be about the wrong words. A URL
// never starts with '-'.
func tookAFlag(fl *pflag.FlagSet) error {
	for _, u := range urlFlags {
		if f := fl.Lookup(u.name); f != nil && f.Changed && strings.HasPrefix(f.Value.String(), "-") {
			return usageError("--%s took %s as its value, a flag, not a URL: give --%s a URL, such as %s", u.name, f.Value, u.name, u.example)
		}
	}
	for _, n := range nameFlags {
		if f := fl.Lookup(n.name); f != nil && f.Changed && namesAFlag(fl, f.Value.String()) {
			return usageError("--%s took %s as its value, a flag of this command: give --%s a value, such as %s", n.name, f.Value, n.name, n.example)
		}
	}
	return nil
}

// namesAFlag reports whether v is "--" or names a flag fl defines (--name,
// --name=value, or -x for its shorthand x): what a flag given no value
// takes from the next word. A holder name or run id that starts with '-'
// otherwise (--id=-worker) is taken.
func namesAFlag(fl *pflag.FlagSet, v string) bool {
	switch {
	case v == "--":
		return true
	case strings.HasPrefix(v, "--"):
		name, _, _ := strings.Cut(v[2:], "=")
		return fl.Lookup(name) != nil
	case len(v) >= 2 && v[0] == '-':
		return fl.ShorthandLookup(v[1:2]) != nil
	}
	return false
}

// strictCompletion makes `baton completion SHELL` with an unknown SHELL a
// usage error (exit 2), as a mistyped subcommand of fence is: cobra's
// completion command prints its help and exits 0.
func strictCompletion(root *cobra.Command) {
	c, _, err := root.Find([]string{"completion"})
	if err != nil || c == root {
		return
	}
	c.Args = cobra.NoArgs
	if c.Run == nil && c.RunE == nil {
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}

// strictHelp makes `baton help TOPIC` a usage error (exit 2) when TOPIC is
// no command: cobra's help prints "Unknown help topic" and the usage, and
// exits 0.
func strictHelp(root *cobra.Command) {
	help, _, err := root.Find([]string{"help"})
	if err != nil || help == root || help.Run == nil {
		return
	}
	show := help.Run
	help.Run = nil
	help.RunE = func(c *cobra.Command, args []string) error {
		if cmd, rest, err := c.Root().Find(args); cmd == nil || err != nil || len(rest) > 0 {
			return usageError("no help topic %q: run baton help for the commands", strings.Join(args, " "))
		}
		show(c, args)
		return nil
	}
}

// markArgErrors makes the argument check (Args) of c and of every command
// under it report a usage error. A command without one keeps cobra's
// default, under which only the root refuses arguments, as an unknown
// command: see executed.
func markArgErrors(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error { return cobraUsage(cmd, check(cmd, args)) }
	}
	for _, sub := range c.Commands() {
		markArgErrors(sub)
	}
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print baton's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Fprintf(cmd.OutOrStdout(), "baton %s\n", v)
			return nil
		},
	}
}
