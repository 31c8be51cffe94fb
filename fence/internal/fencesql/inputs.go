package fencesql

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/baton-go/baton"
)

// ValidateToken checks the arguments of a fence check: resource must be a
// valid lock name (baton.ValidateName) and token positive.
func ValidateToken(resource string, token baton.Token) error {
	if err := baton.ValidateName(resource); err != nil {
		return err
	}
	if token <= 0 {
		return &baton.OptionError{Option: "fencing token", Value: strconv.FormatInt(int64(token), 10),
			Reason: "must be positive; a zero token comes from a lease without fencing, use a FencedLocker's"}
	}
	return nil
}

// ValidateRun checks a resource name and a run ID: 1 to baton.MaxNameLen
// bytes of UTF-8 without NUL.
func ValidateRun(resource, runID string) error {
	if err := baton.ValidateName(resource); err != nil {
		return err
	}
	switch {
	case runID == "":
		return &baton.OptionError{Option: "run ID", Value: `""`, Reason: "must not be empty; use one per scheduled run, such as 2026-10-31"}
	case len(runID) > baton.MaxNameLen:
		return &baton.OptionError{Option: "run ID", Value: strconv.Quote(runID[:20] + "…"), Reason: fmt.Sprintf("is %d bytes; the limit is %d", len(runID), baton.MaxNameLen)}
	case !utf8.ValidString(runID):
		return &baton.OptionError{Option: "run ID", Value: strconv.Quote(runID), Reason: "is not valid UTF-8"}
	}
	for i := 0; i < len(runID); i++ {
		if runID[i] == 0 {
			return &baton.OptionError{Option: "run ID", Value: strconv.Quote(runID), Reason: "contains a NUL byte"}
		}
	}
	return nil
}
