package caddymodule

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/caddyauth" // basic_auth, for the order tests
)

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt adapts every testdata/*.caddyfiletest, in the format of
// Caddy's own adapt tests: a Caddyfile, a line of ten dashes, then either
// the expected JSON (starting with '{') or text that the adapt error must
// contain, file and line included. With -update, it rewrites the expected
// JSON or error text of every file from the current output: review the
// diff.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			in, want, ok := strings.Cut(string(data), "----------")
			if !ok {
				t.Fatal("no ---------- separator")
			}
			in, want = strings.TrimSpace(in)+"\n", strings.TrimSpace(want)
			out, _, err := adapter.Adapt([]byte(in), nil)
			if !strings.HasPrefix(want, "{") {
				if *update && err != nil {
					_, msg, _ := strings.Cut(err.Error(), "for 'sluice': ")
					writeCase(t, file, in, msg)
					return
				}
				if err == nil {
					t.Fatalf("adapted without error, want one containing %q", want)
				}
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			got := pretty.String()
			if *update {
				writeCase(t, file, in, got)
				return
			}
			if got != want {
				t.Errorf("adapted JSON differs\n--- got\n%s\n--- want\n%s", got, want)
			}
		})
	}
}

// writeCase rewrites a test file with the expected output want.
func writeCase(t *testing.T, file, in, want string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(strings.TrimSpace(in)+"\n----------\n"+want+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
