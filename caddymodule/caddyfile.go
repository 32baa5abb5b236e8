package caddymodule

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/inspect"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/telemetry"
)

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens; see the
// package documentation for the syntax. Every error names the file and
// line. Values are checked here as far as they can be without building
// anything, so that a typo fails at adapt time.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	lines := make(map[string]int) // of the subdirectives, for errors found at the end
	var zoneLines []int           // of each zone's name
	for d.NextBlock(0) {
		sub := d.Val()
		if _, dup := lines[sub]; dup && sub != "zone" {
			return d.Errf("duplicate subdirective %q", sub)
		}
		lines[sub] = d.Line()
		var err error
		switch sub {
		case "zone":
			zoneLines = append(zoneLines, d.Line())
			err = h.parseZone(d)
		case "store":
			err = h.parseStore(d)
		case "on_store_error":
			h.OnStoreError, err = oneArg(d, sub, checked(core.ParseStoreErrorPolicy))
		case "fallback":
			if h.Fallback, err = oneArg(d, sub, nil); err == nil && h.Fallback != fallbackLocal {
				err = d.Errf("fallback %q: unknown (want local)", h.Fallback)
			}
		case "instances":
			h.Instances, err = intArg(d, sub, 1, 1<<20)
		case "headers":
			h.Headers = d.RemainingArgs()
			if len(h.Headers) == 0 {
				return d.Err("headers: want at least one of ietf, legacy, x or off")
			}
			if _, err := answer.ParseHeaderSet(h.Headers); err != nil {
				return d.Err(err.Error())
			}
		case "body":
			h.Body, err = oneArg(d, sub, func(s string) error {
				_, _, err := parseBody(s)
				return err
			})
		case "mode":
			h.Mode, err = oneArg(d, sub, checked(core.ParseMode))
		case "retry_jitter":
			h.RetryJitter, err = numberArg(d, sub)
		case "share":
			h.Share, err = oneArg(d, sub, nil)
		case "id":
			h.ID, err = oneArg(d, sub, nil)
		case "log_key":
			h.LogKey, err = true, noArg(d, sub)
		default:
			return d.Errf("unrecognized sluice subdirective %q", sub)
		}
		if err != nil {
			return err
		}
	}
	if len(h.Zones) == 0 {
		return d.Err("sluice: at least one zone is required")
	}
	if err := h.checkNames(); err != nil {
		le := err.(*model.LimitError)
		return fmt.Errorf("zone %q: %w, at %s:%d", le.Limit, caddyError(err), d.File(), zoneLines[le.Index])
	}
	onRedis := h.Store != nil && h.Store.Redis != nil
	for _, z := range h.Zones {
		if err := h.checkScope(z); err != nil {
			return fmt.Errorf("zone %q: %w, at %s:%d", z.Name, err, d.File(), z.scopeLine)
		}
		if err := model.CheckLeases([]*model.Limit{z.limit}, !onRedis); err != nil {
			return fmt.Errorf("zone %q: %w, at %s:%d", z.Name, caddyError(err), d.File(), z.leaseLine)
		}
	}
	if err := h.Validate(); err != nil {
		if line, ok := lines[optionOf(err)]; ok {
			return fmt.Errorf("%w, at %s:%d", err, d.File(), line)
		}
		return d.Err(err.Error())
	}
	return nil
}

// noArg checks that the flag subdirective name has no argument.
func noArg(d *caddyfile.Dispenser, name string) error {
	if d.NextArg() {
		return d.Errf("%s: takes no argument, got %q", name, d.Val())
	}
	return nil
}

// parseZone reads "zone <name> { ... }".
func (h *Handler) parseZone(d *caddyfile.Dispenser) error {
	var z Zone
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("zone: want one name before the block, got %d arguments", len(args))
	}
	z.Name = args[0]
	// lines are the lines of the zone's name and subdirectives, so that
	// an error found in the zone as a whole points at the one at fault.
	lines := map[string]int{"name": d.Line()}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if _, dup := lines[sub]; dup && sub != "name" {
			return d.Errf("zone %q: duplicate subdirective %q", z.Name, sub)
		}
		lines[sub] = d.Line()
		var err error
		switch sub {
		case "key":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Err("key: want a template, such as {client_ip} or {http.request.header.X-API-Key}")
			}
			z.Key = strings.Join(args, " ")
		case "rate":
			z.Rate, err = oneArg(d, sub, checked(model.ParseRate))
		case "max_in_flight":
			z.MaxInFlight, err = intArg(d, sub, 1, 1<<30)
		case "burst":
			if z.Burst, err = numberArg(d, sub); err == nil {
				if berr := model.CheckBurst(z.Burst); berr != nil {
					err = d.Err(caddyError(berr).Error()) // in JSON, 0 is burst left out
				}
			}
		case "algorithm":
			z.Algorithm, err = oneArg(d, sub, nil)
		case "cost":
			var c string
			if c, err = oneArg(d, sub, nil); err == nil {
				z.Cost = caddyhttp.WeakString(c)
				if !strings.ContainsAny(c, "{}") {
					if _, perr := parseCost(c); perr != nil {
						err = d.Errf("cost %q: %v", c, perr)
					}
				}
			}
		case "lease":
			z.Lease, err = numberArg(d, sub)
		case "max_delay":
			var dur time.Duration
			dur, err = durationArg(d, sub)
			z.MaxDelay = caddy.Duration(dur)
		case "count_status":
			if z.CountStatus = d.RemainingArgs(); len(z.CountStatus) == 0 {
				err = d.ArgErr()
			}
		case "cost_header":
			z.CostHeader, err = oneArg(d, sub, nil)
		case "cost_bytes":
			z.CostBytes, err = true, noArg(d, sub)
		case "response_cost":
			z.ResponseCost, err = oneArg(d, sub, nil)
		case "penalty":
			var dur time.Duration
			dur, err = durationArg(d, sub)
			z.Penalty = caddy.Duration(dur)
		case "match":
			set, merr := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
			if merr != nil {
				return fmt.Errorf("zone %q: match: %w", z.Name, merr) // merr has the file and line
			}
			z.MatchRaw = set
		case "ipv4_prefix":
			z.IPv4Prefix, err = intArg(d, sub, 0, 32)
		case "ipv6_prefix":
			z.IPv6Prefix, err = intArg(d, sub, 0, 128)
		case "on_missing_key":
			z.OnMissingKey, err = oneArg(d, sub, checked(keyspec.ParseMissingKey))
		case "near_limit":
			z.NearLimit, err = nearLimitArg(d, sub)
		case "top_keys":
			z.TopKeys, err = intArg(d, sub, inspect.MinSketchCounters, inspect.MaxSketchCounters)
		case "top_window":
			var dur time.Duration
			if dur, err = durationArg(d, sub); err == nil && (dur < inspect.MinSketchWindow || dur > inspect.MaxSketchWindow) {
				err = d.Errf("top_window %q: want a duration from %v to %v", d.Val(), inspect.MinSketchWindow, inspect.MaxSketchWindow)
			}
			z.TopWindow = caddy.Duration(dur)
		case "demand_keys":
			z.DemandKeys, err = demandKeysArg(d, sub)
		case "demand_scope":
			z.DemandScope, err = oneArg(d, sub, nil) // checked with the store, after the block
		default:
			return d.Errf("zone %q: unrecognized subdirective %q", z.Name, sub)
		}
		if err != nil {
			return err
		}
	}
	if err := z.check(); err != nil {
		if line, ok := lines[optionOf(err)]; ok {
			return fmt.Errorf("zone %q: %w, at %s:%d", z.Name, err, d.File(), line)
		}
		return d.Errf("zone %q: %v", z.Name, err)
	}
	z.scopeLine, z.leaseLine = lines["demand_scope"], lines["lease"]
	h.Zones = append(h.Zones, &z)
	return nil
}

// checkNames checks the zones' limits, which check built, together: no
// two may have one name. Its error is a *model.LimitError whose Index is
// the zone's.
func (h *Handler) checkNames() error {
	limits := make([]*model.Limit, len(h.Zones))
	for i, z := range h.Zones {
		limits[i] = z.limit
	}
	return model.CheckLimits(limits)
}

// check validates a zone parsed from a Caddyfile as far as possible
// without provisioning it: its limit, which it keeps, and its key.
func (z *Zone) check() error {
	l, err := z.coreLimit()
	if err != nil {
		return err
	}
	z.limit = l
	if err := z.provisionCost(); err != nil {
		return err
	}
	return z.validate()
}

// parseStore reads "store memory [{ ... }]" or "store redis { ... }".
func (h *Handler) parseStore(d *caddyfile.Dispenser) error {
	if !d.NextArg() {
		return d.Err("store: want memory or redis")
	}
	kind := d.Val()
	if d.NextArg() {
		return d.Errf("store %s: unexpected argument %q (options go in a block)", kind, d.Val())
	}
	h.Store = new(StoreConfig)
	switch kind {
	case "memory":
		h.Store.Memory = new(MemoryStoreConfig)
		for nesting := d.Nesting(); d.NextBlock(nesting); {
			switch d.Val() {
			case "max_keys":
				if h.Store.Memory.MaxKeys != 0 {
					return d.Errf("store memory: duplicate subdirective %q", d.Val())
				}
				n, err := intArg(d, "max_keys", 1, 1<<30)
				if err != nil {
					return err
				}
				h.Store.Memory.MaxKeys = n
			default:
				return d.Errf("store memory: unrecognized subdirective %q", d.Val())
			}
		}
		return nil
	case "redis":
		r, err := parseRedis(d)
		if err != nil {
			return err
		}
		h.Store.Redis = r
		return nil
	}
	return d.Errf("store %q: unknown (want memory or redis)", kind)
}

// parseRedis reads the block of "store redis".
func parseRedis(d *caddyfile.Dispenser) (*RedisStoreConfig, error) {
	r := new(RedisStoreConfig)
	lines := make(map[string]int) // of the subdirectives, for errors found at the end
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if _, dup := lines[sub]; dup {
			return nil, d.Errf("store redis: duplicate subdirective %q", sub)
		}
		lines[sub] = d.Line()
		var err error
		switch sub {
		case "address":
			if r.Address, err = oneArg(d, sub, nil); err == nil {
				err = addrErr(d, r)
			}
		case "addresses":
			if r.Addresses = d.RemainingArgs(); len(r.Addresses) == 0 {
				return nil, d.Err("addresses: want the host:port of at least one Cluster node")
			}
			err = addrErr(d, r)
		case "sentinel":
			args := d.RemainingArgs()
			if len(args) < 2 {
				return nil, d.Err("sentinel: want the master's name and at least one Sentinel's host:port")
			}
			r.Sentinel = &SentinelConfig{Master: args[0], Addresses: args[1:]}
			err = addrErr(d, r)
		case "username":
			r.Username, err = oneArg(d, sub, nil)
		case "password":
			r.Password, err = oneArg(d, sub, nil)
		case "db":
			r.DB, err = intArg(d, sub, 0, 1<<20)
		case "tls":
			r.TLS, err = parseRedisTLS(d)
		case "timeout":
			var dur time.Duration
			dur, err = durationArg(d, sub)
			r.Timeout = caddy.Duration(dur)
		case "pool_size":
			r.PoolSize, err = intArg(d, sub, 1, 1<<20)
		case "readable_keys":
			r.ReadableKeys, err = true, noArg(d, sub)
		case "lease_ttl":
			var dur time.Duration
			if dur, err = durationArg(d, sub); err == nil && dur == 0 {
				err = d.Errf("lease_ttl %q: want a positive duration such as 35s", d.Val())
			}
			r.LeaseTTL = caddy.Duration(dur)
		case "prefix":
			r.Prefix, err = oneArg(d, sub, checkedErr(redisstore.CheckPrefix))
		case "breaker":
			var failures, backoff string
			if !d.AllArgs(&failures, &backoff) {
				return nil, d.Errf("breaker: want two arguments, <failures> <backoff>, such as breaker 5 1s")
			}
			b := new(BreakerConfig)
			n, perr := strconv.Atoi(failures)
			if perr != nil || n < 1 {
				return nil, d.Errf("breaker: failures %q: want a positive integer", failures)
			}
			dur, perr := caddy.ParseDuration(backoff)
			if perr != nil || dur <= 0 {
				return nil, d.Errf("breaker: backoff %q: want a positive duration", backoff)
			}
			b.Failures, b.Backoff = n, caddy.Duration(dur)
			r.Breaker = b
		default:
			return nil, d.Errf("store redis: unrecognized subdirective %q", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := r.validate(); err != nil {
		if line, ok := lines[optionOf(err)]; ok {
			return nil, fmt.Errorf("%w, at %s:%d", err, d.File(), line)
		}
		return nil, d.Err(err.Error())
	}
	return r, nil
}

// addrErr checks the addresses of r read so far, at the current line.
func addrErr(d *caddyfile.Dispenser, r *RedisStoreConfig) error {
	if err := r.checkAddresses(false); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// parseRedisTLS reads "tls [{ ... }]".
func parseRedisTLS(d *caddyfile.Dispenser) (*RedisTLSConfig, error) {
	if d.NextArg() {
		return nil, d.Errf("tls: unexpected argument %q (options go in a block)", d.Val())
	}
	t := new(RedisTLSConfig)
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return nil, d.Errf("tls: duplicate subdirective %q", sub)
		}
		seen[sub] = true
		var err error
		switch sub {
		case "ca":
			t.CA, err = oneArg(d, sub, nil)
		case "cert":
			t.Cert, err = oneArg(d, sub, nil)
		case "key":
			t.Key, err = oneArg(d, sub, nil)
		case "server_name":
			t.ServerName, err = oneArg(d, sub, nil)
		case "insecure_skip_verify":
			t.InsecureSkipVerify, err = true, noArg(d, sub)
		default:
			return nil, d.Errf("tls: unrecognized subdirective %q", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	return t, nil
}

// oneArg reads exactly one argument of the subdirective name and, when
// check is not nil, checks it, turning check's error into one with the file
// and line that names the subdirective.
func oneArg(d *caddyfile.Dispenser, name string, check func(string) error) (string, error) {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return "", d.Errf("%s: want one argument, got %d", name, len(args))
	}
	v := args[0]
	if check != nil {
		if err := check(v); err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, name) {
				msg = name + ": " + msg
			}
			return "", d.Err(msg)
		}
	}
	return v, nil
}

// checkedErr adapts a core check to oneArg's check, naming the
// subdirective as core names its field.
func checkedErr(check func(string) error) func(string) error {
	return func(s string) error { return caddyError(check(s)) }
}

// checked adapts a core parser to oneArg's check.
func checked[T any](parse func(string) (T, error)) func(string) error {
	return func(s string) error {
		_, err := parse(s)
		return err
	}
}

// intArg reads one integer argument of the subdirective name, in [lo, hi].
func intArg(d *caddyfile.Dispenser, name string, lo, hi int) (int, error) {
	s, err := oneArg(d, name, nil)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, d.Errf("%s %q: want an integer from %d to %d", name, s, lo, hi)
	}
	return n, nil
}

// demandKeysArg reads demand_keys's argument: off (-1) or a number of
// keys.
func demandKeysArg(d *caddyfile.Dispenser, name string) (int, error) {
	s, err := oneArg(d, name, nil)
	if err != nil {
		return 0, err
	}
	if s == "off" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > demand.MaxKeys {
		return 0, d.Errf("%s %q: want off or an integer from 1 to %d", name, s, demand.MaxKeys)
	}
	return n, nil
}

// numberArg reads one number argument of the subdirective name; its range
// is core's to check.
func numberArg(d *caddyfile.Dispenser, name string) (float64, error) {
	s, err := oneArg(d, name, nil)
	if err != nil {
		return 0, err
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, d.Errf("%s %q: want a number", name, s)
	}
	return x, nil
}

// durationArg reads one non-negative duration argument of the
// subdirective name.
func durationArg(d *caddyfile.Dispenser, name string) (time.Duration, error) {
	s, err := oneArg(d, name, nil)
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil || dur < 0 {
		return 0, d.Errf("%s %q: want a non-negative duration such as 500ms", name, s)
	}
	return dur, nil
}

// nearLimitArg reads near_limit's argument, as telemetry.ParseNearLimit
// does.
func nearLimitArg(d *caddyfile.Dispenser, name string) (float64, error) {
	s, err := oneArg(d, name, nil)
	if err != nil {
		return 0, err
	}
	x, err := telemetry.ParseNearLimit(s)
	if err != nil {
		return 0, d.Err(caddyError(err).Error())
	}
	return x, nil
}
