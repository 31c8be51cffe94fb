package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton"
)

// Entry is one fence: a resource, the newest token it has accepted, and
// when it last accepted one.
type Entry struct {
	Resource  string
	Token     baton.Token
	UpdatedAt time.Time
}

// List returns every fence in the store, sorted by resource, for
// `baton fence show`.
func (s *Store) List(ctx context.Context) ([]Entry, error) {
	rows, err := s.db.QueryContext(ctx, s.sql.list)
	if err != nil {
		return nil, s.wrap(ctx, "list fences", err, hintOpen)
	}
	defer rows.Close()
	var entries []Entry
	for rows.Next() {
		var (
			e       Entry
			updated string
		)
		if err := rows.Scan(&e.Resource, &e.Token, &updated); err != nil {
			return nil, s.wrap(ctx, "list fences", err, hintOpen)
		}
		if e.UpdatedAt, err = time.Parse(timeLayout, updated); err != nil {
			return nil, fmt.Errorf("list fences: %q has updated_at %q, not a time written by baton: %w", e.Resource, updated, err)
		}
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "list fences", err, hintOpen)
	}
	return entries, nil
}
