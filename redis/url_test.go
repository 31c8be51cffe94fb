package redis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/redis"
)

func TestParseURL(t *testing.T) {
	u, err := baton.ParseURL("redis://app:pw@10.0.0.1:6380/2?ttl=10s&request-timeout=2s&prefix=jobs:")
	if err != nil {
		t.Fatal(err)
	}
	o, opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if o.Addr != "10.0.0.1:6380" || o.DB != 2 || o.Username != "app" || o.Password != "pw" {
		t.Errorf("client options %s db %d user %q password %q", o.Addr, o.DB, o.Username, o.Password)
	}
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != 10*time.Second || cfg.RequestTimeout != 2*time.Second || cfg.Prefix != "jobs:" {
		t.Errorf("options from the URL not applied: ttl %v, request timeout %v, prefix %q", cfg.TTL, cfg.RequestTimeout, cfg.Prefix)
	}
	for raw, addr := range map[string]string{"redis://h": "h:6379", "redis://[::1]:7000/": "[::1]:7000", "redis://h:1/0": "h:1"} {
		u, _ := baton.ParseURL(raw)
		if o, _, err := redis.ParseURL(u); err != nil || o.Addr != addr {
			t.Errorf("ParseURL(%q) = %v, %v; want address %s", raw, o, err, addr)
		}
	}

	for _, bad := range []string{"redis://", "redis://app@h:1", "redis://app:@h:1", "redis://h:1,h:2", "redis://h:0", "redis://h:port", "redis://h:1/x", "redis://h:1/-1", "redis://h:1/01",
		"redis://h:1?ttl=ten", "redis://h:1?ttl=0", "redis://h:1?colour=red", "redis://h:1?ttl=5s&ttl=6s", "redis://h:1?prefix=", "redis:opaque", "etcd://h:1"} {
		u, err := baton.ParseURL(bad)
		if err == nil {
			_, _, err = redis.ParseURL(u)
		}
		if !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
	// The address's own fault is said, and several nodes point to redlock.
	for raw, want := range map[string]string{
		"redis://h:0":     `bad port "0": want a number from 1 to 65535`,
		"redis://h:1,h:2": "for several nodes, use redlock://",
	} {
		u, _ := baton.ParseURL(raw)
		if _, _, err := redis.ParseURL(u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q) = %v, want it to say %q", raw, err, want)
		}
	}
	// What url.URL.Query drops without a word is refused, and the error
	// says how to write it: a ';' between pairs (the TTL and prefix were
	// the defaults, shared with every other application), a bad escape,
	// a fragment (the prefix was cut at '#').
	for raw, want := range map[string]string{
		"redis://h:1?ttl=5s;prefix=app:":   "with '&' between pairs",
		"redis://h:1?prefix=a%zz":          `invalid URL escape "%zz"`,
		"redis://h:1?ttl=5s&prefix=app#2":  "write a '#' in a path or parameter as %23",
		"redis://h:1/0#frag":               "has a #fragment",
		"redis://h:1?prefix=a;b&ttl=5s":    "%3B",
		"redis://h:1?prefix=app:&ttl=5s;x": "malformed",
	} {
		u, err := baton.ParseURL(raw)
		if err != nil {
			t.Errorf("baton.ParseURL(%q): %v", raw, err)
			continue
		}
		if _, _, err := redis.ParseURL(u); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q) = %v, want an option error saying %q", raw, err, want)
		}
	}
	u, _ = baton.ParseURL("redis://h:1?prefix=a%3Bb%23c%25")
	if _, opts, err := redis.ParseURL(u); err != nil {
		t.Errorf("ParseURL(%s): %v", u, err)
	} else if cfg, _ := baton.NewConfig(opts...); cfg.Prefix != "a;b#c%" {
		t.Errorf("ParseURL(%s): prefix %q, want %q", u, cfg.Prefix, "a;b#c%")
	}
	// A user without a password would run as the default user (go-redis
	// sends no AUTH without one): refused, saying what to write. A
	// password alone is the default user's.
	for _, raw := range []string{"redis://app@h:1", "redis://app:@h:1/2"} {
		u, _ := baton.ParseURL(raw)
		_, _, err := redis.ParseURL(u)
		var oerr *baton.OptionError
		if !errors.As(err, &oerr) || !strings.Contains(err.Error(), "app:PASSWORD@") || !strings.Contains(err.Error(), "nopass") {
			t.Errorf("ParseURL(%q) = %v, want an option error saying to write app:PASSWORD@", raw, err)
		}
	}
	for raw, want := range map[string][2]string{
		"redis://:pw@h:1":    {"", "pw"},
		"redis://app:pw@h:1": {"app", "pw"},
		"redis://:@h:1":      {"", ""},
		"redis://@h:1":       {"", ""},
	} {
		u, _ := baton.ParseURL(raw)
		if o, _, err := redis.ParseURL(u); err != nil || o.Username != want[0] || o.Password != want[1] {
			t.Errorf("ParseURL(%q) = %+v, %v; want user %q password %q", raw, o, err, want[0], want[1])
		}
	}
	u, _ = baton.ParseURL("redis://app:secret@h:1?colour=red")
	if _, _, err := redis.ParseURL(u); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v shows the password", err)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis://127.0.0.1:6379", "redis://u:p@h:1/3?ttl=5s", "redis://[::1]/1", "redis://h:1?renew-every=1s&prefix=a:", "redis://u@h:1", "redis://:p@h", "redis://u:@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := baton.ParseURL(s)
		if err != nil {
			return
		}
		o, _, err := redis.ParseURL(u)
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
		if o.Addr == "" || o.DB < 0 {
			t.Fatalf("accepted %q with address %q db %d", s, o.Addr, o.DB)
		}
		if o.Username != "" && o.Password == "" {
			t.Fatalf("accepted %q with user %q and no password: it would run as the default user", s, o.Username)
		}
	})
}
