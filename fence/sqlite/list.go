package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton/fence/internal/fencesql"
)

// Entry is one fence, as List returns it: its Resource, the newest Token
// it has accepted, and UpdatedAt, when it first accepted that token. It is
// the same type as postgres.Entry and fence.Entry.
type Entry = fencesql.Entry

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
