package baton

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-go/baton/internal/asynclog"
)

// Defaults for the options. Zero in a Config field means "use the
// default"; an option given explicitly with zero is an error instead (see
// NewConfig).
const (
	// DefaultTTL is how long a lease lives without renewal.
	DefaultTTL = 15 * time.Second
	// DefaultRequestTimeout bounds each request to the lock service, so an
	// unreachable service is reported in seconds instead of hanging.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultReleaseTimeout bounds Release, which runs on a context detached
	// from the caller's so that it still happens after the caller gave up.
	DefaultReleaseTimeout = 5 * time.Second
	// MaxNameLen is the longest lock name accepted, in bytes.
	MaxNameLen = 200
)

// Config is the resolved set of options a backend is built with. Build one
// with NewConfig; a backend validates it against its own limits with
// Validate.
type Config struct {
	// TTL is the lease's time to live on the lock service. Default DefaultTTL.
	TTL time.Duration
	// RenewEvery is the renewal interval. Default TTL/3. Must be below TTL.
	RenewEvery time.Duration
	// Drift is subtracted from the lease's end when the holder computes its
	// local deadline, to allow for clock-rate differences and scheduling
	// delay. Default TTL/100 + 2ms. Must be below TTL - RenewEvery, or no
	// renewal could ever land in time.
	Drift time.Duration
	// Holder identifies this process in the lock service, for status and
	// error messages. Default host:pid.
	Holder string
	// ReleaseTimeout bounds Release. Default DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// RequestTimeout bounds each request to the lock service (not a whole
	// wait for a contended lock; on ZooKeeper, a waiter's reads once its
	// node is in line are waited for as long as its session may live).
	// Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Prefix is where locks live on the lock service: a key prefix on etcd
	// and Redis, a parent node on ZooKeeper. Each backend documents its
	// default.
	Prefix string
	// Logger receives the library's logs. Default: discards everything.
	// NewConfig puts the handler of a logger given behind a queue of its
	// own (see WithLogger), so Logger is not the caller's logger then.
	Logger *slog.Logger

	given given // the durations set by an option, which NewConfig checks
}

// given records which durations an option set, so that NewConfig can tell
// an explicit zero (an error) from an option left out (the default).
type given uint8

const (
	givenTTL given = 1 << iota
	givenRenewEvery
	givenDrift
	givenReleaseTimeout
	givenRequestTimeout
	givenHolder
)

// Option sets one field of a Config.
type Option func(*Config)

// WithTTL sets the lease's time to live. Default 15s (leave the option out
// for it); d must be positive. A shorter TTL means a faster takeover after
// a crash and more lost leases when a holder is slow.
func WithTTL(d time.Duration) Option {
	return func(c *Config) { c.TTL, c.given = d, c.given|givenTTL }
}

// WithRenewEvery sets how often a held lease is renewed. Default TTL/3; d
// must be positive and below the TTL.
func WithRenewEvery(d time.Duration) Option {
	return func(c *Config) { c.RenewEvery, c.given = d, c.given|givenRenewEvery }
}

// WithDrift sets the safety margin subtracted from the local deadline.
// Default TTL/100 + 2ms. d must be positive: a holder with no margin would
// stop only at the very moment the lock service may free its lock, with
// nothing for clock-rate differences or scheduling delay.
func WithDrift(d time.Duration) Option {
	return func(c *Config) { c.Drift, c.given = d, c.given|givenDrift }
}

// WithHolder sets the identity stored with every lock. Default host:pid
// (leave the option out for it); id must not be empty or blank.
func WithHolder(id string) Option {
	return func(c *Config) { c.Holder, c.given = id, c.given|givenHolder }
}

// WithReleaseTimeout bounds each Release. Default 5s; d must be positive.
func WithReleaseTimeout(d time.Duration) Option {
	return func(c *Config) { c.ReleaseTimeout, c.given = d, c.given|givenReleaseTimeout }
}

// WithRequestTimeout bounds each request to the lock service (see
// Config.RequestTimeout). Default 5s; d must be positive.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *Config) { c.RequestTimeout, c.given = d, c.given|givenRequestTimeout }
}

// WithPrefix sets where locks live on the lock service; see Config.Prefix.
func WithPrefix(p string) Option { return func(c *Config) { c.Prefix = p } }

// WithLogger sets the logger. Default: no logs. Its handler is called from
// a goroutine of baton's own, never on the paths that declare a lease lost,
// cancel the work's context, give a lock back or wake a waiter, so that a
// handler that blocks (writing to a pipe nobody reads) cannot hold them up:
// records wait in a queue, and past 1,024 waiting ones baton drops its
// records and then logs how many it dropped. Locker.Close waits up to the
// release timeout for the queue to empty.
func WithLogger(l *slog.Logger) Option { return func(c *Config) { c.Logger = l } }

// NewConfig applies opts over the defaults and validates the result with
// Validate(0). A duration option given with zero or a negative value is an
// *OptionError, not a request for the default: the default applies only
// when the option is left out. When an option is given twice, the last
// value counts.
func NewConfig(opts ...Option) (Config, error) {
	var c Config
	for _, o := range opts {
		o(&c)
	}
	if err := c.checkGiven(); err != nil {
		return c, err
	}
	c.fill()
	return c, c.Validate(0)
}

// checkGiven refuses a non-positive duration set by an option, which fill
// would otherwise take for a field left unset.
func (c *Config) checkGiven() error {
	for _, f := range []struct {
		bit  given
		name string
		d    time.Duration
		def  string
	}{
		{givenTTL, "ttl", c.TTL, DefaultTTL.String()},
		{givenRenewEvery, "renew interval", c.RenewEvery, "TTL/3"},
		{givenDrift, "drift", c.Drift, "TTL/100 + 2ms"},
		{givenReleaseTimeout, "release timeout", c.ReleaseTimeout, DefaultReleaseTimeout.String()},
		{givenRequestTimeout, "request timeout", c.RequestTimeout, DefaultRequestTimeout.String()},
	} {
		if c.given&f.bit != 0 && f.d <= 0 {
			return &OptionError{f.name, f.d.String(), fmt.Sprintf("must be positive; leave the option out for the default (%s)", f.def)}
		}
	}
	if c.given&givenHolder != 0 && strings.TrimSpace(c.Holder) == "" {
		return &OptionError{"holder", strconv.Quote(c.Holder), "names no one; give an identity, or leave the option out for the default (host:pid)"}
	}
	return nil
}

func (c *Config) fill() {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.RenewEvery == 0 && c.TTL > 0 {
		c.RenewEvery = c.TTL / 3
	}
	if c.Drift == 0 && c.TTL > 0 {
		c.Drift = c.TTL/100 + 2*time.Millisecond
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = DefaultReleaseTimeout
	}
	if c.Holder == "" {
		c.Holder = DefaultHolder()
	}
	switch {
	case c.Logger == nil:
		c.Logger = slog.New(slog.DiscardHandler)
	case c.Logger.Handler() != slog.DiscardHandler:
		// A handler that blocks must not hold up a loss (see WithLogger).
		c.Logger = slog.New(asynclog.New(c.Logger.Handler()))
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
}

// Validate checks the timing rules: TTL at least minTTL (the backend's
// minimum; 0 for none) and positive, RenewEvery positive and below TTL, and
// Drift positive and small enough for a renewal to land before the local
// deadline.
func (c Config) Validate(minTTL time.Duration) error {
	// The renew interval and the drift both derived from a TTL given by
	// option: a rule they break is the TTL's, which is named. (A Config
	// built by hand sets no given bits: its fields are named as they are.)
	derived := c.given&givenTTL != 0 && c.given&(givenRenewEvery|givenDrift) == 0
	switch {
	case c.TTL <= 0:
		return &OptionError{"ttl", c.TTL.String(), "must be positive"}
	case minTTL > 0 && c.TTL < minTTL:
		return &OptionError{"ttl", c.TTL.String(), fmt.Sprintf("is below this backend's minimum of %v", minTTL)}
	case c.RenewEvery <= 0 && derived, c.Drift >= c.TTL-c.RenewEvery && derived:
		return &OptionError{"ttl", c.TTL.String(), fmt.Sprintf("is too short: a lease renews every TTL/3 (%v), and its holder stops TTL/100+2ms (%v) before the lock service may free it, which must leave time for a renewal: use a longer TTL", c.RenewEvery, c.Drift)}
	case c.RenewEvery <= 0:
		return &OptionError{"renew interval", c.RenewEvery.String(), "must be positive"}
	case c.RenewEvery >= c.TTL:
		return &OptionError{"renew interval", c.RenewEvery.String(), fmt.Sprintf("must be below the TTL (%v); the default is TTL/3", c.TTL)}
	case c.Drift <= 0:
		return &OptionError{"drift", c.Drift.String(), "must be positive: it is the margin by which a holder stops before the lock service may free the lock"}
	case c.Drift >= c.TTL-c.RenewEvery:
		return &OptionError{"drift", c.Drift.String(), fmt.Sprintf("must be below TTL - renew interval (%v - %v = %v), or every lease would expire locally before its renewal: use a longer TTL, or a smaller drift", c.TTL, c.RenewEvery, c.TTL-c.RenewEvery)}
	case c.ReleaseTimeout <= 0:
		return &OptionError{"release timeout", c.ReleaseTimeout.String(), "must be positive"}
	case c.RequestTimeout <= 0:
		return &OptionError{"request timeout", c.RequestTimeout.String(), "must be positive"}
	case len(c.Holder) > MaxNameLen:
		return &OptionError{"holder", strconv.Quote(c.Holder[:20] + "…"), fmt.Sprintf("is longer than %d bytes", MaxNameLen)}
	}
	return nil
}

// DefaultHolder returns host:pid, the default holder identity.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// ValidateName checks a lock name: 1 to MaxNameLen bytes of letters, digits
// and the punctuation . _ - : @ + =. Names are used verbatim as keys, paths
// and SQL values on every backend, so the rule is the same everywhere; "/"
// is excluded because on etcd and ZooKeeper lock "a" would otherwise cover
// lock "a/b", and "." and ".." alone because ZooKeeper reads them as
// directories.
func ValidateName(name string) error {
	if name == "" {
		return &OptionError{"lock name", `""`, "must not be empty"}
	}
	if len(name) > MaxNameLen {
		return &OptionError{"lock name", strconv.Quote(name[:20] + "…"), fmt.Sprintf("is %d bytes; the limit is %d", len(name), MaxNameLen)}
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			what := fmt.Sprintf("%q", name[i])
			if r, size := utf8.DecodeRuneInString(name[i:]); r != utf8.RuneError || size > 1 {
				what = strconv.QuoteRune(r) // a character of several bytes: name it, not its first byte
			} else if name[i] >= utf8.RuneSelf {
				what = fmt.Sprintf("0x%02x (not UTF-8)", name[i])
			}
			return &OptionError{"lock name", strconv.Quote(name), fmt.Sprintf("has %s at byte %d; use letters, digits and . _ - : @ + =", what, i)}
		}
	}
	if name == "." || name == ".." {
		return &OptionError{"lock name", strconv.Quote(name), "names a directory on path-like backends (ZooKeeper); add a letter or digit"}
	}
	return nil
}

func nameByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	switch b {
	case '.', '_', '-', ':', '@', '+', '=':
		return true
	}
	return false
}
