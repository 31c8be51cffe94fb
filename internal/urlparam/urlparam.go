// Package urlparam reads the backend URL query parameters every backend
// shares: the lease timings.
package urlparam

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-go/baton"
)

// Durations are the shared parameters, in the order error messages list
// them.
var Durations = []string{"ttl", "renew-every", "request-timeout", "drift"}

// Postgres are the parameters a postgres:// lock URL takes for baton (the
// rest go to pgx): Durations and table. The fence store strips them from a
// URL that names both.
var Postgres = append(Durations[:len(Durations):len(Durations)], "table")

// Duration returns the option a shared duration parameter sets, and ok
// false when key is not one of Durations. A value that is not a positive Go
// duration is an error naming the parameter (see Positive).
func Duration(key, value string) (opt baton.Option, ok bool, err error) {
	var with func(time.Duration) baton.Option
	var example string
	switch key {
	case "ttl":
		with, example = baton.WithTTL, "15s"
	case "renew-every":
		with, example = baton.WithRenewEvery, "5s"
	case "request-timeout":
		with, example = baton.WithRequestTimeout, "5s"
	case "drift":
		with, example = baton.WithDrift, "50ms"
	default:
		return nil, false, nil
	}
	d, err := Positive(key, value, example)
	if err != nil {
		return nil, true, err
	}
	return with(d), true, nil
}

// Positive parses the value of the duration parameter key. A value that is
// not a Go duration, or is not positive, is an error naming the parameter
// and giving example as one that would do: a parameter left out takes the
// default, one given as zero is refused, as the options are.
func Positive(key, value, example string) (time.Duration, error) {
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, fmt.Errorf("%s=%s is not a duration such as %s", key, strconv.Quote(baton.Printable(value)), example)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s=%s must be positive, such as %s; leave it out for the default", key, baton.Printable(value), example)
	}
	return d, nil
}

// Port reads a URL's port: a plain decimal number from 1 to 65535, no
// sign and no leading zero, so that one port has one spelling.
func Port(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] == '0' || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	return n, true
}

// Once returns an error naming the first parameter of q (in sorted
// order) that is given more than once, among keys, or among all of q's when
// keys is empty: a URL that says ttl=5s&ttl=6s is a mistake, not the last
// value's.
func Once(q url.Values, keys ...string) error {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if n := len(q[k]); n > 1 && (len(keys) == 0 || slices.Contains(keys, k)) {
			return fmt.Errorf("%s is given %d times; give it once", strconv.Quote(baton.Printable(k)), n)
		}
	}
	return nil
}

// Query returns the query parameters of u, refusing what url.URL.Query
// would drop without a word: a pair that does not parse (a ';' between
// pairs, a '%' not followed by two hex digits), which would leave a setting
// at its default (a prefix meant to keep two applications apart, or a
// DSN's sslmode=require); and a fragment, which cuts off whatever follows a
// '#'.
func Query(u *url.URL) (url.Values, error) {
	if u.Fragment != "" {
		return nil, errors.New("has a #fragment, which is not read; write a '#' in a path or parameter as %23")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the query is malformed (%s); write it as ?key=value&key=value, with '&' between pairs, and a '%%', ';' or '&' in a value as %%25, %%3B or %%26", baton.Printable(err.Error()))
	}
	return q, nil
}
