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

// TestValidateTablesFolded: in SQLite names ignore case and an unqualified
// name is in database main, so each pair refused names one table; in
// PostgreSQL, which quotes names and keeps their case, "Fence" and
// "fence" are two tables.
func TestValidateTablesFolded(t *testing.T) {
	for _, tc := range [][2]string{{"fence", "FENCE"}, {"Fence", "main.fence"}, {"MAIN.fence", "fence"}, {"main.f", "Main.F"}} {
		err := fencesql.ValidateTablesFolded(tc[0], tc[1], "database", "main")
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "same table as the fence table") {
			t.Errorf("ValidateTablesFolded(%q, %q): %v, want ErrInvalidOption naming the same table", tc[0], tc[1], err)
		}
	}
	for _, tc := range [][2]string{{"fence", "runs"}, {"fence", "other.fence"}, {"main.fence", "other.fence"}, {"mainfence", "fence"}} {
		if err := fencesql.ValidateTablesFolded(tc[0], tc[1], "database", "main"); err != nil {
			t.Errorf("ValidateTablesFolded(%q, %q): %v", tc[0], tc[1], err)
		}
	}
	if err := fencesql.ValidateTablesFolded("fence", "1runs", "database", "main"); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("ValidateTablesFolded with a bad runs name: %v, want ErrInvalidOption", err)
	}
	if err := fencesql.ValidateTables("Fence", "fence", "schema"); err != nil {
		t.Errorf("ValidateTables(Fence, fence): %v; PostgreSQL keeps their case, so they are two tables", err)
	}
}

// TestStaleUnread: a refusal whose newest token could not be read is a
// stale token, holding the read's error, and its message does not claim
// the newest token is 0.
func TestStaleUnread(t *testing.T) {
	readErr := errors.New("disk I/O error")
	err := fencesql.StaleUnread("invoices", 41, readErr)
	var stale *baton.StaleTokenError
	if !errors.Is(err, baton.ErrStaleToken) || !errors.Is(err, readErr) || !errors.As(err, &stale) {
		t.Fatalf("StaleUnread = %v; want it to match ErrStaleToken and the read's error", err)
	}
	if *stale != (baton.StaleTokenError{Resource: "invoices", Got: 41}) {
		t.Errorf("its StaleTokenError is %+v, want resource invoices, got 41, newest 0 (unknown)", *stale)
	}
	want := `fence "invoices" refused token 41: it has seen a newer token; another holder took the lock since (the newest token is unknown: disk I/O error)`
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
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
