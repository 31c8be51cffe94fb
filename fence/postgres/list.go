package postgres

import (
	"context"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
)

// Entry is one fence, as List returns it: its Resource, the newest Token
// it has accepted, and UpdatedAt, when it first accepted that token. It is
// the same type as sqlite.Entry and fence.Entry.
type Entry = fencesql.Entry

// List returns every fence in the store, sorted by resource, for
// `baton fence show`.
func (s *Store) List(ctx context.Context) ([]Entry, error) {
	var (
		resources []string
		tokens    []int64
		updated   []time.Time
	)
	// One row of three arrays keeps DB down to QueryRow; fence tables hold
	// one row per lock name, so they are small.
	if err := s.db.QueryRow(ctx, s.sql.list).Scan(&resources, &tokens, &updated); err != nil {
		return nil, s.wrap(ctx, "list fences", err, hintConnect)
	}
	entries := make([]Entry, len(resources))
	for i := range entries {
		entries[i] = Entry{Resource: resources[i], Token: baton.Token(tokens[i]), UpdatedAt: updated[i]}
	}
	return entries, nil
}
