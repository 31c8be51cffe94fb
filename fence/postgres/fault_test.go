package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/postgres"
	"github.com/jackc/pgx/v5"
)

// terminate ends the backend that runs tx, from another connection, and
// waits until it is gone.
func terminate(t *testing.T, ctx context.Context, tx pgx.Tx) {
	t.Helper()
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, pg.Admin(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var ok bool
	if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
}

func TestStore_WithTx_ConnectionKilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		// after the kill: make another write, or go straight to COMMIT
		writeAfter bool
	}{{"write after kill", true}, {"commit after kill", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newStore(t)
			ctx := t.Context()
			mustExec(t, pool, invoicesDDL)
			if err := s.Raise(ctx, "invoices", 5); err != nil {
				t.Fatal(err)
			}
			err := s.WithTx(ctx, "invoices", 6, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := postgres.InsertOnce(ctx, tx, invoice(1, 6)); err != nil {
					return err
				}
				terminate(t, ctx, tx)
				if !tc.writeAfter {
					return nil
				}
				_, err := postgres.InsertOnce(ctx, tx, invoice(2, 6))
				return err
			})
			if !errors.Is(err, baton.ErrUnavailable) {
				t.Fatalf("WithTx with its connection killed: %v, want ErrUnavailable", err)
			}
			t.Log(err)
			if n := count(t, pool, "SELECT count(*) FROM invoices"); n != 0 {
				t.Errorf("%d invoices written by the killed transaction, want none", n)
			}
			if n, err := s.Newest(ctx, "invoices"); err != nil || n != 5 {
				t.Errorf("Newest = %d, %v; want 5: the killed transaction's raise must not stick", n, err)
			}
			// The pool replaced the dead connection.
			if err := s.Raise(ctx, "invoices", 6); err != nil {
				t.Errorf("Raise after the kill: %v", err)
			}
		})
	}
}

// A transaction that passed the check holds the fence row until it ends, so
// a newer holder's raise waits for its writes to commit, and the older
// holder's next transaction is refused. Checked on both paths of Check: the
// first write of a token (the upsert, an exclusive lock) and the next ones
// (SELECT ... FOR SHARE).
func TestStore_Raise_WaitsForFencedTx(t *testing.T) {
	for _, tc := range []struct {
		name   string
		raised bool // the fence holds 41 before the transaction
	}{{"upsert path", false}, {"share path", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, pool := newStore(t)
			ctx := t.Context()
			mustExec(t, pool, invoicesDDL)
			if tc.raised {
				if err := s.Raise(ctx, "invoices", 41); err != nil {
					t.Fatal(err)
				}
			}

			inside := make(chan int32)
			release := make(chan struct{})
			letGo := sync.OnceFunc(func() { close(release) })
			defer letGo() // also when the test fails before it lets fn return
			txErr := make(chan error, 1)
			go func() {
				txErr <- s.WithTx(ctx, "invoices", 41, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := postgres.InsertOnce(ctx, tx, invoice(1, 41)); err != nil {
						return err
					}
					var pid int32
					if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
						return err
					}
					inside <- pid
					<-release
					return nil
				})
			}()
			var pid int32
			select {
			case pid = <-inside:
			case err := <-txErr:
				t.Fatalf("WithTx(41): %v", err)
			}

			raiseErr := make(chan error, 1)
			go func() { raiseErr <- s.Raise(ctx, "invoices", 42) }()
			waitBlockedBy(t, ctx, pool, pid, raiseErr)
			letGo()
			if err := <-txErr; err != nil {
				t.Fatalf("WithTx(41): %v", err)
			}
			if err := <-raiseErr; err != nil {
				t.Fatalf("Raise(42): %v", err)
			}

			err := s.WithTx(ctx, "invoices", 41, func(ctx context.Context, tx pgx.Tx) error {
				t.Error("fn ran with a stale token")
				return nil
			})
			if !errors.Is(err, baton.ErrStaleToken) {
				t.Fatalf("WithTx(41) after Raise(42): %v, want ErrStaleToken", err)
			}
			if _, err := s.Insert(ctx, "invoices", 41, invoice(2, 41)); !errors.Is(err, baton.ErrStaleToken) {
				t.Fatalf("Insert(41) after Raise(42): %v, want ErrStaleToken", err)
			}
			if n := count(t, pool, "SELECT count(*) FROM invoices WHERE token = 41"); n != 1 {
				t.Errorf("%d invoices with token 41, want the 1 committed before the raise", n)
			}
		})
	}
}

// Transactions with the token the fence already holds do not wait for each
// other: each share-locks the fence row.
func TestStore_WithTx_SameTokenInParallel(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	mustExec(t, pool, invoicesDDL)
	if err := s.Raise(ctx, "invoices", 7); err != nil {
		t.Fatal(err)
	}
	// Each transaction waits inside fn for the other to be inside too;
	// if the fence made them take turns, neither would get there.
	const n = 2
	var arrived sync.WaitGroup
	arrived.Add(n)
	errs := make(chan error, n)
	for c := range n {
		go func() {
			errs <- s.WithTx(ctx, "invoices", 7, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := postgres.InsertOnce(ctx, tx, invoice(c, 7)); err != nil {
					return err
				}
				arrived.Done()
				waited := make(chan struct{})
				go func() { arrived.Wait(); close(waited) }()
				select {
				case <-waited:
					return nil
				case <-ctx.Done():
					return fmt.Errorf("the other transaction never got past the fence: %w", ctx.Err())
				}
			})
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// waitBlockedBy waits until some backend is blocked by pid's locks, failing
// if done delivers first.
func waitBlockedBy(t *testing.T, ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, pid int32, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var blocked bool
		err := db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))", pid).Scan(&blocked)
		if err != nil {
			t.Fatal(err)
		}
		if blocked {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("returned (%v) while the fenced transaction still held the fence row", err)
		case <-ctx.Done():
			t.Fatal("nothing blocked on the fenced transaction")
		case <-tick.C:
		}
	}
}

// Insert's single statement share-locks the fence row until it commits: a
// newer holder's raise waits for it even while the insert itself waits, here
// for another transaction that holds the same key.
func TestStore_Insert_RaiseWaits(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustExec(t, pool, invoicesDDL)
	if err := s.Raise(ctx, "invoices", 42); err != nil {
		t.Fatal(err)
	}
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(context.WithoutCancel(ctx))
	if _, err := other.Exec(ctx, `INSERT INTO invoices VALUES (1, '2026-10', 1, 0)`); err != nil {
		t.Fatal(err)
	}

	insertErr := make(chan error, 1)
	go func() {
		ok, err := s.Insert(ctx, "invoices", 42, invoice(1, 42))
		if err == nil && !ok {
			err = errors.New("Insert(42) inserted nothing")
		}
		insertErr <- err
	}()
	waitLockWait(t, ctx, pool, `WITH f AS (_SELECT 1 FROM%`, insertErr)

	raiseErr := make(chan error, 1)
	go func() { raiseErr <- s.Raise(ctx, "invoices", 43) }()
	waitLockWait(t, ctx, pool, `INSERT INTO "baton_fence"%`, raiseErr)

	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-insertErr; err != nil {
		t.Fatalf("Insert(42): %v", err)
	}
	if err := <-raiseErr; err != nil {
		t.Fatalf("Raise(43): %v", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM invoices WHERE token = 42"); n != 1 {
		t.Errorf("%d invoices with token 42, want 1", n)
	}
}

// waitLockWait waits until a statement matching the LIKE pattern waits for
// a lock in this database, failing if done delivers first.
func waitLockWait(t *testing.T, ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, like string, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting bool
		err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1)`, like).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("%s returned (%v) instead of waiting for a lock", like, err)
		case <-ctx.Done():
			t.Fatalf("%s never waited for a lock", like)
		case <-tick.C:
		}
	}
}

// TestStore_Insert_ConnectionKilled_SaysUnknown: a fenced Insert is one
// statement, its own transaction; when its connection fails while it runs,
// it may or may not have committed, and the error says so instead of
// telling the caller that nothing was written (a retry would find its own
// row and report it there already).
func TestStore_Insert_ConnectionKilled_SaysUnknown(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustExec(t, pool, invoicesDDL)
	if err := s.Raise(ctx, "invoices", 5); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT FROM baton_fence WHERE resource = 'invoices' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Insert(ctx, "invoices", 5, invoice(1, 5))
		done <- err
	}()
	waitLockWait(t, ctx, pool, `WITH f AS (_SELECT 1 FROM%`, done)
	mustExec(t, pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH f AS (_SELECT 1 FROM%'`)
	err = <-done
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "may or may not have been committed") {
		t.Fatalf("Insert whose connection was killed = %v; want ErrUnavailable saying it may have been committed", err)
	}
}

// TestStore_GaveUp_IsUnavailable: a raise that PostgreSQL gives up on
// (here lock_timeout, which the package doc suggests to bound the wait
// for an older holder's transaction) wrote nothing and may succeed later:
// it is ErrUnavailable, saying so, as when baton's own timeout ends the
// wait. It was an unclassified error, and baton elect --fence quit on it
// instead of campaigning again.
func TestStore_GaveUp_IsUnavailable(t *testing.T) {
	dsn := pg.Database(t)
	ctx := t.Context()
	holder, err := postgres.Open(ctx, dsn, postgres.WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := holder.Raise(ctx, "invoices", 41); err != nil {
		t.Fatal(err)
	}
	impatient, err := postgres.Open(ctx, dsn+"&lock_timeout=200")
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()

	inside, release := make(chan struct{}), make(chan struct{})
	txErr := make(chan error, 1)
	go func() {
		txErr <- holder.WithTx(ctx, "invoices", 41, func(ctx context.Context, tx pgx.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	err = impatient.Raise(ctx, "invoices", 42)
	close(release)
	if err := <-txErr; err != nil {
		t.Fatalf("WithTx(41): %v", err)
	}
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("Raise(42) that waited past lock_timeout: %v; want ErrUnavailable saying nothing was written", err)
	}
	if err := impatient.Raise(ctx, "invoices", 42); err != nil {
		t.Fatalf("Raise(42) again, with the row free: %v", err)
	}
}

// TestStore_Raise_NotStarved: an older holder whose fenced transactions
// overlap one another, so that the fence row is never without a share
// lock, does not keep a newer holder's raise out. The raise waits for the
// transactions begun before it, and the older holder's next ones wait for
// the raise, and are refused. On row locks alone, a new FOR SHARE is
// granted at once while the row has only share locks, a waiting raise or
// not: the raise waited 5s (its context's end) while the older holder
// committed 291 more transactions.
func TestStore_Raise_NotStarved(t *testing.T) {
	// The newer holder's store names the fence table as the older one's
	// does, or qualified by its schema: one table, one queue.
	for _, table := range []string{"baton_fence", "public.baton_fence"} {
		t.Run(table, func(t *testing.T) { raiseNotStarved(t, table) })
	}
}

func raiseNotStarved(t *testing.T, table string) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustExec(t, pool, invoicesDDL)
	if err := s.Raise(ctx, "invoices", 41); err != nil {
		t.Fatal(err)
	}
	newer, err := postgres.New(ctx, pool, postgres.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}

	const writers = 3
	var (
		mu        sync.Mutex
		raiseAt   time.Time // when the raise was sent; zero before
		committed int       // the older holder's transactions committed after that
		stale, ok int
	)
	inside := make(chan struct{}, writers)
	// The writers stop at the first stale token, or when a raise that
	// failed ends them (else they would write on for ever).
	wctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for n := 1; ; n++ {
				err := s.WithTx(wctx, "invoices", 41, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := postgres.InsertOnce(ctx, tx, invoice(w*100000+n, 41)); err != nil {
						return err
					}
					select {
					case inside <- struct{}{}:
					default:
					}
					time.Sleep(50 * time.Millisecond) // overlaps the other writers' transactions
					return nil
				})
				mu.Lock()
				switch {
				case errors.Is(err, baton.ErrStaleToken):
					stale++
				case err == nil:
					ok++
					if !raiseAt.IsZero() {
						committed++
					}
				}
				mu.Unlock()
				if err != nil {
					if !errors.Is(err, baton.ErrStaleToken) && wctx.Err() == nil {
						t.Errorf("writer %d: %v", w, err)
					}
					return
				}
			}
		})
	}
	for range writers {
		<-inside // every writer is inside a transaction: the row is share-locked
	}

	mu.Lock()
	raiseAt = time.Now()
	mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raised := make(chan error, 1)
	go func() { raised <- newer.Raise(rctx, "invoices", 42) }()
	// Once the raise is seen waiting for its lock on the server, only the
	// transactions under way then may commit, one per writer; the next
	// ones queue behind the raise. Counted from there, not from the send,
	// so that a raise slow to reach a loaded server counts nothing against
	// the fence. Starved, it was hundreds.
	before := -1 // committed when the raise was first seen waiting
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		var waiting bool
		qerr := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO %baton_fence% AS cur%')`).Scan(&waiting)
		if qerr != nil {
			t.Fatal(qerr)
		}
		if waiting {
			mu.Lock()
			before = committed
			mu.Unlock()
			break
		}
		select {
		case err = <-raised:
			raised <- err // the raise went through before it was seen waiting
			break wait
		case <-tick.C:
		}
	}
	err = <-raised
	took := time.Since(raiseAt)
	if err != nil {
		stopWriters()
	}
	wg.Wait()
	if err != nil {
		t.Fatalf("Raise(42) while the older holder went on writing: %v (after %v; %d of its transactions committed meanwhile)", err, took, committed)
	}
	t.Logf("Raise(42) took %v; %d of the older holder's transactions committed after it was sent, %d after it was seen waiting", took.Round(time.Millisecond), committed, committed-before)
	switch {
	case before >= 0 && committed-before > writers:
		t.Errorf("%d of the older holder's transactions committed after the raise was seen waiting; want at most %d, one under way then per writer", committed-before, writers)
	case before < 0 && committed > 2*writers:
		// Through before it was seen waiting: each writer's transaction
		// under way as the raise was sent, and one begun before it
		// reached the server.
		t.Errorf("%d of the older holder's transactions committed after the raise was sent; want at most %d", committed, 2*writers)
	}
	if stale != writers {
		t.Errorf("%d writers refused as stale, want %d", stale, writers)
	}
	if n := count(t, pool, "SELECT count(*) FROM invoices WHERE token = 41"); n != ok {
		t.Errorf("%d invoices with token 41 in the table, want the %d the committed transactions wrote", n, ok)
	}
}

// TestStore_MarkDone_InsideTx_RaiseQueued: a MarkDone of the resource made
// from inside an open WithTx, on another connection, while a newer
// holder's raise waits for that transaction, does not wait for the raise
// (which waits for the transaction, which waits for the MarkDone): it
// share-locks the row without the queue lock, and the transaction then
// commits, and the raise goes through.
func TestStore_MarkDone_InsideTx_RaiseQueued(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.Raise(ctx, "invoices", 41); err != nil {
		t.Fatal(err)
	}
	raised := make(chan error, 1)
	err := s.WithTx(ctx, "invoices", 41, func(ctx context.Context, tx pgx.Tx) error {
		var pid int32
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		go func() { raised <- s.Raise(ctx, "invoices", 42) }()
		waitBlockedBy(t, ctx, pool, pid, raised)
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		defer mcancel()
		return s.MarkDone(mctx, "invoices", "night-1", 41)
	})
	if err != nil {
		t.Fatalf("WithTx(41) whose MarkDone ran while a raise waited: %v", err)
	}
	if err := <-raised; err != nil {
		t.Fatalf("Raise(42): %v", err)
	}
	if done, err := s.Done(ctx, "invoices", "night-1"); err != nil || !done {
		t.Fatalf("Done = %v, %v; want the run marked done by token 41, before the raise", done, err)
	}
}
