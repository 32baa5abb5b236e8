// Package trivial is a Traefik plugin that sets one response header: the
// least a Yaegi plugin costs, measured beside sluice by bench/yaegi,
// bench/traefik/run.sh and bench/rss.sh.
package trivial

import (
	"context"
	"net/http"
)

// Config is the plugin's (empty) configuration.
type Config struct{}

// CreateConfig returns the default configuration.
func CreateConfig() *Config { return &Config{} }

type handler struct{ next http.Handler }

// New returns the plugin's handler in front of next.
func New(ctx context.Context, next http.Handler, config *Config, name string) (http.Handler, error) {
	return &handler{next: next}, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Trivial", "1")
	h.next.ServeHTTP(w, r)
}
