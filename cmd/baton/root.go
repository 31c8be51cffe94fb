package main

import (
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"

	"github.com/spf13/cobra"
)

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
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		var lv slog.Level
		if err := lv.UnmarshalText([]byte(g.logLevel)); err != nil {
			return usageError("--log-level %q: use debug, info, warn or error", g.logLevel)
		}
		return nil
	}
	root.AddCommand(newRun(g), newElect(g), newStatus(g), newRelease(g), newFence(), newServe(g), newDemo(), newVersion())
	return root
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
