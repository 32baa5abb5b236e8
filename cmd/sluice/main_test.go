package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sluice runs one command line and returns its output.
func sluice(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("sluice %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

func TestCalc(t *testing.T) {
	out := sluice(t, "calc", "100/1m")
	for _, want := range []string{"interval between requests:  600ms", "sustained rate:             1.667/s", "Retry-After after a burst:  1 s"} {
		if !strings.Contains(out, want) {
			t.Errorf("calc 100/1m:\n%s\nwant a line %q", out, want)
		}
	}
	var res calcResult
	if err := json.Unmarshal([]byte(sluice(t, "calc", "100/1m", "--burst", "20", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	// A bucket of 20 refilled at 100 per minute admits at most 20 + 100
	// in any minute (one less, as the simulated client is discrete).
	if res.IntervalMS != 600 || res.Capacity != 20 || res.MaxInPeriod < 115 || res.MaxInPeriod > 120 || res.RetryAfterS != 1 {
		t.Errorf("calc 100/1m --burst 20: %+v", res)
	}
	if err := json.Unmarshal([]byte(sluice(t, "calc", "10/1m", "--algorithm", "fixed_window", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.MaxInPeriod != 20 {
		t.Errorf("fixed_window 10/1m admits %v in some minute, want 20 (two quotas at a boundary)", res.MaxInPeriod)
	}
	var errOut bytes.Buffer
	if code := run([]string{"calc", "0.5/s", "--algorithm", "fixed_window"}, io.Discard, &errOut); code == 0 || !strings.Contains(errOut.String(), "1/2s") {
		t.Errorf("calc of a window quota below 1: exit %d, %q", code, errOut.String())
	}
}

// TestSimGolden compares sim's table for each generated trace with its
// golden file; SLUICE_UPDATE_GOLDEN=1 rewrites them.
func TestSimGolden(t *testing.T) {
	for _, tr := range []string{"boundary", "uniform", "bursty"} {
		got := sluice(t, "sim", "--rate", "10/1m", "--trace", tr)
		path := filepath.Join("testdata", "sim-"+tr+".golden")
		if os.Getenv("SLUICE_UPDATE_GOLDEN") == "1" {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("sim --trace %s:\n%s\nwant:\n%s", tr, got, want)
		}
	}
}

// TestSimSVG: the plot is well-formed XML with one series per algorithm,
// besides the arrivals.
func TestSimSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.svg")
	sluice(t, "sim", "--rate", "10/1m", "--trace", "boundary", "--svg", path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	series := map[string]bool{}
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = el.Name.Local
			}
			if el.Name.Local == "polyline" {
				for _, a := range el.Attr {
					if a.Name.Local == "data-algorithm" {
						series[a.Value] = true
					}
				}
			}
		}
	}
	if root != "svg" || len(series) != 6 || !series["arrivals"] || !series["fixed_window"] || !series["sliding_window_counter"] {
		t.Errorf("root %q, series %v; want svg with the arrivals and five algorithms", root, series)
	}
}

func TestSimCSVTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(path, []byte("# seconds,cost\n0\n0.5,2\n\n1\n59.9\n60.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := sluice(t, "sim", "--rate", "2/1m", "--algorithms", "fixed_window,token_bucket", "--trace", path)
	if !strings.Contains(out, "trace "+path+": 5 requests") || !strings.Contains(out, "fixed_window") || strings.Contains(out, "leaky_bucket") {
		t.Errorf("sim of a CSV trace:\n%s", out)
	}
	if err := os.WriteFile(path, []byte("soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	if code := run([]string{"sim", "--rate", "2/1m", "--trace", path}, io.Discard, &errOut); code == 0 || !strings.Contains(errOut.String(), "line 1") {
		t.Errorf("bad CSV: exit %d, %q", code, errOut.String())
	}
}
