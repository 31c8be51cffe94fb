package postgres_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/postgres"
	"github.com/jackc/pgx/v5"
)

// The single statement's two data-modifying CTEs both run, and the row's
// INSERT sees the fence CTE's result.
func TestStore_Insert_StaleVsDuplicate(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustExec(t, pool, invoicesDDL)
	newest := func(want baton.Token) {
		t.Helper()
		if n, err := s.Newest(ctx, "invoices"); err != nil || n != want {
			t.Fatalf("Newest = %d, %v; want %d", n, err, want)
		}
	}
	insert := func(token int64, client int, want bool) {
		t.Helper()
		got, err := s.Insert(ctx, "invoices", baton.Token(token), invoice(client, token))
		if err != nil || got != want {
			t.Fatalf("Insert(token %d, client %d) = %v, %v; want %v, nil", token, client, got, err, want)
		}
	}

	insert(5, 1, true) // no fence row yet: the fence CTE inserts it
	newest(5)
	insert(7, 1, false) // duplicate row, newer token: the fence is still raised
	newest(7)
	insert(7, 2, true)

	got, err := s.Insert(ctx, "invoices", 6, invoice(3, 6))
	var stale *baton.StaleTokenError
	if !errors.As(err, &stale) || got || *stale != (baton.StaleTokenError{Resource: "invoices", Got: 6, Newest: 7}) {
		t.Fatalf("Insert(token 6) = %v, %v; want false and stale (got 6, newest 7)", got, err)
	}
	// A stale token with a duplicate row is still stale, not a duplicate.
	if _, err := s.Insert(ctx, "invoices", 6, invoice(1, 6)); !errors.Is(err, baton.ErrStaleToken) {
		t.Fatalf("Insert(token 6, duplicate row): %v, want ErrStaleToken", err)
	}
	newest(7)
	if n := count(t, pool, "SELECT count(*) FROM invoices"); n != 2 {
		t.Errorf("%d invoices, want 2", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM invoices WHERE client_id = 1 AND token = 5"); n != 1 {
		t.Errorf("client 1's invoice was overwritten")
	}

	// A row the table refuses fails the whole statement: the fence stays.
	bad := invoice(4, 9)
	bad.Values[3] = nil // token NOT NULL
	if _, err := s.Insert(ctx, "invoices", 9, bad); err == nil || errors.Is(err, baton.ErrStaleToken) || errors.Is(err, baton.ErrUnavailable) {
		t.Fatalf("Insert of a NULL token: %v, want the not-null violation", err)
	}
	newest(7)
}

// A holder's write made again, from inside its own open WithTx of the
// same resource: a duplicate row, and a run marked done again. The fence
// holds the token, so they neither raise it nor wait: before, both ran the
// raising statement, whose queue lock waited for the open transaction,
// which waited for them, until their ctx ended.
func TestStore_Insert_DuplicateInsideWithTx(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustExec(t, pool, invoicesDDL)
	if _, err := s.Insert(ctx, "invoices", 41, invoice(1, 41)); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkDone(ctx, "invoices", "night-1", 41); err != nil {
		t.Fatal(err)
	}
	err := s.WithTx(ctx, "invoices", 41, func(ctx context.Context, tx pgx.Tx) error {
		bounded, cancel := context.WithTimeout(ctx, 10*time.Second) // a bound on the answer, not a timing
		defer cancel()
		if got, err := s.Insert(bounded, "invoices", 41, invoice(1, 41)); got || err != nil {
			t.Errorf("duplicate Insert inside WithTx = %v, %v; want false, nil", got, err)
		}
		if err := s.MarkDone(bounded, "invoices", "night-1", 41); err != nil {
			t.Errorf("MarkDone again inside WithTx: %v", err)
		}
		if got, err := s.Insert(bounded, "invoices", 41, invoice(2, 41)); !got || err != nil {
			t.Errorf("new row's Insert inside WithTx = %v, %v; want true, nil", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "SELECT count(*) FROM invoices"); n != 2 {
		t.Errorf("%d invoices, want 2", n)
	}
}

func TestStore_InsertOnce_Duplicate(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustExec(t, pool, invoicesDDL)
	var results []bool
	err := s.WithTx(ctx, "invoices", 3, func(ctx context.Context, tx pgx.Tx) error {
		for _, c := range []int{1, 1, 2} {
			ok, err := postgres.InsertOnce(ctx, tx, invoice(c, 3))
			if err != nil {
				return err
			}
			results = append(results, ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true}; !slices.Equal(results, want) {
		t.Errorf("InsertOnce results %v, want %v", results, want)
	}
	// Without Key, any unique constraint counts.
	r := invoice(2, 3)
	r.Key = nil
	if ok, err := postgres.InsertOnce(ctx, pool, r); err != nil || ok {
		t.Errorf("InsertOnce without Key of a duplicate = %v, %v; want false, nil", ok, err)
	}
}

// Concurrent fenced transactions with random tokens commit in token order:
// a counter bumped inside each transaction records the commit order, since
// they all take the fence row's lock.
func TestStore_WithTx_ConcurrentHolders(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustExec(t, pool, `CREATE TABLE writes (seq bigint PRIMARY KEY, token bigint NOT NULL)`)
	mustExec(t, pool, `CREATE TABLE counter (n bigint NOT NULL)`)
	mustExec(t, pool, `INSERT INTO counter VALUES (0)`)

	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				token := baton.Token(rand.IntN(200) + 1)
				err := s.WithTx(ctx, "r", token, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `WITH c AS (UPDATE counter SET n = n + 1 RETURNING n) INSERT INTO writes SELECT n, $1 FROM c`, int64(token))
					return err
				})
				if err != nil && !errors.Is(err, baton.ErrStaleToken) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT token FROM writes ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) == 0 || !slices.IsSorted(tokens) {
		t.Fatalf("tokens in commit order %v: want a non-empty, non-decreasing sequence", tokens)
	}
	if n, err := s.Newest(ctx, "r"); err != nil || int64(n) != tokens[len(tokens)-1] {
		t.Errorf("Newest = %d, %v; want the last committed token %d", n, err, tokens[len(tokens)-1])
	}
}
