package examples

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	// The handlers the documentation's Caddyfiles use besides sluice.
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/caddyauth"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/headers"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	_ "github.com/caddyserver/caddy/v2/modules/metrics"
	_ "github.com/sluicehq/sluice/caddymodule"
)

// caddyConfig is one Caddyfile to check: a file, or a block of a Markdown
// file.
type caddyConfig struct {
	where, text string
}

// caddyConfigs returns the repository's Caddyfiles that users read: the
// recipes, Caddyfile.example, and every caddyfile block of the Markdown
// files, unless a <!-- doctest: skip ... --> precedes it.
func caddyConfigs(t *testing.T) []caddyConfig {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "examples/caddy/*.Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "Caddyfile.example"))
	var out []caddyConfig
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, caddyConfig{f, string(data)})
	}
	for _, b := range allBlocks(t, "caddyfile") {
		if b.skip == "" {
			out = append(out, caddyConfig{b.where(), b.text})
		}
	}
	return out
}

// TestCaddyfiles: each Caddyfile is as `caddy fmt` writes it (else Caddy
// warns on every start), adapts, and provisions: Caddy builds every module
// of it, sluice's zones and stores included, as `caddy run` would before
// serving. A block that starts with a directive (a `sluice { ... }` of a
// reference page) is checked inside a site.
func TestCaddyfiles(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "docs")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	adapter := caddyconfig.GetAdapter("caddyfile")
	configs := caddyConfigs(t)
	if len(configs) < 7 {
		t.Fatalf("only %d Caddyfiles found", len(configs))
	}
	for _, c := range configs {
		t.Run(c.where, func(t *testing.T) {
			if got := string(caddyfile.Format([]byte(c.text))); got != c.text {
				t.Errorf("not as caddy fmt writes it:\n--- have\n%s--- caddy fmt\n%s", c.text, got)
			}
			text := c.text
			if first := firstLine(text); strings.HasPrefix(first, "sluice") || strings.HasPrefix(first, "route") {
				text = "http://:8080 {\n\t" + strings.ReplaceAll(strings.TrimSuffix(text, "\n"), "\n", "\n\t") + "\n}\n"
			}
			out, warnings, err := adapter.Adapt([]byte(text), map[string]any{"filename": c.where})
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			for _, w := range warnings {
				t.Errorf("adapt warning: %s", w.String())
			}
			var cfg caddy.Config
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			// Validate provisions without serving; the admin endpoint
			// stays closed, and only errors are logged.
			cfg.Admin = &caddy.AdminConfig{Disabled: true}
			if err := json.Unmarshal([]byte(`{"logs":{"default":{"level":"ERROR"}}}`), &cfg.Logging); err != nil {
				t.Fatal(err)
			}
			if err := caddy.Validate(&cfg); err != nil {
				t.Fatalf("provision: %v\n%s", err, out)
			}
		})
	}
}

// firstLine is the first line of text that is neither blank nor a comment.
func firstLine(text string) string {
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}
