package etcd

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestTerm_TieByName: of keys one transaction made together (another
// tool's), the leader is the first by name, whatever the map's order.
func TestTerm_TieByName(t *testing.T) {
	keys := map[string]*mvccpb.KeyValue{}
	for _, k := range []string{"p/c", "p/a", "p/d", "p/b"} {
		keys[k] = &mvccpb.KeyValue{Key: []byte(k), CreateRevision: 7}
	}
	keys["p/later"] = &mvccpb.KeyValue{Key: []byte("p/0"), CreateRevision: 9}
	for range 100 {
		if got := term("job", keys); got.Key != "p/a" || got.Token != 7 {
			t.Fatalf("term = %+v; want key p/a, token 7", got)
		}
	}
}
