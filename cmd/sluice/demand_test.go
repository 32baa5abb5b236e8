package main

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
)

// adviceFile is the advice the golden tests read.
var adviceFile = filepath.Join("testdata", "advice.json")

// testAdvice is the advice on zone api, token_bucket 100/1m with a burst
// of 20, after an hour of 120,000 requests from 5,000 clients whose
// frequencies follow Zipf's law, a tenth of them of cost 2.5, and with
// 150/1m (burst 30) asked for.
func testAdvice(t *testing.T) demand.Advice {
	t.Helper()
	const clients, requests = 5000, 120000
	start := time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC).UnixNano()
	hour := int64(time.Hour)
	l := &model.Limit{Name: "api", Rate: model.Rate{Quota: 100, Period: time.Minute}, Burst: 20}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	r := demand.NewRecorder(l.PeriodNanos(), 0, start)
	zipf := rand.NewZipf(rand.New(rand.NewSource(1)), 1.2, 2, clients-1)
	for i := range requests {
		cost := 1.0
		if i%10 == 0 {
			cost = 2.5
		}
		r.Add(start+int64(i)*(hour/requests), "client"+strconv.FormatUint(zipf.Uint64(), 10), cost)
	}
	s := r.Snapshot(start + hour)
	asked, err := demand.ParseCandidates(url.Values{"candidate": {"150/1m"}, "burst": {"30"}})
	if err != nil {
		t.Fatal(err)
	}
	return demand.Advise("api", l, &s, asked)
}

// TestAdviceFile: testdata/advice.json is what testAdvice gives today;
// SLUICE_UPDATE_GOLDEN=1 rewrites it.
func TestAdviceFile(t *testing.T) {
	got, err := json.MarshalIndent(testAdvice(t), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := golden(t, adviceFile, append(got, '\n')); !ok {
		t.Errorf("%s is not what demand.Advise gives for testAdvice's trace: run SLUICE_UPDATE_GOLDEN=1 go test ./cmd/sluice", adviceFile)
	}
}

// TestCalcDemandGolden compares calc --demand's output, alone and with a
// limit the advice does not hold, with its golden files;
// SLUICE_UPDATE_GOLDEN=1 rewrites them.
func TestCalcDemandGolden(t *testing.T) {
	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"calc-demand.golden", []string{"calc", "--demand", adviceFile}},
		{"calc-demand-rate.golden", []string{"calc", "300/1m", "--burst", "50", "--demand", adviceFile}},
	} {
		got := sluice(t, c.args...)
		if want, ok := golden(t, filepath.Join("testdata", c.golden), []byte(got)); !ok {
			t.Errorf("sluice %s:\n%s\nwant:\n%s", strings.Join(c.args, " "), got, want)
		}
	}
}

// TestCalcDemandCandidate: a limit the advice holds, its configured one or
// one asked for, is judged from the advice's verdict and not sent to the
// endpoint; read from standard input alike.
func TestCalcDemandCandidate(t *testing.T) {
	data, err := os.ReadFile(adviceFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"calc", "150/1m", "--burst", "30", "--demand", "-"}, `Your limit, 150/1m with a burst of 30, is the advice's candidate "asked"`},
		{[]string{"calc", "100/1m", "--burst", "20", "--demand", "-"}, `Your limit, 100/1m with a burst of 20, is the advice's candidate "configured"`},
		{[]string{"calc", "100/1m", "--burst", "20", "--algorithm", "token_bucket", "--demand", "-"}, `is the advice's candidate "configured"`},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, bytes.NewReader(data), &out, &errOut); code != 0 {
			t.Fatalf("sluice %s: exit %d: %s", strings.Join(c.args, " "), code, errOut.String())
		}
		if !strings.Contains(out.String(), c.want) || strings.Contains(out.String(), "GET /sluice") {
			t.Errorf("sluice %s:\n%s\nwant %q and no query to the endpoint", strings.Join(c.args, " "), out.String(), c.want)
		}
	}
}

// TestCalcDemandOpen: an advice with key-periods open says how many and
// when the first completes.
func TestCalcDemandOpen(t *testing.T) {
	a := testAdvice(t)
	first := time.Date(2025, 6, 2, 10, 1, 0, 0, time.UTC)
	a.OpenKeyPeriods, a.FirstComplete = 7, &first
	data, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"calc", "--demand", "-"}, bytes.NewReader(data), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if got := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(got, "and 7 more key-periods are open, counted once their period is over (the first at 2025-06-02 10:01:00 UTC).") {
		t.Errorf("output does not say that 7 key-periods are open:\n%s", out.String())
	}
}

// TestCalcDemandErrors: bad input exits non-zero with an error that names
// the file and what is wrong with it; so do flags that contradict the
// advice.
func TestCalcDemandErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	valid, err := os.ReadFile(adviceFile)
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	notJSON := write("log.txt", "zone api\n")
	badField := write("bad.json", "{\n  \"zone\": \"api\",\n  \"keys\": \"many\"\n}\n")
	empty := write("empty.json", `{"zone": "api", "algorithm": "token_bucket", "period": "1m", "key_periods": 0, "candidates": []}`)
	open := write("open.json", `{"zone": "api", "algorithm": "token_bucket", "period": "1m", "key_periods": 0, "followed_keys": 3, "open_key_periods": 3, "first_complete": "2025-06-02T09:01:00Z"}`)
	noZone := write("nozone.json", `{"algorithm": "token_bucket", "period": "1m", "key_periods": 3}`)
	badAlg := write("alg.json", `{"zone": "api", "algorithm": "gcra", "period": "1m", "key_periods": 3}`)
	for _, c := range []struct {
		args  []string
		stdin string
		want  []string
	}{
		{[]string{"calc", "--demand", missing}, "", []string{missing, "no such file"}},
		{[]string{"calc", "--demand", notJSON}, "", []string{notJSON, "not an advice's JSON", "line 1", "invalid character"}},
		{[]string{"calc", "--demand", badField}, "", []string{badField, "not an advice's JSON", "line 3", "Advice.keys"}},
		{[]string{"calc", "--demand", empty}, "", []string{empty, `"key_periods" is 0`, "no complete key-period"}},
		{[]string{"calc", "--demand", open}, "", []string{open, `"key_periods" is 0`, "but 3 open", "after 2025-06-02 09:01:00 UTC, when the first completes"}},
		{[]string{"calc", "--demand", noZone}, "", []string{noZone, `no "zone"`}},
		{[]string{"calc", "--demand", badAlg}, "", []string{badAlg, `"algorithm" "gcra"`}},
		{[]string{"calc", "--demand", "-"}, "", []string{"standard input", "not an advice's JSON"}},
		{[]string{"calc", "--demand", adviceFile, "--json"}, string(valid), []string{"--json does not combine with --demand"}},
		{[]string{"calc", "--demand", adviceFile, "--burst", "20"}, "", []string{"--burst needs the limit's rate"}},
		{[]string{"calc", "10/1m", "--algorithm", "fixed_window", "--demand", adviceFile}, "", []string{"--algorithm fixed_window", "zone api of the advice is token_bucket"}},
	} {
		var out, errOut bytes.Buffer
		code := run(c.args, strings.NewReader(c.stdin), &out, &errOut)
		if code == 0 || out.Len() != 0 {
			t.Errorf("sluice %s: exit %d, stdout %q; want non-zero and nothing", strings.Join(c.args, " "), code, out.String())
		}
		for _, w := range c.want {
			if !strings.Contains(errOut.String(), w) {
				t.Errorf("sluice %s: stderr %q lacks %q", strings.Join(c.args, " "), errOut.String(), w)
			}
		}
	}
}
