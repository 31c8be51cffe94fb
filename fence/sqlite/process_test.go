package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/sqlite"
)

// workerEnv names the database file a worker process writes to.
const workerEnv = "BATON_SQLITE_TEST_WORKER"

const (
	workerProcs  = 4
	workerWrites = 40
	workerDDL    = `CREATE TABLE writes (seq INTEGER PRIMARY KEY, token INTEGER NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE counter (n INTEGER NOT NULL);
CREATE TABLE ready (pid INTEGER PRIMARY KEY);
INSERT INTO counter VALUES (0)`
)

// Several processes share one file, each making fenced writes with random
// tokens. A counter bumped inside each fenced transaction records the
// commit order; the tokens in that order must never go down.
func TestStore_MultiProcess(t *testing.T) {
	s, db, path := newStore(t)
	mustExec(t, db, workerDDL)
	s.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, workerProcs)
	outs := make([]*bytes.Buffer, workerProcs)
	for i := range cmds {
		cmds[i] = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmds[i].Env = append(os.Environ(), workerEnv+"="+path)
		outs[i] = new(bytes.Buffer)
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %d: %v\n%s", i, err, outs[i])
		}
	}
	if t.Failed() {
		return
	}

	rows, err := db.Query(`SELECT token, pid FROM writes ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var tokens []int64
	pids := map[int]bool{}
	for rows.Next() {
		var tok int64
		var pid int
		if err := rows.Scan(&tok, &pid); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		pids[pid] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tokens) == 0 || !slices.IsSorted(tokens) {
		t.Fatalf("tokens in commit order %v: want a non-empty, non-decreasing sequence", tokens)
	}
	s2, err := sqlite.Open(t.Context(), path, sqlite.WithCreate(false))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n, err := s2.Newest(t.Context(), "r"); err != nil || int64(n) != tokens[len(tokens)-1] {
		t.Errorf("Newest = %d, %v; want the last committed token %d", n, err, tokens[len(tokens)-1])
	}
	t.Logf("%d of %d writes accepted, from %d processes", len(tokens), workerProcs*workerWrites, len(pids))
}

// worker is one process of TestStore_MultiProcess.
func worker(path string) error {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.WithCreate(false), sqlite.WithBusyTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer s.Close()
	pid := os.Getpid()
	if err := barrier(ctx, path, pid); err != nil {
		return err
	}
	for i := range workerWrites {
		// Rising with jitter, so that the processes overtake each other:
		// many writes pass, many are stale.
		token := baton.Token(i*10 + rand.IntN(40) + 1)
		err := s.WithTx(ctx, "r", token, func(ctx context.Context, tx *sql.Tx) error {
			var n int64
			if err := tx.QueryRowContext(ctx, `UPDATE counter SET n = n + 1 RETURNING n`).Scan(&n); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO writes VALUES (?, ?, ?)`, n, int64(token), pid)
			return err
		})
		if err != nil && !errors.Is(err, baton.ErrStaleToken) {
			return fmt.Errorf("worker %d, token %d: %w", pid, token, err)
		}
	}
	return nil
}

// barrier returns when all workerProcs workers have reached it, so that
// their writes overlap.
func barrier(ctx context.Context, path string, pid int) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(60000)")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO ready VALUES (?)`, pid); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM ready`).Scan(&n); err != nil {
			return err
		}
		if n == workerProcs {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("worker %d: %d of %d workers started: %w", pid, n, workerProcs, ctx.Err())
		case <-tick.C:
		}
	}
}
