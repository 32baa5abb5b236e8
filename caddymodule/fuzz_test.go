package caddymodule

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// FuzzUnmarshalCaddyfile parses arbitrary sluice blocks: no panic, and an
// error, when there is one, names the Caddyfile's line.
func FuzzUnmarshalCaddyfile(f *testing.F) {
	for _, s := range []string{
		"sluice {\n\tzone api {\n\t\trate 100/m\n\t}\n}",
		"sluice {\n\tzone api {\n\t\trate 10/s\n\t\tburst 20\n\t\tkey {http.request.header.X-Key} {http.request.host}\n\t\tcost {http.request.header.X-Cost}\n\t}\n\tstore redis {\n\t\taddress 127.0.0.1:6379\n\t}\n\tshare edge\n}",
		"sluice {\n\tzone a {\n\t\trate 0.5/s\n\t\talgorithm fixed_window\n\t}\n}",
		"sluice {\n\tzone {\n\t}\n}",
		"sluice extra",
		"sluice {\n\theaders ietf off\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		d := caddyfile.NewTestDispenser(input)
		var h Handler
		if err := h.UnmarshalCaddyfile(d); err != nil && !strings.Contains(err.Error(), "line") && !strings.Contains(err.Error(), ":") {
			t.Fatalf("error %q names no place", err)
		}
	})
}
