package zk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/zk"
)

// TestInspect_HoldersAndWaiters: status shows the holder, its token and
// node, and how many wait; a forced release deletes the holder's node, the
// holder learns it lost the lease, and the next in line gets the lock.
func TestInspect_HoldersAndWaiters(t *testing.T) {
	addr := zkServer.Addr(t)
	root := "/" + uniqueName(t)
	ctx := timeout(t, 30*time.Second)
	// The holder learns of the forced release at its next renewal, every
	// TTL/3: the suite's short TTL keeps that within the 5s below.
	holder := dial(t, []string{addr}, zk.Settings{}, baton.WithTTL(suiteTTL), baton.WithPrefix(root), baton.WithHolder("web-1:42"))
	lease, err := holder.Acquire(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	admin := adminConn(t, addr)
	got := make(chan *baton.FencedLease, 2)
	for i := range 2 {
		w := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(root))
		go func() {
			l, err := w.Acquire(ctx, "invoices")
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- l
		}()
		waitChildren(t, admin, root+"/invoices", i+2)
	}
	status := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(root)).Locker().Backend()
	insp := status.(baton.Inspector)
	infos, err := insp.Inspect(ctx, "invoices", "stock")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 {
		t.Fatalf("Inspect returned %+v, want invoices and stock", infos)
	}
	inv, stock := infos[0], infos[1]
	if inv.Name != "invoices" || inv.Holder != "web-1:42" || inv.Token != lease.Token() || inv.Key != lease.Key() || inv.Waiters != 2 || inv.TTLLeft != -1 {
		t.Errorf("invoices: %+v; want holder web-1:42, token %d, key %s, 2 waiters, TTL left -1 (unknown)", inv, lease.Token(), lease.Key())
	}
	if time.Since(inv.Since) > time.Minute || inv.Since.After(time.Now()) {
		t.Errorf("since %v", inv.Since)
	}
	if stock.Name != "stock" || stock.Holder != "" || stock.Key != "" {
		t.Errorf("stock, never taken: %+v", stock)
	}
	all, err := insp.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Name != "invoices" {
		t.Errorf("Inspect() = %+v, want the one held lock", all)
	}

	info, err := status.(baton.ForceReleaser).ForceRelease(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != lease.Key() {
		t.Errorf("forced release of %s, want %s", info.Key, lease.Key())
	}
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("holder not told within 5s that its node was deleted")
	}
	if !errors.Is(lease.Err(), baton.ErrLeaseLost) || !strings.Contains(lease.Err().Error(), "deleted") {
		t.Errorf("holder's Err = %v, want a loss saying the node was deleted", lease.Err())
	}
	next := <-got
	if next == nil || next.Token() <= lease.Token() {
		t.Fatalf("next holder %v", next)
	}
	_ = next.Release(ctx)
	last := <-got
	if last != nil {
		_ = last.Release(ctx)
	}
	if _, err := status.(baton.ForceReleaser).ForceRelease(ctx, "stock"); !errors.Is(err, baton.ErrNotAcquired) {
		t.Errorf("ForceRelease of a free lock = %v, want ErrNotAcquired", err)
	}
	_ = lease.Release(context.Background()) // lost: nil, and harmless
}

// TestForceRelease_LostAnswer: a forced release whose delete is applied
// but whose answer is lost (the connection cut right after the request
// left) sends it again once reconnected, finds the node gone, and reports
// the release done. Told that it failed, an operator would force again,
// and free the next holder's lock.
func TestForceRelease_LostAnswer(t *testing.T) {
	addr := zkServer.Addr(t)
	root := "/" + uniqueName(t)
	ctx := timeout(t, 30*time.Second)
	holder := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(root), baton.WithHolder("web-1:42"))
	lease, err := holder.Acquire(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	waiter := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(root), baton.WithHolder("web-2:43"))
	got := make(chan *baton.FencedLease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "invoices")
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	waitChildren(t, adminConn(t, addr), root+"/invoices", 2)

	d := &cutDialer{onDelete: true}
	conn := d.connect(t, addr)
	fl, err := zk.New(conn, baton.WithTTL(longTTL), baton.WithPrefix(root))
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	d.armed.Store(true)
	info, err := fl.Locker().Backend().(baton.ForceReleaser).ForceRelease(ctx, "invoices")
	if d.cuts.Load() != 1 {
		t.Fatalf("%d connections cut, want 1", d.cuts.Load())
	}
	if err != nil || info.Holder != "web-1:42" {
		t.Fatalf("forced release across a lost answer: %+v, %v; want web-1:42's released", info, err)
	}
	select {
	case <-lease.Done():
	case <-ctx.Done():
		t.Fatal("the forced holder's lease did not end")
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the next holder's lease: %v", err)
	}
	if l.Token() <= lease.Token() {
		t.Errorf("next holder's token %d <= %d", l.Token(), lease.Token())
	}
	_ = l.Release(ctx)
}

// TestInspect_BadName_NoRequest: a bad lock name is refused at once, before
// any request: a server that does not answer does not hold it up, nor
// turn it into ErrUnavailable.
func TestInspect_BadName_NoRequest(t *testing.T) {
	conn, _, err := zkgo.Connect([]string{"127.0.0.1:1"}, 10*time.Second, zkgo.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	fl, err := zk.New(conn, baton.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // far below the request timeout
	defer cancel()
	if _, err := fl.Locker().Backend().(baton.Inspector).Inspect(ctx, "ok", "bad/name"); !errors.Is(err, baton.ErrInvalidOption) {
		t.Fatalf("Inspect with a bad name, server unreachable: %v; want ErrInvalidOption at once", err)
	}
}

// TestInspect_OddLockListedWithItsError: a list of every lock (baton
// status without names) shows a lock it cannot tell (its sequence numbers
// wrapped; an ACL that refuses this identity) with its error, and the
// others as they are; named, that lock is an error. Before, one such
// election node under the root failed the whole list.
func TestInspect_OddLockListedWithItsError(t *testing.T) {
	addr := zkServer.Addr(t)
	root := "/" + uniqueName(t)
	ctx := timeout(t, 30*time.Second)
	holder := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(root))
	lease, err := holder.Acquire(ctx, "good")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	looker := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(root))
	insp := looker.Locker().Backend().(baton.Inspector)

	admin := adminConn(t, addr)
	mkdirs(t, admin, root+"/wrapped")
	if _, err := admin.Create(root+"/wrapped/"+curator+"-000000001", nil, zkgo.FlagPersistent, zkgo.WorldACL(zkgo.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Create(root+"/alices", nil, zkgo.FlagPersistent, zkgo.DigestACL(zkgo.PermAll, "alice", "s3cret")); err != nil {
		t.Fatal(err)
	}

	infos, err := insp.Inspect(ctx)
	if err != nil || len(infos) != 3 || infos[1].Name != "good" || infos[1].Token != lease.Token() || infos[1].Err != nil {
		t.Fatalf("Inspect() = %+v, %v; want alices and wrapped with their errors, and the good lock held", infos, err)
	}
	if in := infos[0]; in.Name != "alices" || !errors.Is(in.Err, baton.ErrInvalidOption) || in.Holder != "" {
		t.Errorf("Inspect()[0] = %+v; want alices with the ACL's refusal (ErrInvalidOption) alone", in)
	}
	if in := infos[2]; in.Name != "wrapped" || !errors.Is(in.Err, zk.ErrSequenceWrap) || in.Holder != "" {
		t.Errorf("Inspect()[2] = %+v; want wrapped with ErrSequenceWrap alone", in)
	}
	if _, err := insp.Inspect(ctx, "wrapped"); !errors.Is(err, zk.ErrSequenceWrap) {
		t.Errorf("Inspect(wrapped) = %v, want ErrSequenceWrap", err)
	}
	if _, err := insp.Inspect(ctx, "alices"); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("Inspect(alices) = %v, want the ACL's refusal (ErrInvalidOption)", err)
	}

	// No lock can be told (credentials that no election node's ACL
	// takes): the refusal, not a list of errors alone.
	only := "/" + uniqueName(t) + "-refused"
	mkdirs(t, admin, only)
	if _, err := admin.Create(only+"/alices", nil, zkgo.FlagPersistent, zkgo.DigestACL(zkgo.PermAll, "alice", "s3cret")); err != nil {
		t.Fatal(err)
	}
	refused := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(only)).Locker().Backend().(baton.Inspector)
	if infos, err := refused.Inspect(ctx); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("Inspect() with every lock refused = %+v, %v; want the ACL's refusal (ErrInvalidOption)", infos, err)
	}
}

// TestForceRelease_Refused_NoRetry: a forced release the server refuses
// (an identity the election node's ACL lets read, not delete) returns the
// refusal at its answer, and the holder holds on. Before, the refusal was
// tried again for twice the request timeout, as if its answer had been
// lost, and a try that then found the node gone (the holder releasing
// meanwhile) reported the lock freed by force.
func TestForceRelease_Refused_NoRetry(t *testing.T) {
	addr := zkServer.Addr(t)
	root := "/" + uniqueName(t)
	ctx := timeout(t, 30*time.Second)
	acl := append(zkgo.DigestACL(zkgo.PermAll, "alice", "s3cret"), zkgo.WorldACL(zkgo.PermRead)...)
	alice := zk.Settings{Auth: &zk.Digest{User: "alice", Password: "s3cret"}, ACL: acl}
	holder := dial(t, []string{addr}, alice, baton.WithPrefix(root))
	lease, err := holder.Acquire(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	const requestTimeout = 5 * time.Second
	other := dial(t, []string{addr}, zk.Settings{}, baton.WithPrefix(root), baton.WithRequestTimeout(requestTimeout))
	start := time.Now()
	_, err = other.Locker().Backend().(baton.ForceReleaser).ForceRelease(ctx, "invoices")
	took := time.Since(start)
	if !errors.Is(err, baton.ErrInvalidOption) {
		t.Fatalf("ForceRelease by an identity that may not delete = %v; want the ACL's refusal (ErrInvalidOption)", err)
	}
	// A bound on one answer, far from the old twice the request timeout.
	if took >= requestTimeout {
		t.Errorf("ForceRelease took %v to return a refusal: tried again, as for a lost answer", took)
	}
	if lease.Context().Err() != nil {
		t.Fatalf("the holder lost its lease to a refused forced release: %v", lease.Err())
	}
}
