package zk_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/zk"
)

// ZooKeeper names a sequential node after its parent's child version, a
// signed 32-bit counter formatted as %010d: past 2^31-1 the names end in
// "-2147483648", "-2147483647", ... "-000000001". Curator's and zk.Lock's
// candidates are _c_<guid>-lock-NNNNNNNNNN (Curator's guid is a UUID, with
// dashes), kazoo's <hex>__lock__NNNNNNNNNN.
const (
	curator = "_c_0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0-lock-"
	kazoo   = "5d41402abc4b2a76b9719d911017c592__lock__"
	ours    = "_c_5d41402abc4b2a76b9719d911017c592-lock-"
)

// TestParseSeq: the sequence number is read from the name's last ten
// characters, as before, except a number ZooKeeper appended past the wrap,
// which has no place in line: before, "-2147483648" read as 2147483648
// (the newest candidate ahead of every older one) and "-000000001" as no
// candidate at all.
func TestParseSeq(t *testing.T) {
	for _, tc := range []struct {
		name string
		seq  int64
		ok   bool
	}{
		{ours + "0000000000", 0, true},
		{ours + "0000000005", 5, true},
		{ours + "2147483647", math.MaxInt32, true},
		{curator + "0000000003", 3, true},
		{kazoo + "0000000004", 4, true},
		{"_c_0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0-__READ__0000000001", 1, true}, // Curator's read-write lock
		{"latch-0000000002", 2, true},                                           // Curator's LeaderLatch
		{"lock--0000000005", 5, true},                                           // a prefix of lock- and 5: not a sign
		{"lock--0999999999", 999999999, true},                                   // a 10-digit negative starts at -1000000000
		// Past the wrap.
		{ours + "-2147483648", 0, false},
		{ours + "-2147483647", 0, false},
		{ours + "-1000000000", 0, false},
		{ours + "-999999999", 0, false},
		{ours + "-000000001", 0, false},
		{curator + "-2147483648", 0, false},
		{curator + "-000000001", 0, false},
		{kazoo + "-2147483648", 0, false},
		{kazoo + "-000000001", 0, false},
		// Not candidates.
		{"leases", 0, false},
		{"locks", 0, false},
		{"", 0, false},
		{"backup-123456789", 0, false},
		{"x-000000001", 0, false},
	} {
		seq, ok := zk.ParseSeq(tc.name)
		if seq != tc.seq || ok != tc.ok {
			t.Errorf("ParseSeq(%q) = %d, %v; want %d, %v", tc.name, seq, ok, tc.seq, tc.ok)
		}
	}
}

// TestOrderCandidates: candidates of every recipe queue by number, other
// children are left out; a candidate numbered past the wrap fails the
// listing, whatever its recipe, with ErrSequenceWrap (not
// baton.ErrUnavailable, which callers try again), naming the remedy.
func TestOrderCandidates(t *testing.T) {
	const dir = "/baton/lock/jobs"
	cands, err := zk.OrderCandidates(dir, []string{
		ours + "0000000007", "leases", kazoo + "0000000004", curator + "0000000005", "locks", "backup-123456789",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []zk.Candidate{{kazoo + "0000000004", 4}, {curator + "0000000005", 5}, {ours + "0000000007", 7}}
	if !slices.Equal(cands, want) {
		t.Fatalf("OrderCandidates = %v; want %v", cands, want)
	}
	for _, tc := range []struct {
		ours string
		pos  int
		pred zk.Candidate
	}{
		{ours + "0000000007", 2, want[1]},
		{curator + "0000000005", 1, want[0]},
		{kazoo + "0000000004", 0, zk.Candidate{}},
		{ours + "0000000009", -1, zk.Candidate{}},
	} {
		if pos, pred := zk.Predecessor(cands, tc.ours); pos != tc.pos || pred != tc.pred {
			t.Errorf("Predecessor(%s) = %d, %v; want %d, %v", tc.ours, pos, pred, tc.pos, tc.pred)
		}
	}

	// Around the wrap: each, first or last in the list, fails it.
	for _, wrapped := range []string{ours + "-2147483648", ours + "-2147483647", ours + "-000000001", curator + "-1000000000", kazoo + "-000000002"} {
		for _, kids := range [][]string{
			{wrapped, ours + "2147483645", curator + "2147483646"},
			{ours + "2147483645", curator + "2147483646", wrapped},
		} {
			cands, err := zk.OrderCandidates(dir, kids)
			if !errors.Is(err, zk.ErrSequenceWrap) || errors.Is(err, baton.ErrUnavailable) {
				t.Errorf("OrderCandidates(%q) = %v, %v; want an error matching zk.ErrSequenceWrap only", kids, cands, err)
				continue
			}
			for _, say := range []string{dir, wrapped, "deleteall"} {
				if !strings.Contains(err.Error(), say) {
					t.Errorf("error %q does not say %q", err, say)
				}
			}
		}
	}
}

// TestOrderCandidates_AtTheLimit: since ZooKeeper 3.6 the counter sticks
// at 2^31-1 once it has run out, and every later candidate is named
// ...2147483647: a candidate at the limit, or two with one number, fail
// the order as a wrapped one does (they sorted by name, so Inspect and
// Observe could name a waiter the holder).
func TestOrderCandidates_AtTheLimit(t *testing.T) {
	const dir = "/baton/lock/jobs"
	for _, kids := range [][]string{
		{curator + "2147483647", kazoo + "2147483647"},
		{ours + "2147483646", curator + "2147483647"},
		{ours + "0000000005", kazoo + "0000000005"},
	} {
		cands, err := zk.OrderCandidates(dir, kids)
		if !errors.Is(err, zk.ErrSequenceWrap) || errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), dir) {
			t.Errorf("OrderCandidates(%q) = %v, %v; want an error matching zk.ErrSequenceWrap only, naming %s", kids, cands, err, dir)
		}
	}
}

// TestSeqRoom: an acquisition whose node ZooKeeper numbered past the
// wrap, or within the margin of it, is refused, with an error matching
// ErrSequenceWrap (not baton.ErrUnavailable) that names the election node
// and the remedy. The number is read from the name: the child version in
// a Stat counts deletes too (0000000003 is the fourth create; the Stat
// says 7 once three were deleted), and overflows first.
func TestSeqRoom(t *testing.T) {
	const dir = "/baton/lock/jobs"
	for _, tc := range []struct {
		seq string
		ok  bool
	}{
		{"0000000000", true},
		{"0000000003", true},
		{"1073741824", true}, // 2^30, where the Stat's child version overflows
		{strconv.Itoa(math.MaxInt32 - zk.SeqMargin), true},
		{strconv.Itoa(math.MaxInt32 - zk.SeqMargin + 1), false},
		{"2147483647", false},
		{"-2147483648", false},
		{"-000000001", false},
	} {
		name := ours + tc.seq
		err := zk.SeqRoom(dir, name)
		switch {
		case tc.ok && err != nil:
			t.Errorf("SeqRoom(%s) = %v; want nil", name, err)
		case !tc.ok && (!errors.Is(err, zk.ErrSequenceWrap) || errors.Is(err, baton.ErrUnavailable)):
			t.Errorf("SeqRoom(%s) = %v; want an error matching zk.ErrSequenceWrap only", name, err)
		case !tc.ok && (!strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "deleteall") || !strings.Contains(err.Error(), name)):
			t.Errorf("SeqRoom(%s) = %q; want it to name %s, our node and the remedy", name, err, dir)
		}
	}
}

// TestAcquire_WrappedCandidate: a candidate numbered past the wrap (made
// here by hand, by name) stands in the election node. An acquisition
// there fails with ErrSequenceWrap, at once, whether it would wait or
// not, and leaves no node behind. Before, our node went ahead of it and
// took the lock: "-2147483648" read as a larger number than ours, and
// "-000000001" was not seen. Children of other recipes, and ones that are
// not candidates, are as before: a kazoo candidate ahead holds the lock.
func TestAcquire_WrappedCandidate(t *testing.T) {
	addr := zkServer.Addr(t)
	admin := adminConn(t, addr)
	fl := dial(t, []string{addr}, zk.Settings{})
	ctx := timeout(t, 30*time.Second)
	for _, suffix := range []string{"-2147483648", "-000000001"} {
		name := uniqueName(t)
		dir := lockDir(name)
		mkdirs(t, admin, dir)
		wrapped := dir + "/" + curator + suffix
		for _, p := range []string{dir + "/leases", wrapped} {
			if _, err := admin.Create(p, nil, zkgo.FlagPersistent, zkgo.WorldACL(zkgo.PermAll)); err != nil {
				t.Fatal(err)
			}
		}
		if l, err := fl.TryAcquire(ctx, name); !errors.Is(err, zk.ErrSequenceWrap) {
			if err == nil {
				_ = l.Release(ctx)
			}
			t.Fatalf("TryAcquire beside %s = %v; want an error matching zk.ErrSequenceWrap", wrapped, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := fl.Acquire(wctx, name)
		cancel()
		if err == nil {
			_ = l.Release(ctx)
		}
		if !errors.Is(err, zk.ErrSequenceWrap) {
			t.Fatalf("Acquire beside %s = %v; want an error matching zk.ErrSequenceWrap", wrapped, err)
		}
		if kids := children(t, admin, dir); len(kids) != 2 {
			t.Fatalf("children of %s after the refusals: %q; want the two made by hand", dir, kids)
		}

		// A kazoo candidate holds the lock, as before, beside a child that
		// is not a candidate.
		if err := admin.Delete(wrapped, -1); err != nil {
			t.Fatal(err)
		}
		kz, err := admin.Create(dir+"/"+kazoo, nil, zkgo.FlagEphemeralSequential, zkgo.WorldACL(zkgo.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		if l, err := fl.TryAcquire(ctx, name); !errors.Is(err, baton.ErrNotAcquired) {
			if err == nil {
				_ = l.Release(ctx)
			}
			t.Fatalf("TryAcquire behind kazoo's %s = %v; want ErrNotAcquired", kz, err)
		}
		if err := admin.Delete(kz, -1); err != nil {
			t.Fatal(err)
		}
		l, err = fl.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("TryAcquire beside a child that is not a candidate: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dir + "/leases", dir} {
			if err := admin.Delete(p, -1); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// mkdirs creates path and its missing ancestors, as persistent nodes.
func mkdirs(t *testing.T, c *zkgo.Conn, path string) {
	t.Helper()
	p := ""
	for _, seg := range strings.Split(path[1:], "/") {
		p += "/" + seg
		if _, err := c.Create(p, nil, zkgo.FlagPersistent, zkgo.WorldACL(zkgo.PermAll)); err != nil && !errors.Is(err, zkgo.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}
}
