package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/examples/warehouse"
	"github.com/baton-go/baton/internal/demo"
	"github.com/baton-go/baton/internal/etcdserver"
)

func newDemo() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Replay the guide's frozen-holder night on an embedded etcd and an SQLite file",
		Long: `demo replays the guide's month-end night with real processes and needs no
running service: it starts an embedded etcd and writes invoices to an SQLite
file in a temp dir.

Two runners of the invoice job contend for one lock. Runner 1 bills three
clients, then is frozen with SIGSTOP (as a host suspends a VM) before its
next write (fenced, after its lease check: no check closes that gap). Runner 2 takes over once the lease runs out.
Runner 1 wakes while runner 2 is still billing; runner 2 is held at the
client runner 1 was frozen on until runner 1's write of it is done, so that
the woken runner's write comes first on a loaded machine too. The night is
played twice: without the fence, the woken runner keeps billing; with it,
its very next write is refused. Then the writes are counted: those of the
stale runner that were accepted, and the second invoices the primary key
(client, month) turned away. The demo fails (exit 1) when the database shows
that the fence did not hold.`,
		Example: "  baton demo",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := runDemo(cmd.Context(), cmd.OutOrStdout(), keep)
			if err != nil && cmd.Context().Err() != nil {
				return &exitError{code: exitInterrupted, msg: "demo interrupted; its runners and its server are stopped"}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temp dir with the etcd data and the ledgers")
	cmd.AddCommand(&cobra.Command{
		Use:                "runner",
		Hidden:             true,
		Short:              "One runner of the demo (started by baton demo)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := demo.RunnerMain(cmd.Context(), args, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()); code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	})
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, keep bool) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find baton's own binary to start the runners: %w", err)
	}
	dir, err := os.MkdirTemp("", "baton-demo-*")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	srv, err := etcdserver.StartLocal(ctx, dir)
	if err != nil {
		return err
	}
	defer srv.Close()

	const ttl, interval, clients = 2 * time.Second, 300 * time.Millisecond, 10
	const freezeAfter, wakeAfter = 3, 2 // clients runner 1 bills before its freeze (the help says three); runner 2 handles before runner 1 wakes
	fmt.Fprintf(out, "baton demo: the guide's month-end night, replayed with real processes\n\n")
	kept := "removed on exit; --keep keeps it"
	if keep {
		kept = "kept"
	}
	fmt.Fprintf(out, "  lock service  embedded etcd at %s (data in %s, %s)\n", strings.TrimPrefix(srv.Endpoint(), "http://"), dir, kept)
	fmt.Fprintf(out, "  the job       bill %d clients, %v each, under the lock %q with a %v lease\n", clients, interval, warehouse.Job, ttl)
	fmt.Fprintf(out, "  the fault     runner 1 is frozen with SIGSTOP after %d clients, before its next write\n", freezeAfter)
	fmt.Fprintf(out, "                (fenced, after its lease check), and woken with SIGCONT after runner 2 has handled %d clients;\n", wakeAfter)
	fmt.Fprintf(out, "                runner 2 is held at client %d until the woken runner's write of it is done\n", freezeAfter+1)

	var results []*demo.Result
	for _, fenced := range []bool{false, true} {
		title, ledger := "Night 1: no fence (the team's first version)", "unfenced.db"
		if fenced {
			title, ledger = "Night 2: the same night, with the fence", "fenced.db"
		}
		fmt.Fprintf(out, "\n%s\n", title)
		start := time.Now()
		res, err := demo.Night(ctx, demo.Config{
			Etcd:        strings.TrimPrefix(srv.Endpoint(), "http://"),
			Ledger:      "sqlite:" + filepath.Join(dir, ledger),
			Fenced:      fenced,
			TTL:         ttl,
			Clients:     clients,
			Interval:    interval,
			FreezeAfter: freezeAfter,
			WakeAfter:   wakeAfter,
			Command: func(args []string) *exec.Cmd {
				return exec.CommandContext(ctx, self, append([]string{"demo", "runner"}, args...)...)
			},
			Log: func(e warehouse.Event) { printEvent(out, start, e) },
		})
		if err != nil {
			return fmt.Errorf("%s: %w", title, err)
		}
		results = append(results, res)
		fmt.Fprintf(out, "  => %s\n", verdict(res))
	}
	return printSummary(out, results[0], results[1])
}

func printEvent(out io.Writer, start time.Time, e warehouse.Event) {
	at := fmt.Sprintf("%6.2fs", e.At.Sub(start).Seconds())
	var what string
	switch e.Kind {
	case "acquired":
		what = fmt.Sprintf("holds the lock, fencing token %d", e.Token)
	case "fenced":
		what = fmt.Sprintf("raised the fence to %d (its first step)", e.Token)
	case "checked":
		return // one line per client is enough
	case "billed":
		what = fmt.Sprintf("billed client %d", e.Client)
	case "skipped":
		what = fmt.Sprintf("client %d already billed: insert did nothing", e.Client)
	case "frozen":
		what = "FROZEN with SIGSTOP: no code runs, no renewal is sent"
	case "woken":
		what = "WOKEN with SIGCONT: it does not know its lease ended"
	case "rejected":
		what = fmt.Sprintf("write for client %d REJECTED: the fence has seen token %d, this is %d", e.Client, e.Newest, e.Token)
	case "lost":
		what = fmt.Sprintf("noticed its lease was lost before client %d; stops", e.Client)
	case "released":
		what = "finished its loop, but not under its lease: " + e.Err
	case "done":
		what = "finished its loop and released the lock"
	default:
		what = e.Kind + " " + e.Err
	}
	fmt.Fprintf(out, "  %s  %-8s %s\n", at, e.Runner, what)
}

// firstWake says what became of the woken runner's first write.
func firstWake(r *demo.Result) string {
	e := r.FirstWake
	switch {
	case e == nil:
		return "-"
	case e.Kind == "rejected":
		return fmt.Sprintf("rejected: client %d (token %d < %d)", e.Client, e.Token, e.Newest)
	case e.Kind == "billed":
		return fmt.Sprintf("accepted: client %d (token %d)", e.Client, r.Token1)
	}
	return fmt.Sprintf("turned away by the primary key: client %d", e.Client)
}

func verdict(r *demo.Result) string {
	dup := fmt.Sprintf("second invoices turned away by the primary key: %d", len(r.Duplicates))
	if len(r.StaleWrites) > 0 {
		return fmt.Sprintf("the woken runner billed %d clients (%v) after runner 2 took over; %s", len(r.StaleWrites), r.StaleWrites, dup)
	}
	if r.Rejected != nil {
		return fmt.Sprintf("the woken runner's next write was refused; it billed nobody after the takeover; %s", dup)
	}
	return fmt.Sprintf("the woken runner wrote nothing after the takeover; %s", dup)
}

// printSummary prints the two nights side by side and what they showed,
// from what was measured: an error when the fenced night's database and
// runners show that the fence did not hold (demo.Result.FenceHeld), which
// is a bug.
func printSummary(out io.Writer, unfenced, fenced *demo.Result) error {
	fmt.Fprintf(out, "\nWhat happened\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  \tno fence\twith the fence\n")
	fmt.Fprintf(tw, "  fencing tokens (runner 1, runner 2)\t%d, %d\t%d, %d\n", unfenced.Token1, unfenced.Token2, fenced.Token1, fenced.Token2)
	fmt.Fprintf(tw, "  takeover after the freeze\t%v\t%v\n", unfenced.Takeover.Round(10*time.Millisecond), fenced.Takeover.Round(10*time.Millisecond))
	fmt.Fprintf(tw, "  writes by the stale runner accepted\t%d\t%d\n", len(unfenced.StaleWrites), len(fenced.StaleWrites))
	fmt.Fprintf(tw, "  first write after waking\t%s\t%s\n", firstWake(unfenced), firstWake(fenced))
	fmt.Fprintf(tw, "  second invoices turned away by the primary key\t%d\t%d\n", len(unfenced.Duplicates), len(fenced.Duplicates))
	_ = tw.Flush()
	if err := fenced.FenceHeld(); err != nil {
		return fmt.Errorf("the fenced night did not go as the fence promises, a bug in baton; please report it with this output: %s", joinLines(err.Error()))
	}
	fmt.Fprintf(out, "\n")
	if len(unfenced.Duplicates)+len(fenced.Duplicates) > 0 {
		fmt.Fprintf(out, "The primary key on (client, month) turned away every second invoice, so nobody was billed twice either way;\n")
	}
	switch {
	case len(unfenced.StaleWrites) == 0:
		fmt.Fprintf(out, "this time the woken runner got no write in after the takeover even without the fence: run it again to see the failure.\n")
	default:
		fmt.Fprintf(out, "without the fence the woken runner billed %d clients it no longer held the lock for; with it, its next write was refused.\n", len(unfenced.StaleWrites))
	}
	return nil
}
