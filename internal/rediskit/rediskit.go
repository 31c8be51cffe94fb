// Package rediskit holds what the redis and redlock backends share besides
// their wake-ups (internal/rediswake): the values they store in a lock key,
// the parsing of a Redis node address, and SCAN patterns.
package rediskit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/failkit"
	"github.com/baton-go/baton/internal/forcekit"
	"github.com/baton-go/baton/internal/urlparam"
)

// DefaultPort is Redis's port, used when an address names none.
const DefaultPort = "6379"

// WakeChannelPrefix names the Pub/Sub channel each Locker is told on when a
// lock it waits for is handed to it. Channels are server-wide (not per
// database), so the rest is a random Locker id: see NewWakeChannel.
const WakeChannelPrefix = "baton:wake:"

// NewWakeChannel returns a Locker's own wake-up channel.
func NewWakeChannel() string {
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	return WakeChannelPrefix + hex.EncodeToString(id)
}

// NewValue makes a value for an acquisition: 128 random bits from
// crypto/rand, never made twice (an acquisition makes a new one after it
// released its value: a Redlock undo, a claim that yielded), then the
// holder identity for status.
func NewValue(holder string) string {
	r := make([]byte, 16)
	_, _ = rand.Read(r) // never fails (crypto/rand)
	return hex.EncodeToString(r) + " " + holder
}

// HolderOf returns the holder identity stored in a value made by NewValue,
// or the value itself when someone other than baton set the key.
func HolderOf(v string) string {
	if len(v) > 33 && v[32] == ' ' {
		if _, err := hex.DecodeString(v[:32]); err == nil {
			return v[33:]
		}
	}
	return v
}

// EscapeGlob escapes the characters SCAN MATCH treats specially.
func EscapeGlob(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// HostPort checks one node's host[:port] from a URL, adds DefaultPort
// when it names none, and returns it in one canonical form, so that one
// server written two ways compares equal: the port as a plain number
// ("06379" and "+6379" are refused, not read as 6379), a host name in
// lower case, an IP address as net/netip prints it ("::0001" is "::1",
// "::ffff:127.0.0.1" is "127.0.0.1"). Two names of one host ("localhost"
// and "127.0.0.1") still differ: only the servers can tell.
func HostPort(h string) (string, error) {
	if h == "" {
		return "", errors.New("no host")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		host, port = strings.Trim(h, "[]"), DefaultPort
		if strings.ContainsAny(host, "[]") || strings.HasPrefix(h, "[") != strings.HasSuffix(h, "]") {
			return "", fmt.Errorf("bad host %s", strconv.Quote(h))
		}
	}
	if host == "" {
		return "", fmt.Errorf("no host in %s", strconv.Quote(h))
	}
	n, ok := urlparam.Port(port)
	if !ok {
		return "", fmt.Errorf("bad port %s: want a number from 1 to 65535", strconv.Quote(port))
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	} else {
		host = strings.ToLower(host)
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// DB reads a database number from a URL path ("", "/" and "/0" are 0).
func DB(path string) (int, error) {
	p := strings.Trim(path, "/")
	if p == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || strconv.Itoa(n) != p {
		return 0, fmt.Errorf("path %q: want a database number such as /0", path)
	}
	return n, nil
}

// CmdErr returns the first error among cmds, commands of one pipeline,
// that is not goredis.Nil (a key that is not there, an answer), or nil.
// The error go-redis's Pipelined returns is only the first failed
// command's: when that is a Nil, a later command's error (WRONGTYPE, an
// ACL refusal) is behind it, and ignoring the Nil ignored it too.
func CmdErr(cmds ...goredis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
	}
	return nil
}

// Credentials returns the user name and password in a redis:// or
// redlock:// URL's user information. It refuses a user name without a
// password ("app@", "app:@"): go-redis authenticates only when the
// password is not empty, so the connection would run as the default user,
// with its permissions, without a word. A password alone (":pw@", the
// usual form for requirepass) is the default user's, which go-redis sends
// as AUTH default pw; no user information, or none of either (":@"), sends
// no AUTH. It returns the reason for an OptionError.
func Credentials(u *url.URL) (user, password string, err error) {
	if u.User == nil {
		return "", "", nil
	}
	user = u.User.Username()
	password, _ = u.User.Password()
	if user != "" && password == "" {
		return "", "", fmt.Errorf("user %s has no password, and without one the connection would run as the default user: write %s:PASSWORD@ (a nopass user takes any password)", strconv.Quote(user), url.User(user).String())
	}
	return user, password, nil
}

// CheckPrefix refuses a key prefix with braces: a lock's queue keys are
// {KEY}:SUFFIX so that they share KEY's Redis Cluster hash slot, and a
// brace in the prefix would change the slot.
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return &baton.OptionError{Option: "prefix", Value: strconv.Quote(prefix), Reason: "must not contain braces: the lock's queue keys use {KEY} to share its Cluster hash slot"}
	}
	return nil
}

// MaxExpiryJitter bounds the jitter PastExpiry adds. Only a lock's first
// waiter sleeps until its key expires (the others sleep RenewEvery), so
// there is no herd to spread: the jitter only keeps one waiter from
// retrying in step with a holder's renewal schedule or with a first
// waiter of another Locker that saw the same PTTL a moment apart. A few
// milliseconds do that; a share of the TTL (PTTL/20, 750ms at a 15s TTL)
// only delayed the takeover of a crashed holder's lock.
const MaxExpiryJitter = 10 * time.Millisecond

// PastExpiry is how long a first waiter that saw a key with pttl left
// sleeps before it looks again: just past the expiry, by 1ms (PX counts
// whole milliseconds) plus a random jitter under min(pttl/20,
// MaxExpiryJitter), so that a crashed holder is taken over within about
// 11ms of its key's expiry, whatever the TTL.
func PastExpiry(pttl time.Duration) time.Duration {
	return pttl + time.Millisecond + mrand.N(min(max(pttl, 0)/20, MaxExpiryJitter)+1)
}

// URLOptions reads the query of a redis:// or redlock:// URL u with
// QueryOptions, refusing a malformed query or a fragment (urlparam.Query).
func URLOptions(u *url.URL) ([]baton.Option, error) {
	q, err := urlparam.Query(u)
	if err != nil {
		return nil, err
	}
	return QueryOptions(q)
}

// QueryOptions reads the query parameters of a redis:// or redlock:// URL:
// the lease timings (urlparam.Durations) and prefix.
func QueryOptions(q url.Values) ([]baton.Option, error) {
	if err := urlparam.Once(q); err != nil {
		return nil, err
	}
	var opts []baton.Option
	for _, k := range slices.Sorted(maps.Keys(q)) { // the same error for the same URL
		v := q[k][0]
		opt, ok, err := urlparam.Duration(k, v)
		switch {
		case err != nil:
			return nil, err
		case ok:
			opts = append(opts, opt)
		case k == "prefix" && v == "":
			return nil, errors.New(`prefix= is empty; leave it out for the default, "baton:lock:"`)
		case k == "prefix":
			opts = append(opts, baton.WithPrefix(v))
		default:
			return nil, fmt.Errorf("unknown parameter %s; known: %s, prefix", strconv.Quote(baton.Printable(k)), strings.Join(urlparam.Durations, ", "))
		}
	}
	return opts, nil
}

// Reply is what one run of an acquire script answered: {1} when the key
// holds our value, else {0, V, PTTL, HEAD}: V the holder's value (or the
// first waiter's, when the key is free but reserved for it), PTTL the
// key's remaining TTL in ms, HEAD 1 when we are first in the queue. Only
// a first waiter uses PTTL: the scripts' contended paths send 0 to the
// waiters that are not first (and Redlock's to attempts that do not wait).
type Reply struct {
	Held   bool
	Holder string
	PTTL   time.Duration // negative when the key is free or has no expiry; 0 when not read
	Head   bool
	// Yielded: a claim took the key, but a live waiter was first; the key
	// still holds our value, for the caller to release (a fifth element,
	// 1).
	Yielded bool
}

// ParseReply reads an acquire script's answer.
func ParseReply(res []any) (Reply, error) {
	if len(res) == 0 {
		return Reply{}, errors.New("empty reply")
	}
	if n, _ := res[0].(int64); n == 1 {
		return Reply{Held: true}, nil
	}
	if len(res) < 4 {
		return Reply{}, fmt.Errorf("unexpected reply %v", res)
	}
	var r Reply
	r.Holder, _ = res[1].(string)
	pttl, _ := res[2].(int64)
	r.PTTL = time.Duration(pttl) * time.Millisecond
	head, _ := res[3].(int64)
	r.Head = head == 1
	if len(res) > 4 {
		y, _ := res[4].(int64)
		r.Yielded = y == 1
	}
	return r, nil
}

// Claimed is what a Claim found.
type Claimed struct {
	Ours   bool   // the key holds our value
	Marked bool   // one of the marks exists: the acquire script must follow
	Holder string // the key's value, when GET was sent
}

// Claim is a lock's first attempt without a script, in one round trip: a
// pipeline of SET key value NX PX ttlMS, EXISTS of marks (the keys whose
// presence calls for the acquire script: the wait queue, the observers'
// mark), and, with get, GET key to name the holder when the SET found the
// key taken. The key holds our value when the SET took it, or when go-redis
// sent the pipeline again after an answer was lost and GET shows our value.
// On an error it still reports Ours as far as it knows, so that the caller
// frees a key it took.
//
// The pipeline need not be atomic. A mark that was there when the SET ran
// and gone at EXISTS leaves nobody to be fair to or to tell. One that came
// in between finds the lock ours, and the script that follows may tell us
// to yield to a waiter that came after us the key we could have kept: a
// rare race that costs us our turn, never mutual exclusion, since the
// caller then releases only its own value.
func Claim(ctx context.Context, c goredis.UniversalClient, key, value string, ttlMS int64, get bool, marks ...string) (Claimed, error) {
	set := goredis.NewBoolCmd(ctx, "set", key, value, "nx", "px", ttlMS)
	seen := goredis.NewIntCmd(ctx, append([]any{"exists"}, Args(marks)...)...)
	cur := goredis.NewStringCmd(ctx, "get", key)
	_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		_ = p.Process(ctx, set)
		_ = p.Process(ctx, seen)
		if get {
			_ = p.Process(ctx, cur)
		}
		return nil
	})
	if errors.Is(err, goredis.Nil) { // GET found the key gone again
		err = errors.Join(set.Err(), seen.Err())
	}
	return Claimed{Ours: set.Val() || cur.Val() == value, Marked: seen.Val() > 0, Holder: cur.Val()}, err
}

// TTLMillis is d in whole milliseconds for PX and PEXPIRE, rounded up: a
// server that keeps the key a little longer than the local deadline
// assumes is safe, one that ends it earlier is not.
func TTLMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Args makes ss arguments for a command or a script.
func Args(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// MayHaveRun reports whether a request that failed with err may have run
// on the server all the same: every failure but a connection never made
// (dial) or never taken from the pool, where the request was never sent.
// A request whose answer did not come in time, or was cut off by the
// caller's context, may have set a key there. It sees only the last
// error: on a client that retries (go-redis's MaxRetries, which Open
// turns off and New's doc asks to turn off), a first try that ran and a
// retry that could not dial read as never sent.
func MayHaveRun(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return !errors.Is(err, goredis.ErrPoolTimeout)
}

// TimedOut reports whether err is a timeout of the socket (a read or
// write deadline, or a dial that timed out): the server did not answer in
// time, as opposed to refusing or failing.
func TimedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// NoPerm reports whether err is the server's ACL refusing the
// connection's user a command, a key or a channel: NOPERM, or, for a
// call inside a script on Redis 7.0, "The user executing the script
// can't ..." (the script has then run up to that call).
func NoPerm(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "The user executing the script can't")
}

// LockAlone reports whether err, a command's error on one lock's keys,
// is that lock's own, not the server's or the connection's: a key of
// another type (WRONGTYPE) or an ACL that refuses this user those keys
// (NOPERM; one that refuses a command refuses it on every lock).
func LockAlone(err error) bool {
	var rerr goredis.Error
	return errors.As(err, &rerr) && (hasCode(rerr.Error(), "WRONGTYPE") || NoPerm(err))
}

// Grants is what a Redis ACL user needs for baton's locks under prefix:
// their keys, the keys in their hash slot, the wake-up channels, and the
// commands the requests and scripts send. Redlock's Open also reads INFO
// (see the redlock package).
func Grants(prefix string) string {
	p := EscapeGlob(prefix)
	return fmt.Sprintf("~%s* ~{%s* &%s* +@read +@write +@scripting +@pubsub +@connection +time", p, p, EscapeGlob(WakeChannelPrefix))
}

// PermissionError is the error for a request (what) that the server at
// where refused by its ACL (err, see NoPerm): a *baton.OptionError, since
// trying again cannot mend it, naming grants, the permissions to grant.
func PermissionError(where, what string, err error, grants string) error {
	return &baton.OptionError{Option: "Redis user at", Value: where, Reason: fmt.Sprintf("%s: %v; grant the user %s", what, err, grants)}
}

// Refused reports whether err is a Redis server's refusal of the
// connection's own settings, which trying again cannot mend: a database
// number out of range, or credentials it does not accept. A server that
// answers with any other error (LOADING, MASTERDOWN) may answer later.
func Refused(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := strings.TrimPrefix(rerr.Error(), "ERR ")
	for _, p := range []string{"DB index", "invalid DB index", "WRONGPASS", "NOAUTH", "NOPERM", "AUTH", "invalid password", "invalid username-password"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Refusal returns the error for err, a request (what) that the server at
// where answered with an error reply, when trying again cannot mend it,
// and nil otherwise: a request that failed another way, or a reply that
// may change (see transientReply). keys are the keys the request touched,
// named when one of them holds another type. Refused:
//
//   - NOPERM (see NoPerm): a *baton.OptionError naming grants;
//   - NOAUTH or WRONGPASS (credentials changed on the server since the
//     connection was made): a *baton.OptionError;
//   - WRONGTYPE: a key holds a value of another type, set by something
//     other than baton; an error naming the keys;
//   - an unknown command, or one the server does not allow (renamed or
//     disabled in its configuration, refused by a proxy in front of it):
//     an error naming the reply.
//
// The plain errors wrap the reply (a goredis.Error), and match neither
// baton.ErrUnavailable nor baton.ErrInvalidOption: the CLI exits 1.
func Refusal(where, what string, err error, grants string, keys []string) error {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return nil
	}
	msg := rerr.Error()
	reply := Told(rerr)
	switch {
	case NoPerm(rerr):
		return PermissionError(where, what, reply, grants)
	case transientReply(msg):
		return nil
	case hasCode(msg, "NOAUTH"), hasCode(msg, "WRONGPASS"):
		return &baton.OptionError{Option: "Redis credentials for", Value: where, Reason: fmt.Sprintf("%s: %v; the server no longer accepts the user:password given: check them", what, reply)}
	case hasCode(msg, "WRONGTYPE"):
		which := "a key it touched"
		if len(keys) > 0 {
			which = "one of " + strings.Join(keys, ", ")
		}
		return fmt.Errorf("%s: %s: %w; a key of the lock (%s) holds a value of another type, not set by baton: delete it, or use another prefix", where, what, reply, which)
	case strings.Contains(msg, "unknown command"), strings.Contains(msg, "unknown subcommand"),
		strings.HasPrefix(msg, "ERR ") && strings.Contains(msg, "not allowed"):
		return fmt.Errorf("%s: %s: %w (the server does not run a command baton sends: renamed or disabled in its configuration, or refused by a proxy in front of it; trying again will not mend it)", where, what, reply)
	}
	return nil
}

// scriptWhere is what Redis 7 appends to an error raised inside a script:
// the script's SHA1 and its line, which are baton's, not the user's to act on.
var scriptWhere = regexp.MustCompile(` script: [0-9a-f]{40}, on @user_script:[0-9]+\.`)

// Told returns err, an error reply or an error that tells one, as it is
// told to a user: without where in baton's scripts the reply was raised.
// The error it returns wraps err.
func Told(err error) error {
	msg := err.Error()
	if !scriptWhere.MatchString(msg) {
		return err
	}
	return failkit.Reworded(scriptWhere.ReplaceAllString(msg, ""), err)
}

// transientReply reports whether msg, an error reply, may change on its
// own, and so stays the service failing: a server loading its data
// (LOADING), running a long script (BUSY), a replica cut off from its
// primary (MASTERDOWN), a cluster resharding or failing over (TRYAGAIN,
// CLUSTERDOWN), short of memory (OOM: keys expire, an operator frees
// some), unable to persist (MISCONF), short of replicas
// (NOREPLICAS), full of clients, or read-only (READONLY: a replica,
// which after a failover behind a DNS name a new connection, which
// go-redis makes after this reply, may no longer reach; a replica named
// in a URL is refused by Open instead, see Role). Redis 6 puts the code
// of a reply inside a script's after "-" or ": ", Redis 7 at the start.
func transientReply(msg string) bool {
	for _, c := range []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "OOM", "MISCONF", "NOREPLICAS", "READONLY", "NOSCRIPT"} {
		if hasCode(msg, c) {
			return true
		}
	}
	return strings.Contains(msg, "max number of clients reached")
}

// hasCode reports whether the error reply msg has code c, at its start
// or, in a script's error on Redis 6, after "-" or ": ".
func hasCode(msg, c string) bool {
	return strings.HasPrefix(msg, c+" ") || strings.Contains(msg, "-"+c+" ") || strings.Contains(msg, ": "+c+" ")
}

// ReadOnly reports whether err is a replica's READONLY reply to a write.
func ReadOnly(err error) bool {
	var rerr goredis.Error
	return errors.As(err, &rerr) && hasCode(rerr.Error(), "READONLY")
}

// WithReadOnlyHint returns err with ReadOnlyHint said after it when it is
// a READONLY reply, and err as it is otherwise.
func WithReadOnlyHint(err error) error {
	if ReadOnly(err) {
		return fmt.Errorf("%w (%s)", err, ReadOnlyHint)
	}
	return err
}

// ReadOnlyHint is said after a READONLY reply: it is the service failing
// (see transientReply) until the address leads to a primary again.
const ReadOnlyHint = "the server is a read-only replica: after a failover, until a new connection reaches the primary; if it stays so, the address names a replica: give the primary's"

// Role returns the role of the server c talks to ("master" or "replica")
// as HELLO without arguments tells it, in the category @connection that
// Grants lists, or "" when the server does not say (a server before 6.2,
// a proxy, a reply of another shape, a request that failed: the request
// that follows reports what it was).
func Role(ctx context.Context, c goredis.UniversalClient) string {
	res, err := c.Do(ctx, "hello").Result()
	if err != nil {
		return ""
	}
	switch r := res.(type) {
	case map[any]any: // RESP3
		s, _ := r["role"].(string)
		return s
	case []any: // RESP2: field, value, ...
		for i := 0; i+1 < len(r); i += 2 {
			if f, _ := r[i].(string); f == "role" {
				s, _ := r[i+1].(string)
				return s
			}
		}
	}
	return ""
}

// ReplicaError is the error for the server at where that Role says is a
// replica, which refuses writes (a lock on it would be a lock on nothing
// the primary knows): a *baton.UnavailableError, as READONLY is (see
// transientReply), since an address that names the primary reaches the
// old one, now a replica, for a while after a failover; it says to give
// the primary's address if it stays so.
func ReplicaError(where string) error {
	return &baton.UnavailableError{Where: where, Err: errors.New(ReadOnlyHint)}
}

// ForceErr is err from a try of a forced release's delete (see
// forcekit.Delete), marked final when it is a refusal (see Refusal),
// which the same request again would get again.
func ForceErr(err error) error {
	if err != nil && Refusal("", "", err, "", nil) != nil {
		return forcekit.Final(err)
	}
	return err
}
