package fencesql_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence/internal/fencesql"
)

func TestValidateTable(t *testing.T) {
	for _, name := range []string{"baton_fence", "_f", "ops.Fence2", strings.Repeat("a", 63)} {
		if err := fencesql.ValidateTable("fence table", name, "schema"); err != nil {
			t.Errorf("ValidateTable(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", ".f", "f.", "a.b.c", "1f", "f-g", `f"g`, "f g", "fé", strings.Repeat("a", 64)} {
		if err := fencesql.ValidateTable("fence table", name, "schema"); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ValidateTable(%q): %v, want ErrInvalidOption", name, err)
		}
	}
	if err := fencesql.ValidateTable("fence table", "a.b.c", "database"); err == nil || !strings.Contains(err.Error(), "database.table") {
		t.Errorf("ValidateTable(a.b.c) with qualifier database: %v, want it to suggest database.table", err)
	}
}

func TestValidateTables(t *testing.T) {
	if err := fencesql.ValidateTables("baton_fence", "baton_runs", "schema"); err != nil {
		t.Error(err)
	}
	for _, tc := range [][2]string{{"same", "same"}, {"", "runs"}, {"fence", "1runs"}} {
		if err := fencesql.ValidateTables(tc[0], tc[1], "schema"); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ValidateTables(%q, %q): %v, want ErrInvalidOption", tc[0], tc[1], err)
		}
	}
}

func TestRow_Validate(t *testing.T) {
	good := fencesql.Row{Table: "invoices", Columns: []string{"client_id", "month"}, Values: []any{1, "2026-10"}, Key: []string{"client_id", "month"}}
	if err := good.Validate("schema"); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*fencesql.Row){
		"bad table":        func(r *fencesql.Row) { r.Table = "in voices" },
		"no columns":       func(r *fencesql.Row) { r.Columns, r.Values = nil, nil },
		"too few values":   func(r *fencesql.Row) { r.Values = r.Values[:1] },
		"bad column":       func(r *fencesql.Row) { r.Columns = []string{"client_id", "month;"} },
		"column twice":     func(r *fencesql.Row) { r.Columns = []string{"month", "month"} },
		"qualified column": func(r *fencesql.Row) { r.Columns = []string{"client_id", "i.month"} },
		"bad key":          func(r *fencesql.Row) { r.Key = []string{"1st"} },
		"key twice":        func(r *fencesql.Row) { r.Key = []string{"month", "month"} },
	} {
		r := good
		change(&r)
		if err := r.Validate("schema"); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestValidateToken(t *testing.T) {
	if err := fencesql.ValidateToken("invoices", 1); err != nil {
		t.Error(err)
	}
	for _, tc := range []struct {
		resource string
		token    baton.Token
	}{{"invoices", 0}, {"invoices", -1}, {"", 1}} {
		if err := fencesql.ValidateToken(tc.resource, tc.token); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ValidateToken(%q, %d): %v, want ErrInvalidOption", tc.resource, tc.token, err)
		}
	}
}

func TestValidateRun(t *testing.T) {
	if err := fencesql.ValidateRun("invoices", "2026-10-31"); err != nil {
		t.Error(err)
	}
	for _, runID := range []string{"", "a\x00b", "\xff", strings.Repeat("r", baton.MaxNameLen+1)} {
		if err := fencesql.ValidateRun("invoices", runID); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ValidateRun(%q): %v, want ErrInvalidOption", runID, err)
		}
	}
	if err := fencesql.ValidateRun("", "run"); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("ValidateRun with no resource: %v, want ErrInvalidOption", err)
	}
}

// FuzzValidateTable checks that an accepted name is one quoting cannot
// break out of: one or two parts of letters, digits and underscores.
func FuzzValidateTable(f *testing.F) {
	for _, s := range []string{"baton_fence", "ops.fence", "a.b.c", `f"g`, "1f", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if fencesql.ValidateTable("fence table", name, "schema") != nil {
			return
		}
		parts := strings.Split(name, ".")
		if len(parts) > 2 {
			t.Fatalf("accepted %q with %d parts", name, len(parts))
		}
		for _, p := range parts {
			if p == "" || len(p) > 63 || strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
				t.Fatalf("accepted %q", name)
			}
		}
	})
}
