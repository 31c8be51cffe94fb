package fencesql

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/baton-go/baton"
)

// Row is the shape of postgres.Row and sqlite.Row, which convert to it:
// the table to insert into, the columns and their values, and the columns
// of the unique key.
type Row struct {
	Table   string
	Columns []string
	Values  []any
	Key     []string
}

// Validate checks the row's shape and names: its table with the rules of
// ValidateTable (qualifier as there), at least one column, one value per
// column, and column and key names that are single identifiers, each
// listed once.
func (r Row) Validate(qualifier string) error {
	if err := ValidateTable("row table", r.Table, qualifier); err != nil {
		return err
	}
	if len(r.Columns) == 0 {
		return &baton.OptionError{Option: "row columns", Value: "[]", Reason: fmt.Sprintf("are empty; name the columns of %q to set", r.Table)}
	}
	if len(r.Values) != len(r.Columns) {
		return &baton.OptionError{Option: "row values", Value: strconv.Itoa(len(r.Values)),
			Reason: fmt.Sprintf("do not match the %d columns; give one value per column", len(r.Columns))}
	}
	for _, set := range []struct {
		what  string
		names []string
	}{{"row column", r.Columns}, {"row key column", r.Key}} {
		for i, c := range set.names {
			if err := validateIdent(set.what, c, c); err != nil {
				return err
			}
			if slices.Contains(set.names[:i], c) {
				return &baton.OptionError{Option: set.what, Value: strconv.Quote(c), Reason: "is listed twice"}
			}
		}
	}
	return nil
}
