package traefikplugin

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The option parsers below read the string fields of Config. Traefik hands
// them over as labels give them ("10", "true", "1m") or as mapstructure
// weakly converted them from typed YAML or JSON (10 → "10", 2.5 → "2.5",
// true → "1"). Every error names the option.

// parseNumber parses a finite number; empty yields def. Its range is
// core's to check.
func parseNumber(option, s string, def float64) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s %q: not a number", option, s)
	}
	return f, nil
}

// parseInt parses a whole number between lo and hi; empty yields def.
func parseInt(option, s string, def, lo, hi int) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		// mapstructure turns a YAML 3.0 into "3"; a JSON number from a
		// Kubernetes CRD may still arrive as "3.0" through other paths.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
			return 0, fmt.Errorf("%s %q: want a whole number between %d and %d", option, s, lo, hi)
		}
		n = int(f)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%s %q: want a whole number between %d and %d", option, s, lo, hi)
	}
	return n, nil
}

// parseBool parses a boolean as strconv.ParseBool does ("true", "1",
// "false", "0", ...); empty is false.
func parseBool(option, s string) (bool, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s %q: want true or false", option, s)
	}
	return b, nil
}

// maxSeconds is the largest number of seconds a time.Duration holds.
const maxSeconds = float64(math.MaxInt64) / float64(time.Second)

// parseDuration parses a duration as Traefik does: a bare number is
// seconds ("60", also "1.5"), anything else a Go duration ("1m30s").
// Empty yields 0; negative durations are refused.
func parseDuration(option, s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.Abs(f) >= maxSeconds {
			return 0, fmt.Errorf("%s %q: out of range", option, s)
		}
		d = time.Duration(f * float64(time.Second))
		if f > 0 && d == 0 {
			return 0, fmt.Errorf("%s %q: shorter than a nanosecond", option, s)
		}
	} else {
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%s %q: want a duration such as 500ms, 10s or 1m, or a number of seconds", option, s)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("%s %q: must not be negative", option, s)
	}
	return d, nil
}

// parseList trims the entries of a list option and drops empty ones, so
// that "a, b" and "a,b," read as [a b]. It splits entries on commas as
// well: Traefik's decoder splits a string into a list only when the whole
// option is one string.
func parseList(list []string) []string {
	var out []string
	for _, item := range list {
		for _, s := range strings.Split(item, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// errNoLimit marks a limit whose average is zero: Traefik's "no limit".
var errNoLimit = errors.New("no limit")

// defaultLimitName is the name of the top-level limit when Config.Name is
// empty.
const defaultLimitName = "default"

// defaultPeriod is Traefik's default rateLimit period.
const defaultPeriod = time.Second

// refuseUnknown names the first option of cfg, in a fixed order, that the
// plugin does not know.
func refuseUnknown(cfg *Config) error {
	if err := unknownOption("", cfg.Unknown); err != nil {
		return err
	}
	if sc := cfg.SourceCriterion; sc != nil {
		if err := unknownOption("sourceCriterion.", sc.Unknown); err != nil {
			return err
		}
		if st := sc.IPStrategy; st != nil {
			if err := unknownOption("sourceCriterion.ipStrategy.", st.Unknown); err != nil {
				return err
			}
		}
	}
	for i := range cfg.Limits {
		if err := unknownOption("limits["+strconv.Itoa(i)+"].", cfg.Limits[i].Unknown); err != nil {
			return err
		}
	}
	if cfg.Metrics != nil {
		if err := unknownOption("metrics.", cfg.Metrics.Unknown); err != nil {
			return err
		}
	}
	r := cfg.Redis
	if r == nil {
		return nil
	}
	if err := unknownOption("redis.", r.Unknown); err != nil {
		return err
	}
	if r.Sentinel != nil {
		if err := unknownOption("redis.sentinel.", r.Sentinel.Unknown); err != nil {
			return err
		}
	}
	if r.TLS != nil {
		return unknownOption("redis.tls.", r.TLS.Unknown)
	}
	return nil
}

// unknownOption reports the first, in sorted order, of the options of
// unknown, found under path.
func unknownOption(path string, unknown map[string]interface{}) error {
	if len(unknown) == 0 {
		return nil
	}
	names := make([]string, 0, len(unknown))
	for k := range unknown {
		names = append(names, k)
	}
	sort.Strings(names)
	return fmt.Errorf("%s%s: unknown option (see the options in sluice's docs/traefik.md; names match in any letter case)", path, names[0])
}
