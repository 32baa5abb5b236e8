package model

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// This file holds the checks of configuration values that every host of
// the engine reads the same way, so that the Caddy module and the Traefik
// plugin accept the same values and describe a mistake in the same words.
// A value core refuses is a *FieldError, or, for one limit of a list, a
// *LimitError holding one: each host names the field in its own words
// (Caddyfile subdirective, JSON path, Traefik option) from the Field,
// Value and Reason, never from the error's text.

// CheckLimits validates every limit of limits (Limit.Validate) and
// refuses a name used twice, reporting the second use. Its error is a
// *LimitError whose Index is the limit's position in limits.
func CheckLimits(limits []*Limit) error {
	names := make(map[string]bool, len(limits))
	for i, l := range limits {
		if err := l.Validate(); err != nil {
			le := err.(*LimitError)
			le.Index = i
			return le
		}
		if names[l.Name] {
			return &LimitError{Index: i, Limit: l.Name, Err: Refuse("name", l.Name, "defined twice")}
		}
		names[l.Name] = true
	}
	return nil
}

// CheckFallback checks the local fallback's settings: fallback tells
// whether it is on, instances the number of instances it divides quotas by
// (zero when not set), and inMemory that the primary store is a
// core.MemoryStore, which cannot fail.
func CheckFallback(fallback bool, instances int, inMemory bool) error {
	switch {
	case !fallback && instances != 0:
		return &FieldError{Field: "instances", Reason: "only the local fallback divides quotas by the number of instances", Needs: "fallback"}
	case fallback && inMemory:
		return Refuse("fallback", "", "applies only to a store that can fail, such as Redis, not to memory")
	case fallback && instances < 1:
		return Refuse("instances", strconv.Itoa(instances), "must be at least 1")
	}
	return nil
}

// CheckLeases refuses a Lease on a limit decided in memory: inMemory
// tells that the store is a core.MemoryStore, where every decision is
// local already. Its error is a *LimitError.
func CheckLeases(limits []*Limit, inMemory bool) error {
	if !inMemory {
		return nil
	}
	for i, l := range limits {
		if l.Lease != 0 {
			return &LimitError{Index: i, Limit: l.Name, Err: Refuse("lease", FormatFloat(l.Lease), "only a Redis store's capacity is leased (in memory, every decision is local already)")}
		}
	}
	return nil
}

// LimitNameReserved lists the bytes a Limit's Name must not contain: the
// double quote, backslash, colon, braces, carriage return and line feed.
// Names appear quoted in RateLimit-Policy headers and inside store keys,
// where these bytes delimit.
const LimitNameReserved = "\"\\:{}\r\n"

// CheckLimitName returns a *FieldError of the field "name" if name is
// empty or contains a byte of LimitNameReserved, and nil otherwise.
func CheckLimitName(name string) error {
	if name == "" {
		return Refuse("name", "", "must not be empty")
	}
	if strings.ContainsAny(name, LimitNameReserved) {
		return Refuse("name", name, "must not contain quotes, backslashes, colons, braces or line breaks")
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			// A structured-field String carries printable ASCII only, and
			// the name must read the same in the header and the body.
			return Refuse("name", name, "must be printable ASCII (it is sent in the RateLimit-Policy header)")
		}
	}
	return nil
}

// CheckBurst returns a FieldError when burst, a value written in a host's
// configuration, is 0 (a negative one is Limit.Validate's to refuse). A
// Limit reads a zero Burst as unset, and each host fills an unset burst
// with its own default (the Caddy module: the quota; the Traefik plugin: 1,
// as Traefik's rateLimit), so a burst written as 0 would mean the quota in
// one host and 1 in the other: every host refuses it instead.
func CheckBurst(burst float64) error {
	if burst == 0 {
		return Refuse("burst", strconv.FormatFloat(burst, 'g', -1, 64), "must be positive (leave burst out for the default)")
	}
	return nil
}

// ErrCostNotNumber is ParseCost's error for a value that is not a finite
// number, infinities and NaN included.
var ErrCostNotNumber = errors.New("not a number")

// ParseCost parses a request's cost: a finite number, not negative, in
// the syntax of strconv.ParseFloat ("3", "0.5", "1e3"), without
// surrounding spaces; a limit takes 0 only as an estimate (CheckCost).
// Its error, ErrCostNotNumber or "must not be negative", does not repeat
// s: callers name the option and the value.
func ParseCost(s string) (float64, error) {
	c, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(c, 0) || math.IsNaN(c) {
		return 0, ErrCostNotNumber
	}
	if c < 0 {
		return 0, errors.New("must not be negative")
	}
	return c, nil
}
