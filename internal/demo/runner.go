// Package demo replays the guide's month-end night with real processes: two
// runners of the invoice job (examples/warehouse) contend for one etcd lock;
// runner 1 is frozen with SIGSTOP past its lease, runner 2 takes over, and
// runner 1 wakes up while runner 2 is still billing. Without the fence the
// woken runner keeps billing; with it, its very next write is refused.
// Either way the invoices table's primary key (client, month) turns away
// every second invoice, and Night counts those, so nobody is billed twice;
// what the fence adds is that the stale runner writes nothing at all.
package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcd"
	"github.com/baton-go/baton/examples/warehouse"
)

// RunnerArgs are the settings of one runner process.
type RunnerArgs struct {
	Etcd     string        // etcd endpoint, host:port
	Ledger   string        // ledger URL
	Name     string        // runner name in the events
	Fenced   bool          // write through the fence
	TTL      time.Duration // lease TTL
	Clients  int
	Interval time.Duration
	Month    string
	// PauseAt is the client whose "checked" event the runner follows by
	// waiting for a line on its stdin, before the work on that client: the
	// night freezes runner 1 there, then sends the line, so that the
	// runner cannot write before the freeze however late the night reads
	// the event; and it holds runner 2 there until woken runner 1 has
	// written that client, so that runner 1's write comes first however
	// slowly it wakes. 0: it never waits.
	PauseAt int
}

// Args renders a as command-line arguments for RunnerMain.
func (a RunnerArgs) Args() []string {
	return []string{
		"-etcd", a.Etcd, "-ledger", a.Ledger, "-name", a.Name,
		fmt.Sprintf("-fenced=%t", a.Fenced), "-ttl", a.TTL.String(),
		"-clients", fmt.Sprint(a.Clients), "-interval", a.Interval.String(), "-month", a.Month,
		"-pause-at", fmt.Sprint(a.PauseAt),
	}
}

// RunnerMain runs one runner: the invoice job, its events written to stdout
// as JSON lines, reading stdin only at PauseAt. It returns the process's
// exit code.
func RunnerMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var a RunnerArgs
	var def Config // the night's defaults are the runner's
	def.defaults()
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&a.Etcd, "etcd", "", "etcd endpoint")
	fs.StringVar(&a.Ledger, "ledger", "", "ledger URL")
	fs.StringVar(&a.Name, "name", "runner", "runner name")
	fs.BoolVar(&a.Fenced, "fenced", true, "write through the fence")
	fs.DurationVar(&a.TTL, "ttl", def.TTL, "lease TTL")
	fs.IntVar(&a.Clients, "clients", def.Clients, "clients to bill")
	fs.DurationVar(&a.Interval, "interval", def.Interval, "time per client")
	fs.StringVar(&a.Month, "month", def.Month, "month to bill")
	fs.IntVar(&a.PauseAt, "pause-at", 0, "client whose check waits for a line on stdin")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	enc := json.NewEncoder(stdout)
	in := bufio.NewReader(stdin)
	emit := func(e warehouse.Event) {
		_ = enc.Encode(e)
		if e.Kind == "checked" && e.Client == a.PauseAt {
			_, _ = in.ReadString('\n') // the night's go-ahead, sent once it froze us
		}
	}
	fail := func(err error) int {
		emit(warehouse.Event{At: time.Now(), Runner: a.Name, Kind: "error", Err: err.Error()})
		return 1
	}
	locker, err := etcd.Dial(ctx, strings.Split(a.Etcd, ","), baton.WithTTL(a.TTL), baton.WithHolder(a.Name))
	if err != nil {
		return fail(err)
	}
	defer locker.Close()
	ledger, err := warehouse.OpenLedger(ctx, a.Ledger)
	if err != nil {
		return fail(err)
	}
	defer ledger.Close()
	err = warehouse.RunInvoiceJob(ctx, locker, ledger, warehouse.JobConfig{
		Runner: a.Name, Clients: a.Clients, Month: a.Month, Interval: a.Interval, Fenced: a.Fenced,
	}, emit)
	if err != nil {
		return 1
	}
	return 0
}
