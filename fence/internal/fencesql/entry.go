package fencesql

import (
	"time"

	"github.com/baton-go/baton"
)

// Entry is one fence, as a store's List returns it. fence.Entry,
// postgres.Entry and sqlite.Entry are aliases of it.
type Entry struct {
	Resource  string      // the resource, a lock name
	Token     baton.Token // the newest token the fence has accepted
	UpdatedAt time.Time   // when the fence first accepted Token
}
