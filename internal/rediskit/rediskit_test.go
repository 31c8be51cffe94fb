package rediskit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/forcekit"
)

func TestValue(t *testing.T) {
	a, b := NewValue("host:1"), NewValue("host:1")
	if a == b {
		t.Fatal("two acquisitions got the same value")
	}
	if got := HolderOf(a); got != "host:1" {
		t.Errorf("HolderOf(%q) = %q", a, got)
	}
	if got := HolderOf("set by hand"); got != "set by hand" {
		t.Errorf("a foreign value came back as %q", got)
	}
}

func TestHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"h": "h:6379", "h:7000": "h:7000", "[::1]": "[::1]:6379", "[::1]:7000": "[::1]:7000",
		"": "", ":7000": "", "h:0": "", "h:x": "", "h:70000": "", "[h": "",
		// one server written two ways must compare equal (or be refused)
		"H:7000": "h:7000", "[::0001]:7000": "[::1]:7000", "[::ffff:127.0.0.1]:7000": "127.0.0.1:7000",
		"h:07000": "", "h:+7000": "", "h:-1": "", "h: 7000": "",
	} {
		got, err := HostPort(in)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("HostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestMayHaveRun(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}
	for err, want := range map[error]bool{
		dial: false, fmt.Errorf("node a: %w", dial): false, goredis.ErrPoolTimeout: false,
		read: true, fmt.Errorf("node a: %w", read): true, context.DeadlineExceeded: true,
		context.Canceled: true, errors.New("no answer within 5s"): true,
	} {
		if got := MayHaveRun(err); got != want {
			t.Errorf("MayHaveRun(%v) = %v, want %v", err, got, want)
		}
	}
}

func TestDB(t *testing.T) {
	for in, want := range map[string]int{"": 0, "/": 0, "/0": 0, "/3": 3, "/-1": -1, "/01": -1, "/x": -1} {
		got, err := DB(in)
		if (err != nil) != (want < 0) || (err == nil && got != want) {
			t.Errorf("DB(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestCredentials: a user without a password is refused (go-redis sends
// no AUTH without one, so it would run as the default user); a password
// alone is the default user's.
func TestCredentials(t *testing.T) {
	for raw, want := range map[string][2]string{
		"redis://h":           {"", ""},
		"redis://@h":          {"", ""},
		"redis://:@h":         {"", ""},
		"redis://:pw@h":       {"", "pw"},
		"redis://app:pw@h":    {"app", "pw"},
		"redis://app@h":       {"!", ""},
		"redis://app:@h":      {"!", ""},
		"redis://a%0Ab@h":     {"!", ""},
		"redlock://app@a,b,c": {"!", ""},
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		user, pass, err := Credentials(u)
		if want[0] == "!" {
			if err == nil || !strings.Contains(err.Error(), ":PASSWORD@") || strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("Credentials(%q) = %q, %q, %v; want an error saying to add :PASSWORD, on one line", raw, user, pass, err)
			}
			continue
		}
		if err != nil || user != want[0] || pass != want[1] {
			t.Errorf("Credentials(%q) = %q, %q, %v; want %q, %q", raw, user, pass, err, want[0], want[1])
		}
	}
}

func TestEscapeGlob(t *testing.T) {
	if got := EscapeGlob(`a*b?c[d]e\f`); got != `a\*b\?c\[d\]e\\f` {
		t.Errorf("EscapeGlob = %q", got)
	}
}

func TestCheckPrefix(t *testing.T) {
	if err := CheckPrefix("baton:lock:"); err != nil {
		t.Error(err)
	}
	var oe *baton.OptionError
	if err := CheckPrefix("a{b}:"); !errors.As(err, &oe) || !strings.Contains(err.Error(), "braces") {
		t.Errorf("CheckPrefix with braces: %v", err)
	}
}

// TestURLOptions: a query that does not parse, or a fragment, is
// refused (url.URL.Query dropped them, and the defaults applied).
func TestURLOptions(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://h?ttl=5s;prefix=app:": "malformed",
		"redis://h?prefix=a%zz":        "malformed",
		"redis://h?prefix=a#b":         "#fragment",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := URLOptions(u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("URLOptions(%q) = %v, want an error saying %q", raw, err, want)
		}
	}
	u, _ := url.Parse("redis://h?ttl=5s&prefix=app%3Bx")
	if opts, err := URLOptions(u); err != nil || len(opts) != 2 {
		t.Errorf("URLOptions(%q) = %d options, %v; want 2", u, len(opts), err)
	}
}

func TestQueryOptions(t *testing.T) {
	if _, err := QueryOptions(map[string][]string{"ttl": {"2s"}, "drift": {"5ms"}, "prefix": {"p:"}}); err != nil {
		t.Error(err)
	}
	if _, err := QueryOptions(map[string][]string{"colour": {"red"}}); err == nil || !strings.Contains(err.Error(), "known: ttl") {
		t.Errorf("unknown parameter: %v", err)
	}
}

func TestParseReply(t *testing.T) {
	for _, c := range []struct {
		res  []any
		want Reply
		err  string
	}{
		{res: []any{int64(1)}, want: Reply{Held: true}},
		{res: []any{int64(0), "v|h", int64(1500), int64(1)}, want: Reply{Holder: "v|h", PTTL: 1500 * time.Millisecond, Head: true}},
		{res: []any{int64(0), "", int64(-2), int64(0)}, want: Reply{PTTL: -2 * time.Millisecond}},
		{res: nil, err: "empty reply"},
		{res: []any{int64(0), "v"}, err: "unexpected reply"},
	} {
		got, err := ParseReply(c.res)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseReply(%v) error %v, want %q", c.res, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseReply(%v) = %+v, %v; want %+v", c.res, got, err, c.want)
		}
	}
}

// TestTTLMillis: the server's TTL is never shorter than the lease's.
func TestTTLMillis(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{2 * time.Second, 2000},
		{1999900 * time.Microsecond, 2000},
		{200*time.Millisecond + time.Nanosecond, 201},
	} {
		if got := TTLMillis(tc.d); got != tc.want {
			t.Errorf("TTLMillis(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestLiveWaiters(t *testing.T) {
	entries := []string{
		"00 1000 500 3 baton:wake:a",   // runs out at 1500: live at 1499
		"00 1000 499 1 baton:wake:b c", // at 1499: run out
		"0 1000 5000 baton:wake:old",   // an earlier format: run out
		"00 x 5000 1 baton:wake:bad",   // not a number
		"00 1000",                      // cut short
	}
	if got := LiveWaiters(entries, 1499); got != 1 {
		t.Errorf("LiveWaiters at 1499 = %d, want 1", got)
	}
	if got := LiveWaiters(entries, 1500); got != 0 {
		t.Errorf("LiveWaiters at 1500 = %d, want 0", got)
	}
}

// replyErr is an error reply, as go-redis returns one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestRefusal: replies that trying again cannot mend are refusals, of the
// kind the CLI should exit with (an invalid option for the configuration,
// a plain error otherwise); replies that may change, and failures that
// are not replies, are not, also when Redis 6 puts them inside a
// script's error.
func TestRefusal(t *testing.T) {
	const (
		none = iota
		option
		plain
	)
	for _, tc := range []struct {
		reply error
		want  int
		says  string
	}{
		{replyErr("NOPERM this user has no permissions to access one of the keys used as arguments"), option, "grant"},
		{replyErr("NOAUTH Authentication required."), option, "user:password"},
		{replyErr("WRONGPASS invalid username-password pair or user is disabled."), option, "user:password"},
		{replyErr("WRONGTYPE Operation against a key holding the wrong kind of value script: 1234, on @user_script:5."), plain, "k, {k}:q"},
		{replyErr("ERR Error running script (call to f_1234): @user_script:5: WRONGTYPE Operation against a key holding the wrong kind of value"), plain, "another type"},
		{replyErr("ERR unknown command 'evalsha', with args beginning with: "), plain, "renamed or disabled"},
		{replyErr("ERR unknown command `EVAL`, with args beginning with: "), plain, "renamed or disabled"},
		{replyErr("ERR command not allowed"), plain, "renamed or disabled"},
		{replyErr("ERR This Redis command is not allowed from script script: 1234, on @user_script:1."), plain, "renamed or disabled"},

		{replyErr("READONLY You can't write against a read only replica."), none, ""},
		{replyErr("ERR Error running script (call to f_1234): @user_script:5: @user_script: 5: -READONLY You can't write against a read only replica."), none, ""},
		{replyErr("LOADING Redis is loading the dataset in memory"), none, ""},
		{replyErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), none, ""},
		{replyErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), none, ""},
		{replyErr("TRYAGAIN Multiple keys request during rehashing of slot"), none, ""},
		{replyErr("CLUSTERDOWN The cluster is down"), none, ""},
		{replyErr("OOM command not allowed when used memory > 'maxmemory'."), none, ""},
		{replyErr("ERR Error running script (call to f_1234): @user_script:5: @user_script: 5: -OOM command not allowed when used memory > 'maxmemory'."), none, ""},
		{replyErr("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled"), none, ""},
		{replyErr("NOREPLICAS Not enough good replicas to write."), none, ""},
		{replyErr("ERR max number of clients reached"), none, ""},
		{replyErr("NOSCRIPT No matching script. Please use EVAL."), none, ""},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), none, ""},
		{context.DeadlineExceeded, none, ""},
	} {
		err := Refusal("redis://h:1/0", "acquire k", fmt.Errorf("wrapped: %w", tc.reply), "+@all", []string{"k", "{k}:q"})
		var got int
		switch {
		case err == nil:
			got = none
		case errors.Is(err, baton.ErrInvalidOption):
			got = option
		default:
			got = plain
		}
		if got != tc.want {
			t.Errorf("%q: %v; want kind %d, got %d", tc.reply, err, tc.want, got)
			continue
		}
		if err == nil {
			continue
		}
		if errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "redis://h:1/0") || !strings.Contains(err.Error(), "acquire k") {
			t.Errorf("%q: %q; want it to say where, what and %q, and not match ErrUnavailable", tc.reply, err, tc.says)
		}
		var rerr goredis.Error
		if got == plain && !errors.As(err, &rerr) {
			t.Errorf("%q: %v does not wrap the reply", tc.reply, err)
		}
	}
	if !ReadOnly(fmt.Errorf("w: %w", replyErr("READONLY You can't write against a read only replica."))) || ReadOnly(replyErr("LOADING x")) {
		t.Error("ReadOnly")
	}
}

// TestTold: an error reply raised in a script is told without the script's
// SHA1 and line that Redis 7 appends, and still wraps the reply; any other
// reply is told as it is.
func TestTold(t *testing.T) {
	const sha = "403ba0a63699b9a0b8ad9b960ef44cf37391b00d"
	for _, tc := range []struct{ reply, told string }{
		{"WRONGTYPE Operation against a key holding the wrong kind of value script: " + sha + ", on @user_script:65.", "WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"NOPERM this user has no permissions to access one of the keys used as arguments script: " + sha + ", on @user_script:12.", "NOPERM this user has no permissions to access one of the keys used as arguments"},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"ERR Error running script (call to f_" + sha + "): @user_script:5: WRONGTYPE Operation", "ERR Error running script (call to f_" + sha + "): @user_script:5: WRONGTYPE Operation"},
		{"ERR x script: 1234, on @user_script:5.", "ERR x script: 1234, on @user_script:5."}, // no SHA1: not Redis's form
	} {
		wrapped := fmt.Errorf("node redis://h:1: %w", replyErr(tc.reply))
		if got := Told(wrapped); got.Error() != "node redis://h:1: "+tc.told || !errors.Is(got, wrapped) {
			t.Errorf("Told(%q) = %q, want the wrapping kept and the reply told as %q", wrapped, got, tc.told)
		}
		rerr := replyErr(tc.reply)
		got := Told(rerr)
		var back goredis.Error
		if got.Error() != tc.told || !errors.As(got, &back) || back.Error() != tc.reply {
			t.Errorf("Told(%q) = %q (wrapping the reply: %v), want %q wrapping it", tc.reply, got, errors.As(got, &back), tc.told)
		}
	}
}

// A forced release's refused delete ends its tries; a transient reply or a
// lost answer is tried again.
func TestForceErr(t *testing.T) {
	for _, tc := range []struct {
		err   error
		calls int
	}{
		{replyErr("NOPERM this user has no permissions to run the 'evalsha' command"), 1},
		{replyErr("LOADING Redis is loading the dataset in memory"), 2},
		{context.DeadlineExceeded, 2},
	} {
		calls := 0
		_, err := forcekit.Delete(context.Background(), time.Minute, func(context.Context) (bool, error) {
			calls++
			if calls > 1 {
				return false, nil
			}
			return false, ForceErr(tc.err)
		})
		if calls != tc.calls {
			t.Errorf("%v: %d tries, want %d", tc.err, calls, tc.calls)
		}
		if tc.calls == 1 && !errors.Is(err, tc.err) {
			t.Errorf("%v: Delete = %v, want the refusal", tc.err, err)
		}
	}
	if ForceErr(nil) != nil {
		t.Error("ForceErr(nil) is not nil")
	}
}
