package zk

import (
	"fmt"
	"strings"
	"time"

	zkgo "github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
)

// DefaultRoot is the node under which locks live unless baton.WithPrefix
// (or the path of a zk:// URL) says otherwise. Lock NAME is the election
// node DefaultRoot + "/" + NAME.
const DefaultRoot = "/baton/lock"

// MinSessionTimeout is the shortest TTL (session timeout) accepted before
// asking the server. Servers refuse less than 2 x tickTime anyway; Dial
// checks what the server granted.
const MinSessionTimeout = 100 * time.Millisecond

// Settings are the ZooKeeper-specific choices, beside baton's options. The
// zero value is the default; New and Dial use it.
type Settings struct {
	// ContinueWhileSuspended keeps a holder working while its connection to
	// ZooKeeper is lost (Curator's SUSPENDED), until the session expires
	// (LOST) or the local deadline passes, whichever comes first; a
	// reconnection within the session timeout keeps the lease. Default
	// false: a lost connection cancels the work at once, because the holder
	// can no longer know that it still holds the lock.
	ContinueWhileSuspended bool
	// ACL is the ACL of every node baton creates (the root and its
	// missing ancestors, the election nodes and the candidates). Default:
	// zk.WorldACL(zk.PermAll), or zk.AuthACL(zk.PermAll) (only the
	// creating identity) when Auth is set. It must let the holder Create,
	// Delete and Read on the election nodes; without Delete every Release
	// fails, and the node holds the lock until the session ends. Since
	// ancestors get it too, with Auth set a shared ancestor is the first
	// identity's alone: create shared ones beforehand (see the package
	// doc).
	ACL []zkgo.ACL
	// Auth is the digest identity Dial adds to its connection before any
	// request. New only uses it to pick the default ACL: authenticate your
	// own connection with conn.AddAuth.
	Auth *Digest
}

// Digest is a ZooKeeper digest identity, "user:password". Its String and
// GoString never show the password.
type Digest struct {
	User     string
	Password string
}

// String returns "user:xxxxx".
func (d Digest) String() string { return d.User + ":xxxxx" }

// GoString returns the Go syntax of d with the password hidden, for %#v.
func (d Digest) GoString() string {
	return fmt.Sprintf("zk.Digest{User: %q, Password: \"xxxxx\"}", d.User)
}

func (d Digest) auth() []byte { return []byte(d.User + ":" + d.Password) }

// newConfig resolves baton's options and checks what ZooKeeper needs of
// them: a session timeout in whole milliseconds, at least
// MinSessionTimeout, in which two renewals fit, less the drift (the
// deadline counts from the renewal before the last). It cannot check that
// they fit with the round trips too: that is the renewals' own margin.
func newConfig(opts []baton.Option) (baton.Config, error) {
	cfg, err := baton.NewConfig(opts...)
	if err != nil {
		return cfg, err
	}
	if err := cfg.Validate(MinSessionTimeout); err != nil {
		return cfg, err
	}
	if cfg.TTL%time.Millisecond != 0 || cfg.TTL > time.Duration(1<<31-1)*time.Millisecond {
		return cfg, &baton.OptionError{Option: "ttl", Value: cfg.TTL.String(), Reason: "is the ZooKeeper session timeout, a whole number of milliseconds; use one such as 4s"}
	}
	// The deadline counts from the renewal before the last, and renewals
	// come no sooner than settleTime apart: two of them must fit in the
	// TTL less the drift.
	const why = "a ZooKeeper lease's deadline counts from the renewal before the last, so two renewals must fit in TTL - drift"
	settle := settleTime(cfg.TTL)
	switch {
	case 2*settle >= cfg.TTL-cfg.Drift:
		return cfg, &baton.OptionError{Option: "drift", Value: cfg.Drift.String(), Reason: fmt.Sprintf("is too large: %s, and renewals come at least 3/10 of the TTL (%v) apart: keep the drift below 2/5 of the TTL (%v)", why, settle, cfg.TTL*2/5)}
	case 2*cfg.RenewEvery >= cfg.TTL-cfg.Drift:
		return cfg, &baton.OptionError{Option: "renew interval", Value: cfg.RenewEvery.String(), Reason: fmt.Sprintf("is too long: %s (%v - %v): use less than %v; the default is TTL/3", why, cfg.TTL, cfg.Drift, (cfg.TTL-cfg.Drift)/2)}
	}
	return cfg, nil
}

// cleanRoot turns a prefix into the root node path: absolute, no trailing
// slash, no empty, "." or ".." segment, not under /zookeeper.
func cleanRoot(prefix string) (string, error) {
	if prefix == "" || prefix == "/" {
		return DefaultRoot, nil
	}
	p := strings.TrimSuffix(prefix, "/")
	bad := func(reason string) error {
		return &baton.OptionError{Option: "ZooKeeper root", Value: baton.Printable(prefix), Reason: reason}
	}
	if !strings.HasPrefix(p, "/") {
		return "", bad("must be an absolute node path such as /baton/lock")
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return "", bad("has an empty segment (//)")
		case ".", "..":
			return "", bad(`has a "." or ".." segment`)
		}
		for _, r := range seg { // invalid UTF-8 reads as U+FFFD, refused too
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
				return "", bad("has a character ZooKeeper does not allow in a node name")
			}
		}
	}
	if p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/") {
		return "", bad("is under /zookeeper, which the server reserves")
	}
	return p, nil
}
