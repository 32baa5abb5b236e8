package caddymodule

import (
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
)

// StoreConfig selects where a handler's counters live: set Memory or
// Redis, not both. Neither means in memory with default settings.
type StoreConfig struct {
	// Memory keeps the counters in this Caddy process.
	Memory *MemoryStoreConfig `json:"memory,omitempty"`
	// Redis keeps the counters in Redis, shared by every Caddy instance
	// using the same server and key prefix.
	Redis *RedisStoreConfig `json:"redis,omitempty"`
}

// MemoryStoreConfig configures an in-process store. Its memory grows with
// the counters held, about 50 to 100 bytes each, up to MaxKeys.
type MemoryStoreConfig struct {
	// MaxKeys is the most (zone, key) counters kept; below it no live
	// counter is forgotten, and at it a new key replaces an expired counter
	// or else the one closest to expiring among 16 sampled. Default
	// 1000000.
	MaxKeys int `json:"max_keys,omitempty"`
}

// validate checks c without building anything.
func (c *StoreConfig) validate() error {
	if c.Memory != nil && c.Redis != nil {
		return optionErrorf("store", "store: set memory or redis, not both")
	}
	if c.Memory != nil && c.Memory.MaxKeys < 0 {
		return optionErrorf("store", "store.memory.max_keys: must not be negative")
	}
	if c.Redis != nil {
		if err := c.Redis.validate(); err != nil {
			return &optionError{option: "store", err: err}
		}
	}
	return nil
}

// stores holds every store in use, keyed by its identity (see poolKey), so
// that handlers configured alike share one store and a config reload keeps
// the counters: the new config acquires the store before the old one
// releases it.
var stores = caddy.NewUsagePool()

// pooledStore is a store in the pool.
type pooledStore struct {
	store   model.Store
	timeout time.Duration // bound of each call; zero for memory
	breaker *core.Breaker // nil for memory
	label   string        // the store's metric label: no credentials
	close   func() error  // releases the client; nil for memory
	key     string        // its pool key: the store's whole configuration
}

// Destruct closes the store's client, when it has one. The pool calls it
// when the last handler using the store is cleaned up.
func (p *pooledStore) Destruct() error {
	if p.close == nil {
		return nil
	}
	return p.close()
}

// fallbackLocal is the value of Handler.Fallback that enables the local
// fallback store.
const fallbackLocal = "local"

// fallbackPoolKey is the pool key of the local fallback store, shared by
// every handler with fallback local.
const fallbackPoolKey = "fallback:memory"

// acquireStore returns the handler's primary store from the pool,
// building it on first use.
func (h *Handler) acquireStore(ctx caddy.Context) (*pooledStore, error) {
	if h.Store != nil && h.Store.Redis != nil {
		cfg, err := h.Store.Redis.resolve()
		if err != nil {
			return nil, err
		}
		return h.acquire(cfg.poolKey(), func() (caddy.Destructor, error) {
			return newRedisStore(cfg, directDecisions)
		})
	}
	maxKeys := core.DefaultMaxKeys
	if h.Store != nil && h.Store.Memory != nil && h.Store.Memory.MaxKeys > 0 {
		maxKeys = h.Store.Memory.MaxKeys
	}
	key := "memory:" + strconv.Itoa(maxKeys)
	if testClock != nil {
		key += ":test-clock"
	}
	return h.acquire(key, func() (caddy.Destructor, error) {
		st, err := core.NewMemoryStore(core.MemoryConfig{MaxKeys: maxKeys, Clock: testClock})
		if err != nil {
			return nil, err
		}
		return &pooledStore{store: st, label: "memory"}, nil
	})
}

// testClock, when set, is the clock of the gates and in-memory stores that
// handlers provision, instead of the system's, for tests that replay a
// trace on a fake clock (behaviour_test.go). Such stores are pooled apart
// from the others. Nil outside tests.
var testClock model.Clock

// clockNow is the instant, in nanoseconds since the epoch: testClock's
// when it is set, else the system's.
func clockNow() int64 {
	if testClock != nil {
		return testClock()
	}
	return time.Now().UnixNano()
}

// newFallbackStore builds the local fallback store.
func newFallbackStore() (caddy.Destructor, error) {
	st, err := core.NewMemoryStore(core.MemoryConfig{})
	if err != nil {
		return nil, err
	}
	return &pooledStore{store: st, label: "fallback"}, nil
}

// acquire takes a reference to the pooled store at key, building it with
// build when absent, and records it for Cleanup.
func (h *Handler) acquire(key string, build caddy.Constructor) (*pooledStore, error) {
	v, _, err := stores.LoadOrNew(key, func() (caddy.Destructor, error) {
		d, err := build()
		if err != nil {
			return nil, err
		}
		if ps, ok := d.(*pooledStore); ok {
			ps.key = key
		}
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	h.stores = append(h.stores, key)
	return v.(*pooledStore), nil
}
