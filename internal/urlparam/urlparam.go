// Package urlparam reads the backend URL query parameters every backend
// shares: the lease timings.
package urlparam

import (
	"fmt"
	"strconv"
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
// false when key is not one of Durations. A value that is not a Go duration
// is an error naming the parameter.
func Duration(key, value string) (opt baton.Option, ok bool, err error) {
	var with func(time.Duration) baton.Option
	switch key {
	case "ttl":
		with = baton.WithTTL
	case "renew-every":
		with = baton.WithRenewEvery
	case "request-timeout":
		with = baton.WithRequestTimeout
	case "drift":
		with = baton.WithDrift
	default:
		return nil, false, nil
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return nil, true, fmt.Errorf("%s=%s is not a duration such as 15s", key, strconv.Quote(baton.Printable(value)))
	}
	return with(d), true, nil
}
