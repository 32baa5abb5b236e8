package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// The JSON decoders below decode as Caddy does (unknown fields refused),
// but name the field at fault by its path when a value does not decode:
// encoding/json passes on the error of a field's own UnmarshalJSON, such
// as caddy.Duration's `time: invalid duration "soon"`, without saying
// whose it is.

// UnmarshalJSON decodes a handler, naming a bad zone field by its path
// (zones[1].max_delay).
func (h *Handler) UnmarshalJSON(b []byte) error {
	type plain Handler
	aux := struct {
		*plain
		Zones []json.RawMessage `json:"zones,omitempty"`
	}{plain: (*plain)(h)}
	if err := decodeStrict(b, &aux, ""); err != nil {
		return err
	}
	h.Zones = nil
	for i, raw := range aux.Zones {
		var z *Zone
		if err := decodeStrict(raw, &z, ""); err != nil {
			if _, ok := err.(fieldError); ok {
				return fmt.Errorf("zones[%d].%w", i, err)
			}
			return fmt.Errorf("zones[%d]: %w", i, err)
		}
		h.Zones = append(h.Zones, z)
	}
	return nil
}

// UnmarshalJSON decodes a zone, naming max_delay, penalty or top_window
// when it is not a duration.
func (z *Zone) UnmarshalJSON(b []byte) error {
	type plain Zone
	aux := struct {
		*plain
		MaxDelay  json.RawMessage `json:"max_delay,omitempty"`
		Penalty   json.RawMessage `json:"penalty,omitempty"`
		TopWindow json.RawMessage `json:"top_window,omitempty"`
	}{plain: (*plain)(z)}
	if err := decodeStrict(b, &aux, ""); err != nil {
		return err
	}
	if err := decodeDuration("max_delay", aux.MaxDelay, &z.MaxDelay); err != nil {
		return err
	}
	if err := decodeDuration("penalty", aux.Penalty, &z.Penalty); err != nil {
		return err
	}
	return decodeDuration("top_window", aux.TopWindow, &z.TopWindow)
}

// UnmarshalJSON decodes a Redis store, naming its durations by path when
// they are not durations.
func (c *RedisStoreConfig) UnmarshalJSON(b []byte) error {
	type plain RedisStoreConfig
	aux := struct {
		*plain
		Timeout  json.RawMessage `json:"timeout,omitempty"`
		LeaseTTL json.RawMessage `json:"lease_ttl,omitempty"`
		Breaker  json.RawMessage `json:"breaker,omitempty"`
	}{plain: (*plain)(c)}
	if err := decodeStrict(b, &aux, "store.redis."); err != nil {
		return err
	}
	if err := decodeDuration("store.redis.timeout", aux.Timeout, &c.Timeout); err != nil {
		return err
	}
	if err := decodeDuration("store.redis.lease_ttl", aux.LeaseTTL, &c.LeaseTTL); err != nil {
		return err
	}
	c.Breaker = nil
	if aux.Breaker == nil || string(aux.Breaker) == "null" {
		return nil
	}
	type plainBreaker BreakerConfig
	c.Breaker = new(BreakerConfig)
	baux := struct {
		*plainBreaker
		Backoff json.RawMessage `json:"backoff,omitempty"`
	}{plainBreaker: (*plainBreaker)(c.Breaker)}
	if err := decodeStrict(aux.Breaker, &baux, "store.redis.breaker."); err != nil {
		return err
	}
	return decodeDuration("store.redis.breaker.backoff", baux.Backoff, &c.Breaker.Backoff)
}

// UnmarshalJSON decodes a store selection, naming a bad field by path.
func (c *StoreConfig) UnmarshalJSON(b []byte) error {
	type plain StoreConfig
	return decodeStrict(b, (*plain)(c), "store.")
}

// UnmarshalJSON decodes a memory store, naming a bad field by path.
func (c *MemoryStoreConfig) UnmarshalJSON(b []byte) error {
	type plain MemoryStoreConfig
	return decodeStrict(b, (*plain)(c), "store.memory.")
}

// UnmarshalJSON decodes a Sentinel configuration, naming a bad field by
// path.
func (c *SentinelConfig) UnmarshalJSON(b []byte) error {
	type plain SentinelConfig
	return decodeStrict(b, (*plain)(c), "store.redis.sentinel.")
}

// UnmarshalJSON decodes a TLS configuration, naming a bad field by path.
func (c *RedisTLSConfig) UnmarshalJSON(b []byte) error {
	type plain RedisTLSConfig
	return decodeStrict(b, (*plain)(c), "store.redis.tls.")
}

// decodeStrict decodes b into v, refusing unknown fields and trailing
// data, as caddy.StrictUnmarshalJSON does. A value of the wrong type and an
// unknown field are reported as a fieldError naming it, prefix first.
func decodeStrict(b []byte, v any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the object")
	}
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return fieldError(fmt.Sprintf("%s%s: want %s, got a JSON %s", prefix, jsonPath(te.Field), te.Type, te.Value))
	case strings.HasPrefix(err.Error(), `json: unknown field "`):
		name := strings.TrimSuffix(strings.TrimPrefix(err.Error(), `json: unknown field "`), `"`)
		return fieldError(prefix + name + ": unknown field")
	}
	return err
}

// jsonPath is the path of an UnmarshalTypeError's field without the
// embedded aliases the decoders above decode through.
func jsonPath(field string) string {
	var parts []string
	for _, p := range strings.Split(field, ".") {
		if p != "" && !strings.HasPrefix(p, "plain") {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ".")
}

// fieldError is an error that begins with the name of the field at
// fault.
type fieldError string

func (e fieldError) Error() string { return string(e) }

// decodeDuration decodes raw, when present, into d, naming option in the
// error.
func decodeDuration(option string, raw json.RawMessage, d *caddy.Duration) error {
	if raw == nil {
		return nil
	}
	if err := d.UnmarshalJSON(raw); err != nil {
		return fieldError(fmt.Sprintf("%s %s: want a duration such as \"500ms\" or a number of nanoseconds", option, raw))
	}
	return nil
}
