package urlparam

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		ok         bool
		want       func(baton.Config) time.Duration
		err        string
	}{
		{"ttl", "7s", true, func(c baton.Config) time.Duration { return c.TTL }, ""},
		{"renew-every", "2s", true, func(c baton.Config) time.Duration { return c.RenewEvery }, ""},
		{"request-timeout", "3s", true, func(c baton.Config) time.Duration { return c.RequestTimeout }, ""},
		{"drift", "40ms", true, func(c baton.Config) time.Duration { return c.Drift }, ""},
		{"ttl", "7", true, nil, `ttl="7" is not a duration such as 15s`},
		{"drift", "\x00x", true, nil, "is not a duration"},
		{"ttl", "0", true, nil, "ttl=0 must be positive, such as 15s; leave it out for the default"},
		{"renew-every", "-1s", true, nil, "renew-every=-1s must be positive"},
		{"request-timeout", "0s", true, nil, "request-timeout=0s must be positive"},
		{"drift", "0ms", true, nil, "drift=0ms must be positive"},
		{"table", "x", false, nil, ""},
	} {
		opt, ok, err := Duration(tc.key, tc.value)
		if ok != tc.ok {
			t.Errorf("%s=%q: ok %v, want %v", tc.key, tc.value, ok, tc.ok)
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s=%q: error %v, want %q", tc.key, tc.value, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s=%q: %v", tc.key, tc.value, err)
			continue
		}
		if tc.want == nil {
			continue
		}
		var c baton.Config
		opt(&c)
		if d, _ := time.ParseDuration(tc.value); tc.want(c) != d {
			t.Errorf("%s=%q set %v", tc.key, tc.value, tc.want(c))
		}
	}
}

func TestPort(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "6379": 6379, "65535": 65535, "0": 0, "01": 0, "+1": 0, "-1": 0, "65536": 0, "x": 0, "": 0, " 1": 0} {
		if got, ok := Port(in); got != want || ok != (want != 0) {
			t.Errorf("Port(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}

// TestOnce: a parameter given twice is an error naming it, among the keys
// asked for (all when none are); once is fine.
func TestOnce(t *testing.T) {
	q, _ := url.ParseQuery("ttl=5s&ttl=6s&sslmode=a&sslmode=b&drift=1ms")
	if err := Once(q); err == nil || !strings.Contains(err.Error(), `"sslmode" is given 2 times`) {
		t.Errorf("Once(all) = %v, want the first repeated key in order, sslmode", err)
	}
	if err := Once(q, "drift", "ttl"); err == nil || !strings.Contains(err.Error(), `"ttl" is given 2 times`) {
		t.Errorf("Once(drift, ttl) = %v, want ttl named", err)
	}
	if err := Once(q, "drift", "table"); err != nil {
		t.Errorf("Once(drift, table) = %v, want nil: sslmode and ttl are not asked about", err)
	}
}

// TestQuery: what url.URL.Query drops without a word is refused.
func TestQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"etcd://h:1/?ttl=5s;prefix=app":    "query is malformed",
		"etcd://h:1/?ttl=5%":               "query is malformed",
		"etcd://h:1/?prefix=a#b&ttl=5s":    "#fragment",
		"postgres://h/db?sslmode=require#": "", // an empty fragment cuts nothing off
		"redis://h:1/?ttl=5s&prefix=app":   "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		q, err := Query(u)
		switch {
		case want == "" && err != nil:
			t.Errorf("Query(%q) = %v, want no error", raw, err)
		case want == "" && len(q) == 0:
			t.Errorf("Query(%q) = no parameters", raw)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("Query(%q) = %v, want an error saying %q", raw, err, want)
		}
	}
}
