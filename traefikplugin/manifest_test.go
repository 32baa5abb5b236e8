package traefikplugin

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestManifest checks the repository's .traefik.yml: the fields Traefik
// requires, an import whose last element is this package's name, and
// testData that New accepts.
func TestManifest(t *testing.T) {
	var text string
	// go test runs in the package's directory, yaegi test where it is
	// started: the module root.
	for _, p := range []string{"../.traefik.yml", ".traefik.yml"} {
		if b, err := os.ReadFile(p); err == nil {
			text = string(b)
			break
		}
	}
	if text == "" {
		t.Fatal(".traefik.yml not found")
	}
	for _, line := range []string{"displayName: ", "type: middleware\n", "import: github.com/sluicehq/sluice/traefikplugin\n", "summary: ", "testData:\n"} {
		if !strings.Contains(text, "\n"+line) && !strings.HasPrefix(text, line) {
			t.Errorf(".traefik.yml: no line %q", line)
		}
	}
	data, err := parseTestData(text)
	if err != nil {
		t.Fatalf(".traefik.yml testData: %v", err)
	}
	cfg := CreateConfig()
	if err := decodeLikeTraefik(data, cfg); err != nil {
		t.Fatal(err)
	}
	g := newTestRegistry()
	if _, err := g.new(context.Background(), &okHandler{}, cfg, "test@file"); err != nil {
		t.Errorf("testData %v: %v", data, err)
	}
	if len(cfg.Limits) == 0 || cfg.Average == "" {
		t.Errorf("testData decoded to %+v; want a top-level limit and limits", cfg)
	}
}

// parseTestData reads the testData block of a manifest: the subset of YAML
// it uses (nested maps, lists of maps and of scalars, comments), scalars
// kept as strings, as labels would give them.
func parseTestData(text string) (map[string]interface{}, error) {
	type line struct {
		indent int
		text   string
	}
	var lines []line
	in := false
	for _, raw := range strings.Split(text, "\n") {
		if i := strings.Index(raw, " #"); i >= 0 {
			raw = raw[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(raw), "#") || strings.TrimSpace(raw) == "" {
			continue
		}
		indent := len(raw) - len(strings.TrimLeft(raw, " "))
		if indent == 0 {
			in = raw == "testData:"
			continue
		}
		if in {
			lines = append(lines, line{indent, strings.TrimSpace(raw)})
		}
	}
	pos := 0
	var block func(indent int) (interface{}, error)
	block = func(indent int) (interface{}, error) {
		if pos < len(lines) && strings.HasPrefix(lines[pos].text, "- ") {
			var list []interface{}
			for pos < len(lines) && lines[pos].indent == indent && strings.HasPrefix(lines[pos].text, "- ") {
				item := strings.TrimPrefix(lines[pos].text, "- ")
				if !strings.Contains(item, ": ") && !strings.HasSuffix(item, ":") {
					list = append(list, item)
					pos++
					continue
				}
				// A map item: its first key on the dash line.
				lines[pos] = line{indent + 2, item}
				v, err := block(indent + 2)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			return list, nil
		}
		m := map[string]interface{}{}
		for pos < len(lines) && lines[pos].indent == indent {
			l := lines[pos]
			k, v, ok := strings.Cut(l.text, ":")
			if !ok {
				return nil, fmt.Errorf("line %q: not a key", l.text)
			}
			pos++
			if v = strings.TrimSpace(v); v != "" {
				m[k] = v
				continue
			}
			if pos >= len(lines) || lines[pos].indent < indent ||
				(lines[pos].indent == indent && !strings.HasPrefix(lines[pos].text, "- ")) {
				return nil, fmt.Errorf("key %q: no value", k)
			}
			child, err := block(lines[pos].indent)
			if err != nil {
				return nil, err
			}
			m[k] = child
		}
		return m, nil
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("empty")
	}
	v, err := block(lines[0].indent)
	if err != nil {
		return nil, err
	}
	if pos != len(lines) {
		return nil, fmt.Errorf("line %q: unexpected indentation", lines[pos].text)
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("not a map")
	}
	return m, nil
}
