package fence

import (
	"strings"
	"testing"
)

// FuzzSQLiteURL checks that no input panics the sqlite: URL parser, and
// that a URL it takes names a file and had no part that url.Parse takes
// out of the path: a fragment, a host, user info.
func FuzzSQLiteURL(f *testing.F) {
	for _, s := range []string{
		"sqlite:rel.db", "sqlite:/abs.db", "sqlite:///abs.db?busy_timeout=2s", "sqlite:a%23b.db",
		"sqlite:/srv/ledger#2.db", "sqlite://localhost/x.db", "sqlite://u:p@/x.db", "sqlite:", "sqlite:%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := parse(raw)
		if err != nil || u.Scheme != "sqlite" {
			return
		}
		path, _, err := sqliteURL(raw, u)
		if err != nil {
			return
		}
		if path == "" || strings.Contains(raw, "#") || u.Host != "" || u.User != nil {
			t.Fatalf("sqliteURL(%q) = %q; want it refused", raw, path)
		}
	})
}
