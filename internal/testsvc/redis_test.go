package testsvc

import (
	"testing"
	"time"
)

func TestRedis_Lifecycle(t *testing.T) {
	r := StartRedis(t)
	if err := r.Ping(time.Second); err != nil {
		t.Fatalf("PING after start: %v", err)
	}

	r.Pause()
	if err := r.Ping(200 * time.Millisecond); err == nil {
		t.Fatal("a paused server answered PING")
	}
	r.Resume()
	if err := r.Ping(time.Second); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	r.Kill()
	select {
	case <-r.Exited():
	default:
		t.Fatal("Kill returned before the process exited")
	}
	if err := r.Ping(200 * time.Millisecond); err == nil {
		t.Fatal("a killed server answered PING")
	}
	r.Stop() // harmless after Kill
}

func TestRedis_Nodes(t *testing.T) {
	nodes := StartRedisNodes(t, 3)
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Addr] {
			t.Fatalf("two nodes on %s", n.Addr)
		}
		seen[n.Addr] = true
		if err := n.Ping(time.Second); err != nil {
			t.Errorf("node %s: %v", n.Addr, err)
		}
	}
	nodes[0].Stop()
	if err := nodes[0].Ping(200 * time.Millisecond); err == nil {
		t.Error("a stopped node answered PING")
	}
	if err := nodes[1].Ping(time.Second); err != nil {
		t.Errorf("stopping one node affected another: %v", err)
	}
	if v, err := RedisVersion(); err != nil || v == "" {
		t.Errorf("RedisVersion = %q, %v", v, err)
	} else {
		t.Logf("redis-server %s", v)
	}
}
