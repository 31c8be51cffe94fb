// Package holderval is what the etcd and ZooKeeper backends store in a
// lock's key or candidate node: who took it and when, as JSON, so that
// etcdctl get and zkCli's get show it plainly.
package holderval

import (
	"encoding/json"
	"time"
)

// NoData is the holder shown for a key or node without data: etcdctl lock
// and go-zookeeper's zk.Lock store nothing.
const NoData = "(no holder data)"

// Value is a stored holder value.
type Value struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"` // by the holder's clock
}

// Encode returns the value for holder, taking the lock now.
func Encode(holder string) []byte {
	b, _ := json.Marshal(Value{Holder: holder, Since: time.Now().UTC()}) // cannot fail
	return b
}

// Decode reads a stored value. The holder baton stored is returned as it
// was given, and data written by another client (Curator stores the
// client's IP address) as it is: whoever prints either makes it printable
// (baton.Printable). No data at all is NoData.
func Decode(v []byte) Value {
	var hv Value
	if json.Unmarshal(v, &hv) == nil {
		return hv
	}
	if len(v) == 0 {
		return Value{Holder: NoData}
	}
	return Value{Holder: string(v)}
}
