package traefikplugin

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/model"
)

// options reads the string options of Config. Traefik hands them over as
// labels give them ("10", "true", "1m") or as mapstructure weakly converted
// them from typed YAML or JSON (10 → "10", 2.5 → "2.5", true → "1"). An
// empty option reads as zero (false, no duration). Every error names the
// option, after path ("" or "limits[i]."), and options keeps the first:
// a bad option reads as zero, the options after it are read all the same,
// and err is the error to report, the one a parse stopping at the first
// bad option would have reported.
type options struct {
	path string
	err  error
}

// keep records err, unless it is nil or an error came first.
func (o *options) keep(err error) {
	if o.err == nil {
		o.err = err
	}
}

// field keeps err, an error of core's naming its field, as fieldError
// names it under o.path.
func (o *options) field(err error) {
	o.keep(fieldError(o.path, err))
}

// refuse keeps the error of option's value s: what is wrong with it.
func (o *options) refuse(option, s, problem string) {
	o.keep(fmt.Errorf("%s%s %q: %s", o.path, option, s, problem))
}

// number parses a finite number. Its range is core's to check.
func (o *options) number(option, s string) float64 {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		o.refuse(option, s, "not a number")
		return 0
	}
	return f
}

// integer parses a whole number between lo and hi. A whole number may be
// spelt as a float ("3.0"): mapstructure turns a YAML 3.0 into "3", but a
// JSON number from a Kubernetes CRD may still arrive as "3.0" through other
// paths.
func (o *options) integer(option, s string, lo, hi int) int {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		o.refuse(option, s, fmt.Sprintf("want a whole number between %d and %d", lo, hi))
		return 0
	}
	return int(f)
}

// boolean parses a boolean as strconv.ParseBool does ("true", "1",
// "false", "0", ...).
func (o *options) boolean(option, s string) bool {
	s = strings.TrimSpace(s)
	b, err := strconv.ParseBool(s)
	if err != nil && s != "" {
		o.refuse(option, s, "want true or false")
	}
	return b
}

// maxSeconds is the largest number of seconds a time.Duration holds.
const maxSeconds = float64(math.MaxInt64) / float64(time.Second)

// duration parses a duration as Traefik does: a bare number is seconds
// ("60", also "1.5"), anything else a Go duration ("1m30s"). Negative
// durations are refused.
func (o *options) duration(option, s string) time.Duration {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	var d time.Duration
	problem := ""
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		if d, err = time.ParseDuration(s); err != nil {
			problem = "want a duration such as 500ms, 10s or 1m, or a number of seconds"
		}
	case math.IsNaN(f) || math.Abs(f) >= maxSeconds:
		problem = "out of range"
	default:
		if d = time.Duration(f * float64(time.Second)); f > 0 && d == 0 {
			problem = "shorter than a nanosecond"
		}
	}
	if d < 0 {
		problem = "must not be negative"
	}
	if problem != "" {
		o.refuse(option, s, problem)
		return 0
	}
	return d
}

// cost parses a cost (model.ParseCost); empty yields def.
func (o *options) cost(option, s string, def float64) float64 {
	s = strings.TrimSpace(s)
	if s == "" {
		return def
	}
	c, err := model.ParseCost(s)
	if err != nil {
		o.refuse(option, s, err.Error())
	}
	return c
}

// prefixes parses a list of networks, CIDR prefixes or addresses.
func (o *options) prefixes(option string, list []string) []netip.Prefix {
	p, err := clientip.ParsePrefixes(parseList(list))
	if err != nil {
		o.keep(fmt.Errorf("%s: %w", option, err))
	}
	return p
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

// refuseUnknown keeps, of the options of cfg that the plugin does not
// know, the first in a fixed order.
func (o *options) refuseUnknown(cfg *Config) {
	o.unknown("", cfg.Unknown)
	if sc := cfg.SourceCriterion; sc != nil {
		o.unknown("sourceCriterion.", sc.Unknown)
		if st := sc.IPStrategy; st != nil {
			o.unknown("sourceCriterion.ipStrategy.", st.Unknown)
		}
	}
	for i := range cfg.Limits {
		o.unknown("limits["+strconv.Itoa(i)+"].", cfg.Limits[i].Unknown)
	}
	if cfg.Metrics != nil {
		o.unknown("metrics.", cfg.Metrics.Unknown)
	}
	if r := cfg.Redis; r != nil {
		o.unknown("redis.", r.Unknown)
		if r.Sentinel != nil {
			o.unknown("redis.sentinel.", r.Sentinel.Unknown)
		}
		if r.TLS != nil {
			o.unknown("redis.tls.", r.TLS.Unknown)
		}
	}
}

// unknown keeps the first, in sorted order, of the options of unknown,
// found under path.
func (o *options) unknown(path string, unknown map[string]interface{}) {
	if len(unknown) == 0 {
		return
	}
	names := make([]string, 0, len(unknown))
	for k := range unknown {
		names = append(names, k)
	}
	sort.Strings(names)
	o.keep(fmt.Errorf("%s%s: unknown option (see the options in sluice's docs/traefik.md; names match in any letter case)", path, names[0]))
}
