package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/redlock"
)

func TestParseURL(t *testing.T) {
	u, err := baton.ParseURL("redlock://app:pw@h1:7001,h2,h3:7003/1?ttl=10s&drift=50ms&prefix=jobs:")
	if err != nil {
		t.Fatal(err)
	}
	os, opts, err := redlock.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, o := range os {
		addrs = append(addrs, o.Addr)
		if o.DB != 1 || o.Username != "app" || o.Password != "pw" {
			t.Errorf("node %s: db %d user %q password %q", o.Addr, o.DB, o.Username, o.Password)
		}
	}
	if got := strings.Join(addrs, ","); got != "h1:7001,h2:6379,h3:7003" {
		t.Errorf("nodes %s", got)
	}
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != 10*time.Second || cfg.Drift != 50*time.Millisecond || cfg.Prefix != "jobs:" {
		t.Errorf("options from the URL not applied: ttl %v, drift %v, prefix %q", cfg.TTL, cfg.Drift, cfg.Prefix)
	}
	// The node lists url.Parse alone refuses.
	for raw, want := range map[string]string{
		"redlock://a:7000,b,c":                       "a:7000,b:6379,c:6379",
		"redlock://[::1]:7000,[::1]:7001,[::1]:7002": "[::1]:7000,[::1]:7001,[::1]:7002",
		"redlock://A,b,[::ffff:127.0.0.1]:1":         "a:6379,b:6379,127.0.0.1:1",
	} {
		u, err := baton.ParseURL(raw)
		if err != nil {
			t.Errorf("baton.ParseURL(%q): %v", raw, err)
			continue
		}
		os, _, err := redlock.ParseURL(u)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", raw, err)
			continue
		}
		var addrs []string
		for _, o := range os {
			addrs = append(addrs, o.Addr)
		}
		if got := strings.Join(addrs, ","); got != want {
			t.Errorf("ParseURL(%q) nodes %s, want %s", raw, got, want)
		}
	}
	// A user without a password would run as the default user (go-redis
	// sends no AUTH without one): refused, saying what to write. A
	// password alone is the default user's.
	for _, raw := range []string{"redlock://app@a,b,c", "redlock://app:@a,b,c/2"} {
		u, _ := baton.ParseURL(raw)
		_, _, err := redlock.ParseURL(u)
		var oerr *baton.OptionError
		if !errors.As(err, &oerr) || !strings.Contains(err.Error(), "app:PASSWORD@") || !strings.Contains(err.Error(), "nopass") {
			t.Errorf("ParseURL(%q) = %v, want an option error saying to write app:PASSWORD@", raw, err)
		}
	}
	for raw, want := range map[string][2]string{
		"redlock://:pw@a,b,c": {"", "pw"},
		"redlock://:@a,b,c":   {"", ""},
	} {
		u, _ := baton.ParseURL(raw)
		os, _, err := redlock.ParseURL(u)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", raw, err)
			continue
		}
		for _, o := range os {
			if o.Username != want[0] || o.Password != want[1] {
				t.Errorf("ParseURL(%q): node %s user %q password %q; want %q, %q", raw, o.Addr, o.Username, o.Password, want[0], want[1])
			}
		}
	}
	for _, bad := range []string{"redlock://", "redlock://h:1", "redlock://app@a,b,c",
		// one server written twice: its two votes would make a majority alone
		"redlock://a:1,a:01,b:1", "redlock://a:1,a:+1,b:1", "redlock://a:1,A:1,b:1", "redlock://[::1]:1,[::0001]:1,b:1", "redlock://a:1,b:1", "redlock://a:1,b:1,c:1,d:1", "redlock://a:1,a:1,b:1",
		"redlock://a:1,,b:1", "redlock://a:1,b:x,c:1", "redlock://a,b,c/x", "redlock://a,b,c?ttl=ten", "redlock://a,b,c?colour=red", "redlock://a,b,c?drift=1ms&drift=2ms", "redis://a,b,c"} {
		u, err := baton.ParseURL(bad)
		if err == nil {
			_, _, err = redlock.ParseURL(u)
		}
		if !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

// TestParseURL_MalformedQuery: what url.URL.Query drops without a word
// is refused, and the error says how to write it: a ';' between pairs
// (the TTL and prefix were the defaults, shared with every other
// application), a bad escape, a fragment (the prefix was cut at '#').
func TestParseURL_MalformedQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"redlock://a,b,c?ttl=5s;prefix=app:":  "with '&' between pairs",
		"redlock://a,b,c?prefix=a%zz":         `invalid URL escape "%zz"`,
		"redlock://a,b,c?ttl=5s&prefix=app#2": "write a '#' in a path or parameter as %23",
		"redlock://a,b,c/0#frag":              "has a #fragment",
	} {
		u, err := baton.ParseURL(raw)
		if err != nil {
			t.Errorf("baton.ParseURL(%q): %v", raw, err)
			continue
		}
		if _, _, err := redlock.ParseURL(u); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q) = %v, want an option error saying %q", raw, err, want)
		}
	}
	u, _ := baton.ParseURL("redlock://a,b,c?prefix=a%3Bb%23c%25")
	if _, opts, err := redlock.ParseURL(u); err != nil {
		t.Errorf("ParseURL(%s): %v", u, err)
	} else if cfg, _ := baton.NewConfig(opts...); cfg.Prefix != "a;b#c%" {
		t.Errorf("ParseURL(%s): prefix %q, want %q", u, cfg.Prefix, "a;b#c%")
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redlock://a:1,b:2,c:3", "redlock://u:p@a,b,c/2?ttl=5s", "redlock://[::1]:1,[::1]:2,[::1]:3?drift=1ms", "redlock://u@a,b,c", "redlock://:p@a,b,c", "redlock://u:@a,b,c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := baton.ParseURL(s)
		if err != nil {
			return
		}
		nodes, _, err := redlock.ParseURL(u)
		if err != nil {
			if !errors.Is(err, baton.ErrInvalidOption) {
				t.Fatalf("error %v is not an option error", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error %q", err)
			}
			if p, ok := u.User.Password(); ok && len(p) > 3 && strings.Contains(err.Error(), p) {
				t.Fatalf("error %q shows the password", err)
			}
			return
		}
		if len(nodes) < 3 || len(nodes)%2 == 0 {
			t.Fatalf("accepted %q with %d nodes", s, len(nodes))
		}
		for _, o := range nodes {
			if o.Username != "" && o.Password == "" {
				t.Fatalf("accepted %q with user %q and no password: it would run as the default user", s, o.Username)
			}
		}
	})
}
