package fencesql

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-go/baton"
)

// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN - 1), beyond
// which it silently truncates a name; SQLite names keep to it too, so that
// they stay portable.
const maxIdentLen = 63

// ValidateTable checks a table name, optionally qualified by one more name
// ("ops.fence"): each part is letters, digits and underscores, not starting
// with a digit, at most 63 bytes. what names the setting in the error;
// qualifier says what may qualify a table in this store, "schema" or
// "database".
func ValidateTable(what, name, qualifier string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return &baton.OptionError{Option: what, Value: strconv.Quote(name), Reason: "has more than one dot; write table or " + qualifier + ".table"}
	}
	for _, p := range parts {
		if err := validateIdent(what, name, p); err != nil {
			return err
		}
	}
	return nil
}

// ValidateTables checks a store's fence and runs table names with
// ValidateTable, and that they differ. It is for a store that quotes its
// names and so keeps their case, as PostgreSQL's does: there "Fence" and
// "fence" are two tables.
func ValidateTables(fence, runs, qualifier string) error {
	if err := validateBoth(fence, runs, qualifier); err != nil {
		return err
	}
	if fence == runs {
		return &baton.OptionError{Option: "runs table", Value: strconv.Quote(runs), Reason: "is the same as the fence table; give them different names"}
	}
	return nil
}

// ValidateTablesFolded is ValidateTables for a store whose names ignore
// case even when quoted, and in which an unqualified name means a table of
// the qualifier named def, as SQLite's do (def "main"): there "fence",
// "FENCE" and "main.Fence" are one table, and naming it twice would make
// the fence table and the runs table the same.
func ValidateTablesFolded(fence, runs, qualifier, def string) error {
	if err := validateBoth(fence, runs, qualifier); err != nil {
		return err
	}
	unqualified := func(name string) string {
		if q, t, ok := strings.Cut(name, "."); ok && strings.EqualFold(q, def) {
			return t
		}
		return name
	}
	if strings.EqualFold(unqualified(fence), unqualified(runs)) {
		return &baton.OptionError{Option: "runs table", Value: strconv.Quote(runs),
			Reason: fmt.Sprintf("is the same table as the fence table %q (names ignore case, and an unqualified name is in %s %s); give them different names", fence, qualifier, def)}
	}
	return nil
}

// validateBoth checks the fence and runs table names with ValidateTable.
func validateBoth(fence, runs, qualifier string) error {
	if err := ValidateTable("fence table", fence, qualifier); err != nil {
		return err
	}
	return ValidateTable("runs table", runs, qualifier)
}

// validateIdent checks one part of an SQL identifier: name is the whole
// value, for the message.
func validateIdent(what, name, part string) error {
	bad := func(reason string) error {
		return &baton.OptionError{Option: what, Value: strconv.Quote(name), Reason: reason}
	}
	switch {
	case part == "":
		return bad("is empty; use letters, digits and underscores")
	case len(part) > maxIdentLen:
		return bad(fmt.Sprintf("has a part of %d bytes; the limit is %d", len(part), maxIdentLen))
	case '0' <= part[0] && part[0] <= '9':
		return bad("starts with a digit; start it with a letter or an underscore")
	}
	for i := 0; i < len(part); i++ {
		b := part[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_') {
			return bad(fmt.Sprintf("has %q; use letters, digits and underscores", b))
		}
	}
	return nil
}
