package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testsvc"
)

// TestServe_Cluster runs a three-member `baton serve` cluster on loopback,
// kills the member that leads, and checks that baton run against the other
// two still acquires, with a higher token.
func TestServe_Cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	type member struct {
		name, client, peer string
		proc               *execResult
	}
	ms := make([]*member, 3)
	var initial []string
	for i := range ms {
		cp, err1 := testsvc.FreePort()
		pp, err2 := testsvc.FreePort()
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		ms[i] = &member{name: fmt.Sprintf("m%d", i+1), client: fmt.Sprintf("127.0.0.1:%d", cp), peer: fmt.Sprintf("http://127.0.0.1:%d", pp)}
		initial = append(initial, ms[i].name+"="+ms[i].peer)
	}
	for _, m := range ms {
		m.proc = startBaton(t, "serve", "--name", m.name, "--data-dir", t.TempDir(),
			"--listen", m.client, "--peer-listen", m.peer, "--initial-cluster", strings.Join(initial, ","))
	}
	all := "etcd://" + ms[0].client + "," + ms[1].client + "," + ms[2].client
	waitFor(t, 60*time.Second, func() bool { return runInProcess("status", "--backend", all).code == 0 }, func() string { return "cluster not serving" })

	token := func(backend string) int64 {
		t.Helper()
		r := runBaton(t, "run", "--backend", backend, "invoices", "--", "sh", "-c", `echo "$BATON_TOKEN"`)
		tok, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
		if r.code != 0 || err != nil {
			t.Fatalf("run against %s: exit %d, stdout %q, stderr %q", backend, r.code, r.stdout, r.stderr)
		}
		return tok
	}
	before := token(all)

	// Find and kill the leader.
	c := testsvc.Client(t, "http://"+ms[0].client)
	leader := -1
	for i, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.Status(ctx, "http://"+m.client)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member says it leads")
	}
	if err := syscall.Kill(ms[leader].proc.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ms[leader].proc.done
	var rest []string
	for i, m := range ms {
		if i != leader {
			rest = append(rest, m.client)
		}
	}
	remaining := "etcd://" + strings.Join(rest, ",")
	waitFor(t, 30*time.Second, func() bool { return runInProcess("status", "--backend", remaining).code == 0 }, func() string { return "no new leader" })
	after := token(remaining)
	t.Logf("killed leader %s; token %d before, %d after", ms[leader].name, before, after)
	if after <= before {
		t.Fatalf("token after the leader died %d <= %d before", after, before)
	}
}

// TestServe_PortInUse: a port already taken gets one error that says
// what to do.
func TestServe_PortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pp, _ := testsvc.FreePort()
	r := runInProcess("serve", "--data-dir", t.TempDir(), "--listen", ln.Addr().String(), "--peer-listen", fmt.Sprintf("127.0.0.1:%d", pp))
	if r.code != 1 || !strings.Contains(r.stderr, "address already in use") || !strings.Contains(r.stderr, "--listen") {
		t.Fatalf("serve on a port in use: exit %d, stderr %q; want 1 and what to do", r.code, r.stderr)
	}
	oneLine(t, r)
}

// TestServe_StopsWhileWaitingForPeers: a cluster member whose peers are
// not up stops on SIGTERM, as serve's help says. Before, it hung in etcd's
// Close (etcd issue 9533), deaf to signals, until SIGKILL.
func TestServe_StopsWhileWaitingForPeers(t *testing.T) {
	var ps [4]int
	for i := range ps {
		p, err := testsvc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	cluster := fmt.Sprintf("m1=http://127.0.0.1:%d,m2=http://127.0.0.1:%d,m3=http://127.0.0.1:%d", ps[1], ps[2], ps[3])
	p := startBaton(t, "serve", "--name", "m1", "--data-dir", t.TempDir(),
		"--listen", fmt.Sprintf("127.0.0.1:%d", ps[0]), "--peer-listen", fmt.Sprintf("127.0.0.1:%d", ps[1]), "--initial-cluster", cluster)
	// Waiting for its peers: its client port is up, it answers nothing.
	waitFor(t, 30*time.Second, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ps[0]))
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, func() string { return p.stderr.String() })
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve waiting for its peers did not stop within 15s of SIGTERM; stderr %q", p.stderr.String())
	}
}
