package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	fencepg "github.com/baton-go/baton/fence/postgres"
)

// holdFenceRow has an older holder (token 1) keep a fenced transaction on
// resource open in the PostgreSQL fence store at dsn, until the returned
// func is called.
func holdFenceRow(t *testing.T, dsn, resource string) (letGo func()) {
	t.Helper()
	ctx := context.Background()
	s, err := fencepg.Open(ctx, dsn, fencepg.WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	inside, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.WithTx(ctx, resource, 1, func(ctx context.Context, tx pgx.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	select {
	case <-inside:
	case err := <-done:
		t.Fatalf("the older holder's transaction: %v", err)
	}
	letGo = sync.OnceFunc(func() {
		close(release)
		if err := <-done; err != nil {
			t.Errorf("the older holder's transaction: %v", err)
		}
		s.Close()
	})
	t.Cleanup(letGo)
	return letGo
}

// TestFence_PostgresGaveUp: a raise that PostgreSQL gives up on (the
// lock_timeout the fence's doc suggests, here while an older holder's
// transaction holds the fence row) wrote nothing and may work later: run
// exits 69, and elect campaigns again. They exited 1 ("any other
// failure"), and elect gave up for good.
func TestFence_PostgresGaveUp(t *testing.T) {
	dsn := pg.Database(t)
	fence := dsn + "&lock_timeout=300"
	letGo := holdFenceRow(t, dsn, "mailer")

	r := runInProcess("run", "--backend", useFake(t, &fakeBackend{}), "--fence", fence, "mailer", "--", "true")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "lock timeout") {
		t.Fatalf("run whose raise ran into lock_timeout: exit %d, stderr %q; want %d", r.code, r.stderr, exitUnavailable)
	}
	oneLine(t, r)

	electAfterFailedRaise(t, fence, letGo, "lock timeout")
}

// TestFence_PostgresBadParameter: a run-time parameter the server does not
// know, in the store URL, is the URL's fault (exit 2), not an unreachable
// server (69, which wrappers retry).
func TestFence_PostgresBadParameter(t *testing.T) {
	r := runInProcess("fence", "init", "--store", pg.Database(t)+"&lock_timeot=1s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "lock_timeot") {
		t.Fatalf("fence init with a mistyped parameter: exit %d, stderr %q; want %d naming it", r.code, r.stderr, exitUsage)
	}
	oneLine(t, r)
}
