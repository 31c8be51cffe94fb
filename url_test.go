package baton_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"etcd://127.0.0.1:2379", "etcd://127.0.0.1:2379"},
		{"postgres://app:s3cret@db:5432/x", "postgres://app:xxxxx@db:5432/x"},
		{"redis://:hunter2@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"postgres://app:s3cr%t@db/x", "postgres://app:xxxxx@db/x"}, // unparseable escape
		{"zk://u:p@h1:2181,h2:2181/root", "zk://u:xxxxx@h1:2181,h2:2181/root"},
		// A password holding '/', '?' or '#' ends url.Parse's authority
		// early: refused as a bad port, or even parsed, with the rest of
		// the password in the path.
		{"postgres://user:pa/ss@db:5432/app", "postgres://user:xxxxx@db:5432/app"},
		{"redis://:se#cret@host:6379/0", "redis://:xxxxx@host:6379/0"},
		{"redis://:12/34@host:6379/0", "redis://:xxxxx@host:6379/0"},
		{"postgres://me@corp.com:pw@db/x", "postgres://me%40corp.com:xxxxx@db/x"},
		{"postgres://app@db/x?sslmode=disable&password=s3cret", "postgres://app@db/x?sslmode=disable&password=xxxxx"},
		{"host=db user=app password=s3cret dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password='s3 cret' sslpassword=k3y", "host=db password=xxxxx sslpassword=xxxxx"},
		// pgx reads a backslash as escaping the next character, a space
		// too; a quote never closed runs to the end.
		{`host=db password=top\ secret sslmode=bogus`, "host=db password=xxxxx sslmode=bogus"},
		{`host=db password='top\' secret' sslmode=bogus`, "host=db password=xxxxx sslmode=bogus"},
		{"host=db password='top secret sslmode=disable", "host=db password=xxxxx"},
		{`host=db password=top\`, "host=db password=xxxxx"},
		{"postgres://app@db/x", "postgres://app@db/x"},
		{"postgres://u:a@b/c@db/x", "postgres://u:xxxxx@db/x"}, // the password is a@b/c
		{"host=db password=s3cret application_name=x://y", "host=db password=xxxxx application_name=x://y"},
		{"host=db password=ab://cd dbname=x", "host=db password=xxxxx dbname=x"},
		{"redis://h:6379/0?password=se#cret", "redis://h:6379/0?password=xxxxx"},
		// An '@' later on, with a user and no password, or a password
		// before it that url.Parse found: left as it is.
		{"postgres://app@db:5432/x?application_name=job@host", "postgres://app@db:5432/x?application_name=job@host"},
		{"sqlite:/var/lib/fence.db", "sqlite:/var/lib/fence.db"},
		{"sqlite:/var/lib/a@b.db", "sqlite:/var/lib/a@b.db"},
		// A scheme mistyped: what lies between the first ':' and the last
		// '@' is hidden.
		{"etcd//u:s3cret@h:2379", "etcd//u:xxxxx@h:2379"},
		{"etcd//h:2379?password=s3cret", "etcd//h:2379?password=xxxxx"},
		{"etcd:/h:2379?password=s3cret&x=1", "etcd:/h:2379?password=xxxxx&x=1"},
		{"u:s3cret@h:2379", "u:xxxxx@h:2379"},
		{"u@h:2379", "u@h:2379"},
		{"etcd:/root:s3cret@h:2379", "etcd:xxxxx@h:2379"},
		{"sqlite:backup@2024.db", "sqlite:backup@2024.db"},
		{"host=db password=top\\\nsecret dbname=x", "host=db password=xxxxx dbname=x"},
		{"host=db password='top\\\nsecret' dbname=x", "host=db password=xxxxx dbname=x"},
	} {
		if got := baton.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzRedact builds URLs and key=value strings around a password and
// checks that Redact hides it, whatever characters it holds.
func FuzzRedact(f *testing.F) {
	for _, pw := range []string{"s3cret", "pa/ss", "se#cret", "12/34", "a?x@c", "p@ss:word", "x y", "top\nsecret"} {
		f.Add("app", pw, "db:5432/x")
	}
	f.Fuzz(func(t *testing.T, user, pw, rest string) {
		if len(pw) < 4 || strings.ContainsAny(user, ":@") || strings.Contains(user+rest, pw) || strings.Contains("postgres://xxxxx@ password=", pw) ||
			!strings.ContainsAny(pw, "ghijklmnopqrstuvwyzGHIJKLMNOPQRSTUVWXYZ") {
			return // no password to find, one the rest of the string shows anyway, or one escaping could make (%20000)
		}
		for _, s := range []string{
			"postgres://" + user + ":" + pw + "@" + strings.ReplaceAll(rest, "@", ""),
			"postgres://" + user + ":" + pw + "@" + rest,
			"redis://" + strings.ReplaceAll(rest, "@", "") + "?password=" + strings.ReplaceAll(pw, "&", ""),
			" \tpostgres://" + user + ":" + pw + "@" + strings.ReplaceAll(rest, "@", "") + "\n", // white space around it
		} {
			if got := unquoted(baton.Redact(s)); strings.Contains(got, pw) {
				t.Fatalf("Redact(%q) = %q keeps the password %q", s, got, pw)
			}
			checkParseURL(t, s, pw)
		}
		if !strings.ContainsAny(user+rest, "= \t\n\v\f\r") {
			// pgx's quoting: a backslash before every space, quote and
			// backslash, or quotes around it all.
			escaped := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
			for _, v := range []string{strings.NewReplacer(" ", `\ `, "\t", "\\\t", "\n", "\\\n").Replace(escaped), "'" + escaped + "'"} {
				s := "host=" + user + " password=" + v + " dbname=" + rest
				if got := unquoted(baton.Redact(s)); strings.Contains(got, pw) {
					t.Fatalf("Redact(%q) = %q keeps the password %q", s, got, pw)
				}
			}
		}
	})
}

// checkParseURL checks that ParseURL's error about s, if any, does not
// show pw: net/url quotes part of a URL it refuses, which may be part of
// the password (one holding '/' looks like a bad port).
func checkParseURL(t *testing.T, s, pw string) {
	t.Helper()
	_, err := baton.ParseURL(s)
	var oe *baton.OptionError
	if err == nil || !errors.As(err, &oe) {
		return
	}
	if strings.Contains(unquoted(oe.Value), pw) || strings.Contains(unquoted(oe.Reason), pw) {
		t.Fatalf("ParseURL(%q) = %q shows the password %q", s, err, pw)
	}
}

// TestParseURL_ErrorHidesPassword: a password holding '/' makes url.Parse
// refuse the rest of it as a port, which its error quotes.
func TestParseURL_ErrorHidesPassword(t *testing.T) {
	for _, s := range []string{
		"postgres://user:MyS3cretPass/word@db.example:5432/app",
		"etcd://root:Hunter2?x@h:2379",
		"redis://:abc#Secret9@h:6379/0",
	} {
		_, err := baton.ParseURL(s)
		if err == nil {
			t.Errorf("ParseURL(%q) = nil error; want one", s)
			continue
		}
		for _, pw := range []string{"MyS3cretPass", "Hunter2", "Secret9"} {
			if strings.Contains(err.Error(), pw) {
				t.Errorf("ParseURL(%q) = %q shows the password", s, err)
			}
		}
		if !strings.Contains(err.Error(), "percent-encoded") {
			t.Errorf("ParseURL(%q) = %q; want it to say how to write such a password", s, err)
		}
	}
	// What the redacted URL shows stays quoted.
	if _, err := baton.ParseURL("etcd://h:p%zz"); err == nil || !strings.Contains(err.Error(), `":p%zz"`) || strings.Contains(err.Error(), "percent-encoded") {
		t.Errorf(`ParseURL("etcd://h:p%%zz") = %v; want it to quote the bad port, with no word of a password`, err)
	}
}

// unquoted undoes the quoting Redact gives a string that is not printable
// on one line, so that a password escaped there is found all the same.
func unquoted(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

func TestOpeners_Open_Errors(t *testing.T) {
	o := baton.Openers{"etcd": func(context.Context, *url.URL, ...baton.Option) (*baton.Locker, error) {
		return nil, errors.New("not reached")
	}}
	for _, tc := range []struct{ in, want string }{
		{"", "is empty"},
		{"127.0.0.1:2379", "scheme"},
		{"mysql://u:pw@h/db", `unknown scheme "mysql"; use one of etcd://`},
		{"etcd://h:p%zz", "invalid"},
	} {
		_, err := o.Open(context.Background(), tc.in)
		if !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption", tc.in, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %q, want it to say %q", tc.in, err, tc.want)
		}
		if strings.Contains(err.Error(), "pw") {
			t.Errorf("Open(%q) error leaks the password: %q", tc.in, err)
		}
	}
}

// TestParseURL_HostList checks that a list of hosts reaches the backend
// whole, in the forms url.Parse alone refuses: a host without a port
// before the last, and IPv6 addresses.
func TestParseURL_HostList(t *testing.T) {
	for raw, want := range map[string]string{
		"redlock://a:7000,b,c":                          "a:7000,b,c",
		"redlock://u:p@a:7000,b:7001,c/2?ttl=5s":        "a:7000,b:7001,c",
		"redlock://[::1]:7000,[::1]:7001,[::1]:7002":    "[::1]:7000,[::1]:7001,[::1]:7002",
		"zk://a,b,[::1]:2181/root":                      "a,b,[::1]:2181",
		"etcd://127.0.0.1:2379":                         "127.0.0.1:2379",
		"etcd://u:p@h1:2379,h2:2379/prefix?ttl=5s#frag": "h1:2379,h2:2379",
		"zk://[fe80::1%25eth0]:2181,[::1]:2181":         "[fe80::1%eth0]:2181,[::1]:2181",
	} {
		u, err := baton.ParseURL(raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", raw, err)
			continue
		}
		if u.Host != want {
			t.Errorf("ParseURL(%q).Host = %q, want %q", raw, u.Host, want)
		}
		if strings.Contains(raw, "u:p@") {
			if pw, _ := u.User.Password(); u.User.Username() != "u" || pw != "p" {
				t.Errorf("ParseURL(%q) lost the user: %v", raw, u.User)
			}
		}
		if strings.Contains(raw, "/2?") && (u.Path != "/2" || u.Query().Get("ttl") != "5s") {
			t.Errorf("ParseURL(%q) lost the path or query: %q %q", raw, u.Path, u.RawQuery)
		}
	}
}

// TestParseURL_LaterSchemeSeparator: a "://" that is not the scheme's (in
// an opaque URL's query) is left alone.
func TestParseURL_LaterSchemeSeparator(t *testing.T) {
	u, err := baton.ParseURL("sqlite:x.db?from=a://b,c")
	if err != nil {
		t.Fatal(err)
	}
	if u.Host != "" || u.Opaque != "x.db" || u.Query().Get("from") != "a://b,c" {
		t.Errorf("ParseURL = host %q opaque %q query %q", u.Host, u.Opaque, u.RawQuery)
	}
}

// FuzzParseURL checks that no input panics ParseURL or Redact, and that a
// password never survives into an error or a redacted string.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"etcd://127.0.0.1:2379", "etcd://a:1,b:2/prefix?ttl=5s", "postgres://u:secret@h/db?sslmode=disable",
		"redis://:secret@h:6379/0", "zk://h1:2181,h2:2181/baton", "redlock://a:1,b,[::1]:3/0?ttl=1s", "sqlite:/tmp/x.db", "%", "://", "a://b:c@",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		red := baton.Redact(s)
		u, err := baton.ParseURL(s)
		if err != nil {
			if !errors.Is(err, baton.ErrInvalidOption) {
				t.Fatalf("ParseURL(%q) error %v does not match ErrInvalidOption", s, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error for %q: %q", s, err)
			}
		}
		if err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && len(pw) >= 4 && !strings.Contains(u.User.Username(), pw) && strings.Contains(red, pw) && !strings.Contains(strings.Replace(s, pw, "", 1), pw) {
				t.Fatalf("Redact(%q) = %q keeps the password %q", s, red, pw)
			}
		}
	})
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"invoices", "invoices@2026-11-30T02:00Z", "a.b_c-d:e+f=g", "...", ".a", strings.Repeat("x", baton.MaxNameLen)} {
		if err := baton.ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "é", strings.Repeat("x", baton.MaxNameLen+1), "x\n"} {
		err := baton.ValidateName(bad)
		var oe *baton.OptionError
		if !errors.As(err, &oe) || oe.Reason == "" {
			t.Errorf("ValidateName(%q) = %v, want an *OptionError with a reason", bad, err)
		}
	}
	// The reason names the character, not its first byte as a Latin-1 one.
	for name, want := range map[string]string{"aé": "'é' at byte 1", "a\xffb": "0xff (not UTF-8) at byte 1", "a b": "' ' at byte 1"} {
		if err := baton.ValidateName(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateName(%q) = %v, want it to say %q", name, err, want)
		}
	}
}

func TestNewConfig(t *testing.T) {
	c, err := baton.NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.TTL != baton.DefaultTTL || c.RenewEvery != baton.DefaultTTL/3 || c.Holder == "" || c.Logger == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	for _, opts := range [][]baton.Option{
		{baton.WithTTL(-1)},
		{baton.WithRenewEvery(baton.DefaultTTL)},
		{baton.WithDrift(-1)},
		{baton.WithDrift(baton.DefaultTTL)},
		{baton.WithRequestTimeout(-1)},
		{baton.WithReleaseTimeout(-1)},
		{baton.WithHolder(strings.Repeat("h", baton.MaxNameLen+1))},
		{baton.WithHolder("")},  // given, empty: no silent host:pid
		{baton.WithHolder(" ")}, // blank: shown as a holder no one can read
	} {
		if _, err := baton.NewConfig(opts...); !errors.Is(err, baton.ErrInvalidOption) {
			t.Errorf("NewConfig = %v, want ErrInvalidOption", err)
		}
	}
}

// TestNewConfig_ShortTTL: a TTL so short that the renew interval and
// drift derived from it do not fit is refused naming the TTL, the option
// given, not the derived ones (baton run --ttl 1ns said "renew interval
// 0s"); set explicitly, they are named.
func TestNewConfig_ShortTTL(t *testing.T) {
	for _, ttl := range []time.Duration{time.Nanosecond, 2 * time.Nanosecond, 3 * time.Millisecond} {
		_, err := baton.NewConfig(baton.WithTTL(ttl))
		if want := "ttl " + ttl.String() + ": is too short"; !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("NewConfig(WithTTL(%v)) = %v; want %q", ttl, err, want)
		}
	}
	if _, err := baton.NewConfig(baton.WithTTL(10 * time.Millisecond)); err != nil {
		t.Errorf("NewConfig(WithTTL(10ms)) = %v; want it accepted", err)
	}
	if _, err := baton.NewConfig(baton.WithTTL(3*time.Millisecond), baton.WithDrift(time.Millisecond)); err != nil {
		t.Errorf("NewConfig(WithTTL(3ms), WithDrift(1ms)) = %v; want it accepted", err)
	}
	if _, err := baton.NewConfig(baton.WithTTL(time.Second), baton.WithDrift(time.Second)); err == nil || !strings.Contains(err.Error(), "drift 1s") {
		t.Errorf("NewConfig with a drift as long as the TTL = %v; want the drift named", err)
	}
}

// TestNewConfig_ExplicitZero: a duration option given as zero is refused,
// naming the option, the value and the rule; only an option left out takes
// the default.
func TestNewConfig_ExplicitZero(t *testing.T) {
	for _, tc := range []struct {
		opt  baton.Option
		want string
	}{
		{baton.WithTTL(0), "ttl 0s: must be positive"},
		{baton.WithRenewEvery(0), "renew interval 0s: must be positive"},
		{baton.WithDrift(0), "drift 0s: must be positive"},
		{baton.WithReleaseTimeout(0), "release timeout 0s: must be positive"},
		{baton.WithRequestTimeout(0), "request timeout 0s: must be positive"},
		{baton.WithRequestTimeout(-time.Second), "request timeout -1s: must be positive"},
	} {
		c, err := baton.NewConfig(tc.opt)
		var oe *baton.OptionError
		if !errors.As(err, &oe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewConfig = %v (TTL %v), want an *OptionError saying %q", err, c.TTL, tc.want)
		}
	}
	// The last value given counts.
	c, err := baton.NewConfig(baton.WithTTL(0), baton.WithTTL(6*time.Second))
	if err != nil || c.TTL != 6*time.Second {
		t.Errorf("NewConfig(WithTTL(0), WithTTL(6s)) = TTL %v, %v; want 6s", c.TTL, err)
	}
	if _, err := baton.NewConfig(baton.WithTTL(6*time.Second), baton.WithTTL(0)); !errors.Is(err, baton.ErrInvalidOption) {
		t.Errorf("NewConfig(WithTTL(6s), WithTTL(0)) = %v, want ErrInvalidOption", err)
	}
}

// TestConfig_Validate_NoDrift: Validate, which every backend runs on its
// Config, refuses one built by hand, not by NewConfig, with no drift
// margin: the holder must stop before the lock service may free the lock.
func TestConfig_Validate_NoDrift(t *testing.T) {
	c := baton.Config{TTL: 3 * time.Second, RenewEvery: time.Second, ReleaseTimeout: time.Second, RequestTimeout: time.Second}
	if err := c.Validate(0); !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), "drift 0s: must be positive") {
		t.Fatalf("Validate with no drift = %v; want an invalid drift", err)
	}
	c.Drift = 10 * time.Millisecond
	if err := c.Validate(0); err != nil {
		t.Fatalf("Validate with drift 10ms = %v", err)
	}
	// Its fields are named as set, not taken for ones derived from the
	// TTL (see TestNewConfig_ShortTTL).
	c.RenewEvery = c.TTL
	if err := c.Validate(0); err == nil || !strings.Contains(err.Error(), "renew interval 3s: must be below the TTL") {
		t.Fatalf("Validate with a renew interval as long as the TTL = %v; want the renew interval named", err)
	}
	c.RenewEvery, c.Drift = time.Second, 2*time.Second
	if err := c.Validate(0); err == nil || !strings.Contains(err.Error(), "drift 2s: must be below") {
		t.Fatalf("Validate with a drift past TTL - renew interval = %v; want the drift named", err)
	}
}

// TestParseURL_SaysWhatToDo: a URL url.Parse refuses, or one with white
// space around it (a copy and paste), gets a line that says how to write
// it, the password hidden.
func TestParseURL_SaysWhatToDo(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://:bad", `invalid port ":bad" after host; write it as scheme://[user:password@]host:port[/path]`},
		{" etcd://h:2379", `invalid URL " etcd://h:2379": has white space around it; remove it`},
		{"sqlite:/tmp/100%.db", `; write it as sqlite:PATH, with a '%' in PATH as %25`},
		{"etcd://u:s3cret@h:2379/x\n", `invalid URL "etcd://u:xxxxx@h:2379/x\n": has white space around it`},
		{" postgres://u:s3cret@h/db", `invalid URL " postgres://u:xxxxx@h/db": has white space around it`},
		{"\tredis://:s3cret@h:6379 ", `invalid URL "\tredis://:xxxxx@h:6379 ": has white space around it`},
	} {
		_, err := baton.ParseURL(tc.in)
		if !errors.Is(err, baton.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%q) = %v, want an option error saying %q", tc.in, err, tc.want)
		}
	}
}
