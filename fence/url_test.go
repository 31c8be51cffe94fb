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

// TestCheckURL_StoreExample: a fence store URL that does not parse is told
// how to write one with a fence store's example, not a lock service's.
func TestCheckURL_StoreExample(t *testing.T) {
	for _, raw := range []string{"postgres://u:s%zzecret@h/db", "postgres://h:bad/db", "://x"} {
		err := CheckURL(raw)
		if err == nil || strings.Contains(err.Error(), "etcd") || !strings.Contains(err.Error(), storeURLExample) || strings.Contains(err.Error(), "zzecret") {
			t.Errorf("CheckURL(%q) = %v; want an error with a fence store's example (postgres://...), no lock service's, no password", raw, err)
		}
	}
}
