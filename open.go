package baton

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Opener builds a Locker from a parsed URL. Each backend package has one,
// named Open.
type Opener func(ctx context.Context, u *url.URL, opts ...Option) (*Locker, error)

// Openers maps URL schemes ("etcd", "zk", "postgres") to backends. It is a
// plain value, not a global registry: a program lists the backends it links,
// as package backends does for all of baton's.
type Openers map[string]Opener

// Open parses rawURL and builds a Locker with the backend registered for its
// scheme. Errors name the URL without its password.
func (o Openers) Open(ctx context.Context, rawURL string, opts ...Option) (*Locker, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	open, ok := o[u.Scheme]
	if !ok {
		return nil, &OptionError{"backend URL", Redact(rawURL), fmt.Sprintf("unknown scheme %q; use one of %s", u.Scheme, o.schemes())}
	}
	return open(ctx, u, opts...)
}

func (o Openers) schemes() string {
	s := make([]string, 0, len(o))
	for k := range o {
		s = append(s, k+"://")
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// ParseURL parses a backend or store URL and checks that it has a scheme.
// Its errors are *OptionError, on one line, and never contain the password.
func ParseURL(rawURL string) (*url.URL, error) {
	shown := Redact(rawURL)
	switch t := strings.TrimSpace(rawURL); {
	case t == "":
		return nil, &OptionError{"URL", `""`, "is empty; pass one such as etcd://127.0.0.1:2379"}
	case t != rawURL:
		return nil, &OptionError{"URL", strconv.Quote(redact(rawURL)), "has white space around it; remove it (a URL holds none: write a space inside one as %20)"}
	}
	noScheme := &OptionError{"URL", shown, "has no scheme; write it as scheme://host:port, such as etcd://127.0.0.1:2379"}
	parsed, hosts, multi := hostList(rawURL)
	u, err := url.Parse(parsed)
	if err == nil && multi {
		u.Host = hosts
	}
	if err != nil {
		if !strings.Contains(rawURL, "://") && !strings.HasPrefix(rawURL, "sqlite:") {
			return nil, noScheme
		}
		msg := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			msg = ue.Err.Error() // url.Error repeats the URL, password and all
		}
		how := "; write it as scheme://[user:password@]host:port[/path], such as etcd://127.0.0.1:2379"
		if strings.HasPrefix(strings.ToLower(rawURL), "sqlite:") {
			how = "; write it as sqlite:PATH, with a '%' in PATH as %25"
		}
		return nil, &OptionError{"URL", shown, Printable(hideQuoted(msg, redact(rawURL))) + how}
	}
	if u.Scheme == "" {
		return nil, noScheme
	}
	u.Scheme = strings.ToLower(u.Scheme)
	return u, nil
}

// hideQuoted replaces each part of rawURL that msg, an error of
// url.Parse, quotes (a port, an escape, a host) with "xxxxx" unless
// shown, the redacted URL, shows it: a password holding an unescaped '/',
// '?' or '#' ends the authority early, and url.Parse then quotes part of
// it as a port. It says how to write such a password.
func hideQuoted(msg, shown string) string {
	hidden := false
	msg = goQuoted.ReplaceAllStringFunc(msg, func(q string) string {
		if part, err := strconv.Unquote(q); err == nil && strings.Contains(shown, part) {
			return q
		}
		hidden = true
		return `"xxxxx"`
	})
	if hidden {
		msg += " (a password must have its '/', '?', '#' and '@' percent-encoded: %2F, %3F, %23, %40)"
	}
	return msg
}

// goQuoted matches a string quoted by strconv.Quote, as net/url quotes
// the parts of a URL it refuses.
var goQuoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// hostList finds a list of hosts (h1:p1,h2,[::1]:p3) in rawURL's
// authority, which url.Parse would check as one host:port and refuse
// unless only the last names a port, and none is an IPv6 address. It
// returns rawURL with the list replaced by one placeholder host, for
// url.Parse, and the list, which the caller puts back and each backend
// checks host by host; multi is false, and rawURL unchanged, when the
// authority names one host or none.
func hostList(rawURL string) (parsed, hosts string, multi bool) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || !validScheme(scheme) { // a "://" later on, in an opaque URL's query
		return rawURL, "", false
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	userinfo, hosts := "", auth
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		userinfo, hosts = auth[:at+1], auth[at+1:]
	}
	if !strings.Contains(hosts, ",") {
		return rawURL, "", false
	}
	if h, err := url.PathUnescape(hosts); err == nil {
		hosts = h // as url.Parse unescapes one host ([fe80::1%25eth0])
	}
	return scheme + "://" + userinfo + "hosts" + rest[end:], hosts, true
}

// validScheme reports whether s is a URL scheme: a letter, then letters,
// digits, + - and . (RFC 3986).
func validScheme(s string) bool {
	for i, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && ('0' <= r && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// Printable returns s as is when it is printable on one line, and quoted
// with Go escapes otherwise, so error messages stay one line.
func Printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// Redact returns s, a URL or a key=value connection string, with its
// passwords replaced by "xxxxx", so that error messages never show one: the
// password of a URL's user information, and password= and sslpassword= in
// a URL's query or among key=value pairs. A password holding '/', '?' or
// '#' unescaped ends the authority early for url.Parse (a "port" that is
// not one, or even a valid URL with the rest of the password in its path),
// so where the parse fails, or leaves an '@' after what it took for the
// authority without having found a user, or a password, before it, Redact
// hides whatever lies between the first ':' after "://" and the last '@':
// more than the password at times (etcd://h:2379/a@b), never less. So it
// does in a URL whose "://" was mistyped (etcd//u:pw@h, etcd:/u:pw@h), but
// not in a sqlite:PATH. The result is printable on one
// line, quoted otherwise (see Printable).
func Redact(s string) string { return Printable(redact(s)) }

// redact is Redact before Printable.
func redact(s string) string {
	// White space around a URL (from an env file, a template) is kept,
	// and what it surrounds redacted as it would be without it.
	if t := strings.TrimSpace(s); t != s && t != "" {
		start := strings.Index(s, t)
		return s[:start] + redact(t) + s[start+len(t):]
	}
	s = kvPassword.ReplaceAllString(s, "${1}xxxxx")
	// A query's password, with or without a well-formed "://" before it.
	s = queryPassword.ReplaceAllString(s, "${1}xxxxx")
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !validScheme(scheme) {
		return redactNoScheme(s)
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return scheme + "://" + rest // no user information
	}
	if u, err := url.Parse(scheme + "://" + rest); err == nil {
		_, hasPassword := u.User.Password()
		if !strings.Contains(u.Path+u.RawQuery+u.Fragment, "@") || (u.User != nil && !hasPassword) {
			// The user information url.Parse found ends at the last '@',
			// or holds no password: Redacted hides what there is.
			return u.Redacted()
		}
	}
	if user, _, ok := strings.Cut(rest[:at], ":"); ok {
		rest = user + ":xxxxx" + rest[at:]
	}
	return scheme + "://" + rest
}

// redactNoScheme redacts s, which has no "://": key=value pairs (already
// done), a sqlite:PATH (shown whole), or a URL whose "://" was mistyped
// (etcd//u:pw@h, etcd:/u:pw@h, u:pw@h:2379), whose password, between the
// first ':' and the last '@', it hides.
func redactNoScheme(s string) string {
	at := strings.LastIndex(s, "@")
	colon := strings.Index(s, ":")
	if at < 0 || colon < 0 || colon > at || strings.ContainsAny(s[:colon], "= \t\n\v\f\r") || strings.EqualFold(s[:colon], "sqlite") {
		return s
	}
	return s[:colon+1] + "xxxxx" + s[at:]
}

var (
	// kvPassword matches a password among key=value pairs as pgx reads
	// them: quoted, with backslash escapes ('s3 cr\'et'), or unquoted up to
	// the first space not escaped by a backslash (s3\ cret). A quote never
	// closed runs to the end: more than the password, never less.
	kvPassword    = regexp.MustCompile(`(?is)((?:^|\s)(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*(?:'|\\?$)|(?:[^\s\\]|\\.|\\$)*)`)
	queryPassword = regexp.MustCompile(`(?i)([?&;](?:ssl)?password=)[^&]*`)
)
