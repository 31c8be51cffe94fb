package zk_test

import (
	"context"
	"path"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/zk"
)

// TestObserve_Handoff: a release with a waiter queued is one change of
// leader, with no empty term between; the last release shows as no leader.
func TestObserve_Handoff(t *testing.T) {
	servers := []string{zkServer.Addr(t)}
	a := dial(t, servers, zk.Settings{}, baton.WithHolder("a"))
	b := dial(t, servers, zk.Settings{}, baton.WithHolder("b"))
	obs := dial(t, servers, zk.Settings{})
	name := "observe-handoff"
	terms, err := obs.Observe(timeout(t, 60*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	next := func() string { t.Helper(); return batontest.NextLeader(t, terms, 10*time.Second) }
	if got := next(); got != "-" {
		t.Fatalf("first term %q, want no leader", got)
	}
	la, err := a.Acquire(timeout(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "a" {
		t.Fatalf("term %q, want a", got)
	}
	got := make(chan *baton.FencedLease, 1)
	go func() {
		lb, err := b.Acquire(timeout(t, 20*time.Second), name)
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	admin := adminConn(t, servers...)
	waitChildren(t, admin, path.Dir(la.Key()), 2) // b is queued

	_ = la.Release(context.Background())
	if got := next(); got != "b" {
		t.Fatalf("after a handoff the term is %q, want b directly", got)
	}
	lb := <-got
	_ = lb.Release(context.Background())
	if got := next(); got != "-" {
		t.Fatalf("after the last release the term is %q, want no leader", got)
	}
}
