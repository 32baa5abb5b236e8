package examples

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mitchellh/mapstructure"
	"github.com/sluicehq/sluice/traefikplugin"
	"go.yaml.in/yaml/v3"
)

// middleware is one sluice middleware of a Traefik configuration: its name
// as Traefik gives it (api@file, api@docker, default-api@kubernetescrd)
// and its options, as the provider hands them to the plugin.
type middleware struct {
	name    string
	options map[string]any
}

// traefikMiddlewares returns the sluice middlewares of one Traefik
// configuration, YAML of any of the forms the documentation shows: a
// dynamic configuration of the file provider (http.middlewares), a Docker
// Compose file or a list of labels, or Kubernetes Middleware resources.
// A static configuration yields none, checked for the plugin's module
// name. found is false for YAML that is none of these (a Prometheus
// configuration).
func traefikMiddlewares(text string) (mws []middleware, found bool, err error) {
	dec := yaml.NewDecoder(strings.NewReader(text))
	for {
		var v any
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, false, err
		}
		doc, ok := v.(map[string]any)
		if !ok {
			continue // a fragment of some other YAML, such as a list
		}
		switch {
		case doc["http"] != nil:
			found = true
			ms, _ := dig(doc, "http", "middlewares").(map[string]any)
			for name, m := range ms {
				if opts, ok := dig(m, "plugin", "sluice").(map[string]any); ok {
					mws = append(mws, middleware{name + "@file", opts})
				}
			}
		case doc["kind"] == "Middleware":
			found = true
			opts, ok := dig(doc, "spec", "plugin", "sluice").(map[string]any)
			if !ok {
				return nil, true, errors.New("a Middleware without spec.plugin.sluice")
			}
			ns, _ := dig(doc, "metadata", "namespace").(string)
			if ns == "" {
				ns = "default"
			}
			name, _ := dig(doc, "metadata", "name").(string)
			mws = append(mws, middleware{ns + "-" + name + "@kubernetescrd", opts})
		case doc["services"] != nil || doc["labels"] != nil:
			found = true
			var labels []string
			collect := func(v any) {
				l, _ := v.([]any)
				for _, s := range l {
					labels = append(labels, fmt.Sprint(s))
				}
			}
			collect(doc["labels"])
			services, _ := doc["services"].(map[string]any)
			for _, s := range services {
				collect(dig(s, "labels"))
			}
			ms, err := fromLabels(labels)
			if err != nil {
				return nil, true, err
			}
			mws = append(mws, ms...)
		case doc["experimental"] != nil:
			found = true
			module := dig(doc, "experimental", "plugins", "sluice", "moduleName")
			if module == nil {
				module = dig(doc, "experimental", "localPlugins", "sluice", "moduleName")
			}
			if module != "github.com/sluicehq/sluice" {
				return nil, true, fmt.Errorf("static configuration: experimental.(local)plugins.sluice.moduleName is %v, want github.com/sluicehq/sluice", module)
			}
		}
	}
	return mws, found, nil
}

// dig follows keys through nested maps; nil when one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

var labelRe = regexp.MustCompile(`^traefik\.http\.middlewares\.([^.]+)\.plugin\.sluice\.(.+)$`)

// fromLabels builds the options of each sluice middleware that labels
// configure, as Traefik's Docker provider does: every value a string,
// "name[i]" an element of a list.
func fromLabels(labels []string) ([]middleware, error) {
	byName := map[string]map[string]any{}
	var names []string
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: no =", l)
		}
		m := labelRe.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		if byName[m[1]] == nil {
			byName[m[1]] = map[string]any{}
			names = append(names, m[1])
		}
		if err := setPath(byName[m[1]], strings.Split(m[2], "."), v); err != nil {
			return nil, fmt.Errorf("label %s: %w", k, err)
		}
	}
	var out []middleware
	for _, n := range names {
		out = append(out, middleware{n + "@docker", listify(byName[n]).(map[string]any)})
	}
	return out, nil
}

var indexRe = regexp.MustCompile(`^(\w+)\[(\d+)\]$`)

// setPath sets the option at path in m to v; "limits[0]" makes the map
// "limits" with the key "[0]", which listify turns into a list.
func setPath(m map[string]any, path []string, v string) error {
	for i, p := range path {
		keys := []string{p}
		if im := indexRe.FindStringSubmatch(p); im != nil {
			keys = []string{im[1], "[" + im[2] + "]"}
		}
		for j, k := range keys {
			if i == len(path)-1 && j == len(keys)-1 {
				m[k] = v
				return nil
			}
			next, ok := m[k].(map[string]any)
			if !ok {
				if m[k] != nil {
					return fmt.Errorf("%s is a value and an option block", k)
				}
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
	}
	return nil
}

// listify turns every map whose keys are all "[i]" into a list.
func listify(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	list := make([]any, len(m))
	isList := len(m) > 0
	for k, e := range m {
		m[k] = listify(e)
		if !strings.HasPrefix(k, "[") {
			isList = false
			continue
		}
		i, err := strconv.Atoi(strings.Trim(k, "[]"))
		if err != nil || i >= len(m) {
			isList = false
			continue
		}
		list[i] = m[k]
	}
	if isList {
		return list
	}
	return m
}

// newMiddleware decodes options as Traefik decodes a plugin's
// configuration (mapstructure, weakly typed, lists from comma-separated
// strings) and builds the middleware with the plugin's New. A metrics
// address is moved to a free loopback port, so that the test neither
// opens a port to the network nor fails on a taken one; Redis and
// Sentinel endpoints to a loopback port where nothing listens, so that
// New's one try to connect neither resolves the examples' host names nor
// leaves the machine.
func newMiddleware(mw middleware) error {
	cfg := traefikplugin.CreateConfig()
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.StringToSliceHookFunc(","),
		WeaklyTypedInput: true,
		Result:           cfg,
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(mw.options); err != nil {
		return err
	}
	if cfg.Metrics != nil && cfg.Metrics.Address != "" {
		cfg.Metrics.Address = "127.0.0.1:0"
	}
	if r := cfg.Redis; r != nil {
		loopback(r.Endpoints)
		if r.Sentinel != nil {
			loopback(r.Sentinel.Endpoints)
		}
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	_, err = traefikplugin.New(context.Background(), next, cfg, mw.name)
	return err
}

// loopback replaces every address of endpoints by 127.0.0.1:1, a port
// where nothing listens.
func loopback(endpoints []string) {
	for i := range endpoints {
		endpoints[i] = "127.0.0.1:1"
	}
}

// pluginRe finds the plugin's options in YAML or labels.
var pluginRe = regexp.MustCompile(`plugin:\s*\{?\s*sluice:|plugin\.sluice\.`)

// TestTraefikConfigs: every sluice middleware of the Traefik recipes, of
// the local-plugin example and of every yaml block of the Markdown files
// (unless a <!-- doctest: skip ... --> precedes it) is loaded by the
// plugin's New, as Traefik would load it; static configurations name the
// plugin's module.
func TestTraefikConfigs(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "docs")
	type config struct{ where, text string }
	var configs []config
	files, err := filepath.Glob(filepath.Join(root, "examples/traefik*/*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		configs = append(configs, config{f, string(data)})
	}
	for _, b := range allBlocks(t, "yaml", "yml") {
		if b.skip == "" {
			configs = append(configs, config{b.where(), b.text})
		}
	}
	loaded := 0
	for _, c := range configs {
		mws, found, err := traefikMiddlewares(c.text)
		if err != nil {
			t.Errorf("%s: %v", c.where, err)
			continue
		}
		if !found && pluginRe.MatchString(c.text) {
			t.Errorf("%s: configures the plugin but is no Traefik configuration the test knows", c.where)
		}
		for _, mw := range mws {
			loaded++
			if err := newMiddleware(mw); err != nil {
				t.Errorf("%s: middleware %s: %v", c.where, mw.name, err)
			}
		}
	}
	if loaded < 12 {
		t.Errorf("only %d middlewares loaded", loaded)
	}
	t.Logf("%d middlewares of %d configurations loaded", loaded, len(configs))
}

// TestLabels: the labels decoder builds lists from indexed labels.
func TestLabels(t *testing.T) {
	mws, err := fromLabels([]string{
		"traefik.http.routers.api.middlewares=api",
		"traefik.http.middlewares.api.plugin.sluice.limits[1].name=b",
		"traefik.http.middlewares.api.plugin.sluice.limits[0].name=a",
		"traefik.http.middlewares.api.plugin.sluice.limits[0].key=header:X-API-Key",
		"traefik.http.middlewares.api.plugin.sluice.redis.endpoints=r:6379",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(mws)
	want := "[{api@docker map[limits:[map[key:header:X-API-Key name:a] map[name:b]] redis:map[endpoints:r:6379]]}]"
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
