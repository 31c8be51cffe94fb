package benchcycle

import (
	"context"

	zkgo "github.com/go-zookeeper/zk"
)

// ZKLock returns a Cycler on go-zookeeper's own lock recipe (zk.Lock) for
// the lock node path, on conn, open to all: ZooKeeper's recipe as a Go
// team would take it off the shelf, the peer of baton's zk and postgres
// backends. zk.Lock takes no context: Lock and Unlock ignore theirs, and
// Lock waits for as long as the lock is held.
func ZKLock(conn *zkgo.Conn, path string) Cycler {
	return &zkLockCycler{l: zkgo.NewLock(conn, path, zkgo.WorldACL(zkgo.PermAll))}
}

type zkLockCycler struct{ l *zkgo.Lock }

func (c *zkLockCycler) Lock(context.Context) error   { return c.l.Lock() }
func (c *zkLockCycler) Unlock(context.Context) error { return c.l.Unlock() }
