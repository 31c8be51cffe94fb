package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/postgres"
)

// TestHolder_NotStorable: a holder PostgreSQL cannot store as text (invalid
// UTF-8, a NUL byte) is a bad option (exit 2 under the CLI), refused by
// New and Dial, not an unavailable service that elections retry for ever.
func TestHolder_NotStorable(t *testing.T) {
	dsn := pg.Database(t)
	for _, h := range []string{"bad\xff", "nul\x00x"} {
		if fl, err := postgres.Dial(timeout(t, 10*time.Second), dsn, baton.WithHolder(h)); !errors.Is(err, baton.ErrInvalidOption) {
			if err == nil {
				_ = fl.Close()
			}
			t.Errorf("Dial with holder %q: %v; want ErrInvalidOption", h, err)
		}
		if _, err := postgres.New(timeout(t, 10*time.Second), newPool(t, dsn), baton.WithHolder(h)); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("New with holder %q: %v; want ErrInvalidOption", h, err)
		}
	}
}

// TestRelease_Unanswered_NamesReleaseTimeout: a release the server does not
// answer gives up after the release timeout, and says that bound, not the
// request timeout.
func TestRelease_Unanswered_NamesReleaseTimeout(t *testing.T) {
	p, pdsn := proxied(t, pg.Database(t))
	fl := dial(t, pdsn, baton.WithTTL(30*time.Second), baton.WithReleaseTimeout(time.Second), baton.WithRequestTimeout(4*time.Second))
	defer p.Unblock()
	batontest.ReleaseSilent(t, fl.Locker(), p.Block)
}

// TestClose_Unreachable_OneReleaseTimeout: Close ends its holds all at
// once, so a server that stopped answering holds it up one release
// timeout, not one per hold.
func TestClose_Unreachable_OneReleaseTimeout(t *testing.T) {
	p, pdsn := proxied(t, pg.Database(t))
	fl, err := postgres.New(timeout(t, 10*time.Second), newPool(t, pdsn), baton.WithReleaseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unblock()
	batontest.CloseSilent(t, fl.Locker(), p.Block)
}

// TestTokens_SequenceRecreated: a token sequence dropped and made again (a
// table restored alone with pg_dump -t), or set back (a logical
// replication cutover, which copies no sequence values): a lock's next
// holder still gets a token above its last one. The first case is the
// schema's setval on a sequence it makes; the second, greatest() alone.
func TestTokens_SequenceRecreated(t *testing.T) {
	for name, setBack := range map[string]string{
		"dropped":  `DROP SEQUENCE baton_lock_token`,       // Dial makes it again, above the tokens
		"set back": `SELECT setval('baton_lock_token', 1)`, // greatest(nextval, last + 1) alone holds
	} {
		t.Run(name, func(t *testing.T) {
			dsn := pg.Database(t)
			a := dial(t, dsn, baton.WithHolder("a"))
			ctx := timeout(t, 30*time.Second)
			var last baton.Token
			for range 3 {
				l, err := a.Acquire(ctx, "seq")
				if err != nil {
					t.Fatal(err)
				}
				last = l.Token()
				_ = l.Release(ctx)
			}
			_ = a.Close()
			execSQL(t, newPool(t, dsn), setBack)
			b := dial(t, dsn, baton.WithHolder("b"))
			l, err := b.Acquire(ctx, "seq")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			if l.Token() <= last {
				t.Fatalf("token %d after the lock's last holder had %d: tokens of one lock went backwards", l.Token(), last)
			}
		})
	}
}

// TestInspect_ByteOrder: Inspect lists locks in byte order, as the other
// backends do, whatever the collation of the name column (a database
// made with an en_US locale sorts "a" before "B").
func TestInspect_ByteOrder(t *testing.T) {
	dsn := pg.Database(t)
	admin := newPool(t, dsn)
	var icu int
	queryRow(t, admin, `SELECT count(*) FROM pg_collation WHERE collname = 'en-x-icu'`, nil, &icu)
	if icu == 0 {
		t.Skip("this PostgreSQL has no ICU collation en-x-icu to sort names by locale")
	}
	makeTables(t, dsn)
	fl := dial(t, dsn)
	execSQL(t, admin, `ALTER TABLE baton_lock ALTER COLUMN name TYPE text COLLATE "en-x-icu"`)
	ctx := timeout(t, 30*time.Second)
	for _, n := range []string{"b", "B", "a", "_z"} {
		l, err := fl.Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	for _, names := range [][]string{nil, {"b", "a", "_z", "B"}} {
		infos, err := fl.Locker().Backend().(baton.Inspector).Inspect(ctx, names...)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, i := range infos {
			got = append(got, i.Name)
		}
		if strings.Join(got, " ") != "B _z a b" {
			t.Errorf("Inspect(%q) order: %q; want byte order [B _z a b]", names, got)
		}
	}
}

// TestTickets_SequenceRecreated: a ticket sequence dropped and made again
// must not hand a new waiter the live row's ticket, which would let it
// "claim" the live lease, token and all: Dial makes it start above every
// ticket in the tables. Here a holds x, handed to it as a waiter (so the
// row keeps a's ticket, 1); b, waiting on a sequence made again, whose
// first ticket was 1, must not get x.
func TestTickets_SequenceRecreated(t *testing.T) {
	dsn := pg.Database(t)
	h := dial(t, dsn, baton.WithHolder("h"), baton.WithTTL(3*time.Second))
	a := dial(t, dsn, baton.WithHolder("a"), baton.WithTTL(3*time.Second))
	ctx := timeout(t, 30*time.Second)
	lh, err := h.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *baton.FencedLease, 1)
	go func() {
		la, err := a.Acquire(ctx, "x")
		if err != nil {
			t.Error(err)
		}
		got <- la
	}()
	admin := newPool(t, dsn)
	batontest.WaitFor(t, 10*time.Second, "a queues", func() bool { return queued(t, admin, "x") == 1 })
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	la := <-got
	if la == nil {
		t.FailNow()
	}
	defer la.Release(ctx)
	execSQL(t, admin, `DROP SEQUENCE baton_lock_ticket`)
	b := dial(t, dsn, baton.WithHolder("b"), baton.WithTTL(3*time.Second)) // makes the sequence again
	// b queues (drawing a ticket), and must still be waiting when its
	// ctx ends: a renews throughout.
	if lb, err := b.Acquire(timeout(t, 2*time.Second), "x"); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			t.Fatalf("b acquired x (token %d) while a holds it (token %d, lease err %v)", lb.Token(), la.Token(), la.Err())
		}
		t.Fatalf("b's Acquire: %v; want it still waiting when its ctx ends", err)
	}
}
