package answer

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
)

// answerNow is the wall clock of every answer test, in Unix nanoseconds,
// at a whole second.
const answerNow = 1700000000 * NanosPerSecond

// validLimit returns a validated limit, failing t when it is not valid.
func validLimit(t testing.TB, name string, quota float64, period time.Duration) *model.Limit {
	t.Helper()
	l := &model.Limit{Name: name, Rate: model.Rate{Quota: quota, Period: period}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

// answerDecisions are the decisions of the golden tests, by name.
func answerDecisions(t testing.TB) map[string]model.Decision {
	api := validLimit(t, "api", 100, time.Minute)
	frac := validLimit(t, "frac", 2.5, 1500*time.Millisecond)
	return map[string]model.Decision{
		// r=42 (floored), t=1 (the next whole unit in 0.18 s), reset 18
		// (17.2 s rounded up).
		"allowed": {Limit: api, Allowed: true, Quota: 100, Remaining: 42.7, Reset: 17200 * time.Millisecond, Next: 180 * time.Millisecond},
		// r=0, reset 60, Retry-After 5 (4.2 s rounded up), and t=5 too:
		// a rejection's t is its own wait, not the next unit's (1).
		"rejected": {Limit: api, Quota: 100, Remaining: 0.4, Reset: 59500 * time.Millisecond, Next: 360 * time.Millisecond, RetryAfter: 4200 * time.Millisecond},
		// A cost above the capacity: full bucket, no Retry-After.
		"never": {Limit: api, Quota: 100, Remaining: 100, RetryAfter: model.Never},
		// q=2 (floored Integer), X-RateLimit-Limit 2.5, w=2 (1.5 s rounded up).
		"frac-allowed":  {Limit: frac, Allowed: true, Quota: 2.5, Remaining: 1.5, Reset: 400 * time.Millisecond, Next: 300 * time.Millisecond},
		"frac-rejected": {Limit: frac, Quota: 2.5, Remaining: 0.5, Reset: 1 * time.Second, Next: 300 * time.Millisecond, RetryAfter: 200 * time.Millisecond},
		// No limit: no IETF fields, no policy in bodies.
		"nolimit": {Quota: 10, Remaining: 3, Reset: 2 * time.Second, Next: time.Second, RetryAfter: 2 * time.Second},
	}
}

// fixedRand returns a Rand that always returns u.
func fixedRand(u float64) func() float64 { return func() float64 { return u } }

// answerCases are the golden tests: each writes testdata/answer/<name>.golden.
var answerCases = []struct {
	name     string
	r        Responder
	decision string
	reject   bool // Reject; otherwise SetHeaders on a 200 response
}{
	{"headers-ietf-allowed", Responder{Headers: HeadersIETF}, "allowed", false},
	{"headers-legacy-allowed", Responder{Headers: HeadersLegacy}, "allowed", false},
	{"headers-x-allowed", Responder{Headers: HeadersX}, "allowed", false},
	{"headers-default-allowed", Responder{Headers: DefaultHeaders}, "allowed", false},
	{"headers-all-allowed", Responder{Headers: HeadersIETF | HeadersLegacy | HeadersX}, "allowed", false},
	{"headers-off-allowed", Responder{Headers: HeadersOff}, "allowed", false},
	{"headers-ietf-rejected", Responder{Headers: HeadersIETF}, "rejected", true},
	{"headers-legacy-rejected", Responder{Headers: HeadersLegacy}, "rejected", true},
	{"headers-x-rejected", Responder{Headers: HeadersX}, "rejected", true},
	{"headers-all-rejected", Responder{Headers: HeadersIETF | HeadersLegacy | HeadersX}, "rejected", true},
	{"headers-off-rejected", Responder{Headers: HeadersOff}, "rejected", true},
	{"body-json-rejected", Responder{Headers: DefaultHeaders, Body: BodyJSON}, "rejected", true},
	{"body-json-never", Responder{Headers: DefaultHeaders, Body: BodyJSON}, "never", true},
	{"body-problem-rejected", Responder{Headers: DefaultHeaders, Body: BodyProblem}, "rejected", true},
	{"body-problem-never", Responder{Headers: DefaultHeaders, Body: BodyProblem}, "never", true},
	{"body-text-rejected", Responder{Headers: DefaultHeaders, Body: BodyText}, "rejected", true},
	{"body-text-never", Responder{Headers: DefaultHeaders, Body: BodyText}, "never", true},
	{"body-none-rejected", Responder{Headers: DefaultHeaders, Body: BodyNone}, "rejected", true},
	{"body-none-never", Responder{Headers: DefaultHeaders, Body: BodyNone}, "never", true},
	{"fractional-allowed", Responder{Headers: HeadersIETF | HeadersLegacy | HeadersX}, "frac-allowed", false},
	{"fractional-rejected", Responder{Headers: HeadersIETF | HeadersLegacy | HeadersX}, "frac-rejected", true},
	// 4.2 s lengthened by 0.5*0.9 = 45%: 6.09 s, rounded up to 7.
	{"jitter-rejected", Responder{Headers: DefaultHeaders, Jitter: 0.5, Rand: fixedRand(0.9)}, "rejected", true},
	{"nolimit-allowed", Responder{Headers: HeadersIETF | HeadersLegacy | HeadersX}, "nolimit", false},
	{"nolimit-json", Responder{Headers: DefaultHeaders, Body: BodyJSON}, "nolimit", true},
	{"nolimit-problem", Responder{Headers: DefaultHeaders, Body: BodyProblem}, "nolimit", true},
}

// TestAnswerGolden compares each answer with its golden file. Run with
// SLUICE_UPDATE_GOLDEN=1 to rewrite the files after an intended change.
func TestAnswerGolden(t *testing.T) {
	decisions := answerDecisions(t)
	for _, tc := range answerCases {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.r.Validate(); err != nil {
				t.Fatal(err)
			}
			d, ok := decisions[tc.decision]
			if !ok {
				t.Fatalf("no decision %q", tc.decision)
			}
			rec := httptest.NewRecorder()
			if tc.reject {
				tc.r.Reject(rec, &d, answerNow)
			} else {
				tc.r.SetHeaders(rec.Header(), &d, answerNow)
				rec.WriteHeader(http.StatusOK)
			}
			res := rec.Result()
			got := coretest.RenderAnswer(res.StatusCode, res.Header, rec.Body.String())
			coretest.Golden(t, filepath.Join("testdata", "answer", tc.name+".golden"), got)
		})
	}
}

// TestRejectConsistentWithSetHeaders checks that Reject writes the same
// rate-limit headers as SetHeaders for the same decision, and that the
// numbers agree across header families and with the body.
func TestRejectConsistentWithSetHeaders(t *testing.T) {
	all := HeadersIETF | HeadersLegacy | HeadersX
	for name, d := range answerDecisions(t) {
		d := d
		for _, body := range []BodyFormat{BodyJSON, BodyProblem, BodyText, BodyNone} {
			r := Responder{Headers: all, Body: body}
			h := http.Header{}
			r.SetHeaders(h, &d, answerNow)
			rec := httptest.NewRecorder()
			r.Reject(rec, &d, answerNow)
			got := rec.Result().Header
			for k, v := range h {
				if strings.Join(got[k], "|") != strings.Join(v, "|") {
					t.Errorf("%s/%d: %s: Reject wrote %q, SetHeaders %q", name, body, k, got[k], v)
				}
			}
			if got.Get("RateLimit-Remaining") != got.Get("X-RateLimit-Remaining") {
				t.Errorf("%s: RateLimit-Remaining %q, X-RateLimit-Remaining %q", name, got.Get("RateLimit-Remaining"), got.Get("X-RateLimit-Remaining"))
			}
			reset, err1 := strconv.ParseInt(got.Get("RateLimit-Reset"), 10, 64)
			unix, err2 := strconv.ParseInt(got.Get("X-RateLimit-Reset"), 10, 64)
			if err1 != nil || err2 != nil || unix-reset != answerNow/NanosPerSecond {
				t.Errorf("%s: RateLimit-Reset %q and X-RateLimit-Reset %q differ by other than now", name, got.Get("RateLimit-Reset"), got.Get("X-RateLimit-Reset"))
			}
			if d.Limit != nil {
				// t is the wait for more quota; on a rejection that
				// will fit, Retry-After's (never earlier than t).
				tWant := strconv.FormatInt(ceilSeconds(d.Next), 10)
				if d.RetryAfter != model.Never {
					tWant = got.Get("Retry-After")
				}
				want := `"` + d.Limit.Name + `";r=` + got.Get("RateLimit-Remaining") + ";t=" + tWant
				if got.Get("RateLimit") != want {
					t.Errorf("%s: RateLimit %q, want %q", name, got.Get("RateLimit"), want)
				}
			}
			if n, err := strconv.Atoi(got.Get("Content-Length")); err != nil || n != rec.Body.Len() {
				t.Errorf("%s/%d: Content-Length %q for a body of %d bytes", name, body, got.Get("Content-Length"), rec.Body.Len())
			}
			if body != BodyJSON {
				continue
			}
			var doc struct {
				Retryable  bool   `json:"retryable"`
				RetryAfter *int64 `json:"retry_after"`
				Policy     string `json:"policy"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
				t.Fatalf("%s: body %q: %v", name, rec.Body.String(), err)
			}
			ra := got.Get("Retry-After")
			switch {
			case d.RetryAfter == model.Never:
				if doc.Retryable || doc.RetryAfter != nil || ra != "" {
					t.Errorf("%s: never-retryable answer has Retry-After %q and body %s", name, ra, rec.Body.String())
				}
			case !doc.Retryable || doc.RetryAfter == nil || strconv.FormatInt(*doc.RetryAfter, 10) != ra:
				t.Errorf("%s: Retry-After %q, body %s", name, ra, rec.Body.String())
			}
			if d.Limit != nil && doc.Policy != d.Limit.Name {
				t.Errorf("%s: body policy %q, want %q", name, doc.Policy, d.Limit.Name)
			}
		}
	}
}

// TestAnswerOddPolicyName checks that a name Validate accepts but that is
// not plain ASCII is refused, and one with HTML's special characters
// yields well-formed fields and JSON that name it alike.
func TestAnswerOddPolicyName(t *testing.T) {
	for _, bad := range []string{"a\té", "caf\u00e9", "a\x00b"} {
		l := &model.Limit{Name: bad, Rate: model.Rate{Quota: 10, Period: time.Second}}
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "printable ASCII") {
			t.Errorf("name %q: Validate said %v, want a refusal", bad, err)
		}
	}
	name := "a<b>& c"
	l := validLimit(t, name, 10, time.Second)
	d := model.Decision{Limit: l, Quota: 10, Remaining: 1, Reset: time.Second, RetryAfter: time.Second}
	for _, body := range []BodyFormat{BodyJSON, BodyProblem} {
		r := Responder{Headers: DefaultHeaders, Body: body}
		rec := httptest.NewRecorder()
		r.Reject(rec, &d, answerNow)
		for k, vs := range rec.Result().Header {
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if v[i] < 0x20 || v[i] > 0x7e {
						t.Errorf("%s: %q has byte %#x", k, v, v[i])
					}
				}
			}
		}
		if got, want := rec.Result().Header.Get("RateLimit-Policy"), `"a<b>& c";q=10;w=1`; got != want {
			t.Errorf("RateLimit-Policy %q, want %q", got, want)
		}
		var doc map[string]interface{}
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
		var got interface{} = doc["policy"]
		if body == BodyProblem {
			list, _ := doc["violated-policies"].([]interface{})
			if len(list) != 1 {
				t.Fatalf("violated-policies %v", doc["violated-policies"])
			}
			got = list[0]
		}
		if got != name {
			t.Errorf("body %d names the policy %v, want %q", body, got, name)
		}
	}
}

// TestAnswerWithoutLimit checks that decisions without a usable limit are
// answered without policy and without panicking.
func TestAnswerWithoutLimit(t *testing.T) {
	r := Responder{Headers: HeadersIETF | HeadersLegacy | HeadersX, Body: BodyProblem}
	unvalidated := &model.Limit{Name: "api", Rate: model.Rate{Quota: 5, Period: time.Second}}
	for name, d := range map[string]*model.Decision{
		"nil":         nil,
		"zero":        {},
		"unvalidated": {Limit: unvalidated, Quota: 5, Remaining: 1, Reset: time.Second, RetryAfter: time.Second},
	} {
		h := http.Header{}
		r.SetHeaders(h, d, answerNow)
		if d == nil && len(h) != 0 {
			t.Errorf("%s: SetHeaders wrote %v", name, h)
		}
		rec := httptest.NewRecorder()
		r.Reject(rec, d, answerNow)
		res := rec.Result()
		if res.StatusCode != http.StatusTooManyRequests {
			t.Errorf("%s: status %d", name, res.StatusCode)
		}
		if v := res.Header.Get("RateLimit-Policy") + res.Header.Get("RateLimit"); v != "" {
			t.Errorf("%s: IETF fields without a policy: %q", name, v)
		}
		if strings.Contains(rec.Body.String(), "violated-policies") {
			t.Errorf("%s: body names policies: %s", name, rec.Body.String())
		}
		if res.Header.Get("Retry-After") != "1" {
			t.Errorf("%s: Retry-After %q, want 1", name, res.Header.Get("Retry-After"))
		}
	}
}

// TestSetHeadersOtherQuota checks a decision advertising another quota
// than its limit's Rate: the fields follow the decision.
func TestSetHeadersOtherQuota(t *testing.T) {
	l := validLimit(t, "api", 100, time.Minute)
	h := http.Header{}
	d := model.Decision{Limit: l, Allowed: true, Quota: 12.5, Remaining: 3, Reset: time.Second, Next: time.Second}
	(&Responder{Headers: HeadersIETF | HeadersLegacy | HeadersX}).SetHeaders(h, &d, answerNow)
	for k, want := range map[string]string{
		"RateLimit-Policy":  `"api";q=25;w=120`,
		"RateLimit":         `"api";r=3;t=1`,
		"RateLimit-Limit":   "12",
		"X-RateLimit-Limit": "12.5",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// TestPolicyWindow: RateLimit-Policy describes each limit's own rate in
// Integers, and a bucket larger than its quota by its capacity, so that
// RateLimit's r never exceeds q.
func TestPolicyWindow(t *testing.T) {
	for _, c := range []struct {
		alg   model.Algorithm
		rate  string
		burst float64
		want  string
	}{
		{model.TokenBucket, "100/m", 0, `"p";q=100;w=60`},
		{model.TokenBucket, "100/m", 20, `"p";q=100;w=60`},
		{model.TokenBucket, "10/100ms", 0, `"p";q=100;w=1`},
		{model.TokenBucket, "2.5/s", 0, `"p";q=5;w=2`},
		{model.TokenBucket, "7/1500ms", 0, `"p";q=14;w=3`},
		{model.TokenBucket, "10/m", 100, `"p";q=100;w=600`},
		{model.TokenBucket, "0.5/s", 0, `"p";q=1;w=2`},
		{model.LeakyBucket, "3/s", 6, `"p";q=6;w=2`},
		{model.FixedWindow, "1000/h", 0, `"p";q=1000;w=3600`},
		{model.SlidingWindowCounter, "5/250ms", 0, `"p";q=20;w=1`},
	} {
		r, err := model.ParseRate(c.rate)
		if err != nil {
			t.Fatal(err)
		}
		l := &model.Limit{Name: "p", Algorithm: c.alg, Rate: r, Burst: c.burst}
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := newLimitAnswer(l, l.Rate.Quota).Policy; got != c.want {
			t.Errorf("%s %s burst %v: RateLimit-Policy %s, want %s", c.alg, c.rate, c.burst, got, c.want)
		}
	}
}

// TestSetHeadersReplaces checks that SetHeaders replaces stale values of
// its own headers and leaves every other header alone.
func TestSetHeadersReplaces(t *testing.T) {
	d := answerDecisions(t)["allowed"]
	h := http.Header{}
	h.Set("RateLimit", "stale")
	h.Add("X-RateLimit-Remaining", "1")
	h.Add("X-RateLimit-Remaining", "2")
	h.Set("Content-Type", "text/html")
	(&Responder{Headers: DefaultHeaders}).SetHeaders(h, &d, answerNow)
	if got := h.Values("RateLimit"); len(got) != 1 || got[0] != `"api";r=42;t=1` {
		t.Errorf("RateLimit %q", got)
	}
	if got := h.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != "42" {
		t.Errorf("X-RateLimit-Remaining %q", got)
	}
	if h.Get("Content-Type") != "text/html" {
		t.Errorf("Content-Type changed to %q", h.Get("Content-Type"))
	}
	// Appending to one header must not change another (values share an array).
	h.Add("RateLimit-Policy", "extra")
	if got := h.Values("RateLimit"); len(got) != 1 || got[0] != `"api";r=42;t=1` {
		t.Errorf("after Add to RateLimit-Policy, RateLimit is %q", got)
	}
}

// rejectRetryAfter returns the Retry-After of r's answer to a rejection
// after ra.
func rejectRetryAfter(r *Responder, ra time.Duration) string {
	rec := httptest.NewRecorder()
	r.Reject(rec, &model.Decision{RetryAfter: ra}, answerNow)
	return rec.Result().Header.Get("Retry-After")
}

func TestRejectRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		ra     time.Duration
		jitter float64
		u      float64
		want   string
	}{
		{model.Never, 0, 0, ""},
		{model.Never, 1, 0.5, ""},
		{-time.Second, 0, 0, "1"},
		{0, 0, 0, "1"},
		{1, 0, 0, "1"},
		{time.Second, 0, 0, "1"},
		{time.Second + 1, 0, 0, "2"},
		{5 * time.Second, 0, 0, "5"},
		{4200 * time.Millisecond, 0, 0, "5"},
		{4 * time.Second, 0.5, 0, "4"},
		{4 * time.Second, 0.5, 0.5, "5"},
		{4 * time.Second, 0.5, 0.999, "6"},
		{4 * time.Second, 0.5, 2, "6"},          // clamped to 1
		{4 * time.Second, 0.5, -1, "4"},         // clamped to 0
		{4 * time.Second, 0.5, math.NaN(), "4"}, // treated as 0
		{4 * time.Second, 1, 0.999999, "8"},
		{model.Never - 1, 0, 0, "9223372037"},
		{model.Never - 1, 1, 0.9, "9223372037"}, // lengthened to at most Never-1
	} {
		r := Responder{Body: BodyNone, Jitter: tc.jitter, Rand: fixedRand(tc.u)}
		if got := rejectRetryAfter(&r, tc.ra); got != tc.want {
			t.Errorf("Retry-After for %v with jitter %v, u %v = %q, want %q", tc.ra, tc.jitter, tc.u, got, tc.want)
		}
	}
}

func TestRejectJitterDefaultRand(t *testing.T) {
	r := Responder{Body: BodyNone, Jitter: 0.5}
	for i := 0; i < 100; i++ {
		got, err := strconv.Atoi(rejectRetryAfter(&r, 10*time.Second))
		if err != nil || got < 10 || got > 15 {
			t.Fatalf("Retry-After for 10s with jitter 0.5 = %d (%v), want 10..15", got, err)
		}
	}
}

func TestAnswerRounding(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0}, {0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2},
		{17200 * time.Millisecond, 18}, {model.Never, 9223372037},
	} {
		if got := ceilSeconds(tc.d); got != tc.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	for _, tc := range []struct {
		x    float64
		want int64
	}{
		{-1, 0}, {math.NaN(), 0}, {0, 0}, {0.999, 0}, {42.7, 42}, {1e300, MaxSFInteger}, {math.Inf(1), MaxSFInteger},
	} {
		if got := floorUnits(tc.x); got != tc.want {
			t.Errorf("floorUnits(%v) = %d, want %d", tc.x, got, tc.want)
		}
	}
	for _, tc := range []struct {
		q             float64
		integer, text string
	}{
		{100, "100", "100"},
		{2.5, "2", "2.5"},
		{0.5, "0", "0.5"},
		{1.0 / 3, "0", "0.333"},
		{2.9999, "2", "3"},
		{0.0001, "0", "0.001"},
		{1e13 + 0.5, "10000000000000", "10000000000000"},
	} {
		integer, text := quotaTexts(tc.q)
		if integer != tc.integer || text != tc.text {
			t.Errorf("quotaTexts(%v) = %q, %q, want %q, %q", tc.q, integer, text, tc.integer, tc.text)
		}
	}
}

// TestSetHeadersRoundsLikeHelpers checks the arithmetic SetHeaders inlines
// against floorUnits and ceilSeconds.
func TestSetHeadersRoundsLikeHelpers(t *testing.T) {
	r := Responder{Headers: HeadersLegacy}
	for _, x := range []float64{-1, math.NaN(), 0, 0.999, 42.7, 1e300, math.Inf(1)} {
		h := http.Header{}
		r.SetHeaders(h, &model.Decision{Remaining: x}, answerNow)
		if got, want := h.Get("RateLimit-Remaining"), strconv.FormatInt(floorUnits(x), 10); got != want {
			t.Errorf("Remaining %v: RateLimit-Remaining %q, want %q", x, got, want)
		}
	}
	for _, d := range []time.Duration{-1500 * time.Millisecond, -time.Second, -1, 0, 1, time.Second, 17200 * time.Millisecond, model.Never} {
		h := http.Header{}
		r.SetHeaders(h, &model.Decision{Reset: d}, answerNow)
		if got, want := h.Get("RateLimit-Reset"), strconv.FormatInt(ceilSeconds(d), 10); got != want {
			t.Errorf("Reset %v: RateLimit-Reset %q, want %q", d, got, want)
		}
	}
}

func TestParseHeaderSet(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want HeaderSet
		err  string
	}{
		{nil, DefaultHeaders, ""},
		{[]string{""}, DefaultHeaders, ""},
		{[]string{"ietf"}, HeadersIETF, ""},
		{[]string{"Legacy"}, HeadersLegacy, ""},
		{[]string{" X "}, HeadersX, ""},
		{[]string{"ietf", "legacy", "x"}, HeadersIETF | HeadersLegacy | HeadersX, ""},
		{[]string{"x", "x"}, HeadersX, ""},
		{[]string{"OFF"}, HeadersOff, ""},
		{[]string{"off", "x"}, 0, "off cannot be combined"},
		{[]string{"ietf", "github"}, 0, `"github"`},
	} {
		got, err := ParseHeaderSet(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseHeaderSet(%q) error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseHeaderSet(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseBodyFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want BodyFormat
		ok   bool
	}{
		{"", BodyJSON, true},
		{"json", BodyJSON, true},
		{"Problem", BodyProblem, true},
		{" text", BodyText, true},
		{"NONE", BodyNone, true},
		{"html", 0, false},
	} {
		got, err := ParseBodyFormat(tc.in)
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), strconv.Quote(tc.in)) {
				t.Errorf("ParseBodyFormat(%q) error %v, want one naming the value", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBodyFormat(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestResponderValidate(t *testing.T) {
	for _, tc := range []struct {
		r   Responder
		err string
	}{
		{Responder{}, ""},
		{Responder{Headers: HeadersIETF | HeadersLegacy | HeadersX, Body: BodyNone, Jitter: 1}, ""},
		{Responder{Headers: 8}, "headers"},
		{Responder{Body: BodyNone + 1}, "body"},
		{Responder{Jitter: -0.1}, "jitter"},
		{Responder{Jitter: 1.5}, "jitter"},
		{Responder{Jitter: math.NaN()}, "jitter"},
	} {
		err := tc.r.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)) {
			t.Errorf("%+v.Validate() = %v, want error starting %q", tc.r, err, tc.err)
		}
	}
}

func BenchmarkSetHeaders(b *testing.B) {
	d := answerDecisions(b)["allowed"]
	r := Responder{Headers: DefaultHeaders}
	h := http.Header{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.SetHeaders(h, &d, answerNow)
	}
}

func BenchmarkReject(b *testing.B) {
	d := answerDecisions(b)["rejected"]
	r := Responder{Headers: DefaultHeaders, Body: BodyJSON}
	w := &coretest.DiscardWriter{H: http.Header{}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.Reject(w, &d, answerNow)
	}
}

func TestResponderDefer(t *testing.T) {
	l := &model.Limit{Name: "api", Rate: model.Rate{Quota: 100, Period: time.Minute}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	d := &model.Decision{Limit: l, Quota: 100, RetryAfter: 4200 * time.Millisecond, Reset: time.Minute}
	rec := httptest.NewRecorder()
	r := &Responder{Headers: DefaultHeaders, Body: BodyJSON, Defer: true}
	r.Reject(rec, d, answerNow)
	h := rec.Result().Header
	if rec.Body.Len() != 0 || h.Get("Content-Type") != "" || h.Get("Content-Length") != "" {
		t.Errorf("deferred rejection wrote a body: %q %v", rec.Body.String(), h)
	}
	if h.Get("Retry-After") != "5" || h.Get("Cache-Control") != "no-store" || h.Get("RateLimit-Policy") == "" {
		t.Errorf("deferred rejection headers: %v", h)
	}
}

// TestResetUnix: X-RateLimit-Reset's instant is rounded up to the second,
// whatever the fraction of now and of the reset, a negative reset counts
// as none, and the longest reset does not overflow.
func TestResetUnix(t *testing.T) {
	const s = NanosPerSecond
	for _, tc := range []struct {
		now, reset, want int64
	}{
		{100 * s, 0, 100},
		{100 * s, 1, 101},
		{100 * s, s, 101},
		{100*s + 900_000_000, s, 102},                                 // whole at 101.9 s
		{100*s + 900_000_000, 100_000_000, 101},                       // whole at 101.0 s
		{100*s + 900_000_000, 100_000_001, 102},                       // whole just after 101 s
		{100*s + 1, s - 1, 101},                                       // whole at 101.0 s
		{100*s + 500_000_000, 1500*1_000_000 + 1, 103},                // 102.000000001 s
		{100*s + 500_000_000, -2 * s, 101},                            // as 0
		{100 * s, int64(model.Never), 100 + int64(model.Never)/s + 1}, // no overflow
	} {
		if got := ResetUnix(tc.now, tc.reset); got != tc.want {
			t.Errorf("resetUnix(%d, %d) = %d, want %d", tc.now, tc.reset, got, tc.want)
		}
	}
}

// FuzzResponder writes headers and 429 answers for arbitrary decisions:
// no panic, header values printable ASCII, and a Retry-After never
// earlier than the decision's RetryAfter.
func FuzzResponder(f *testing.F) {
	f.Add(5.0, 1.5, int64(time.Second), int64(time.Second), uint8(7), uint8(0), 0.2)
	f.Add(-1.0, math.Inf(1), int64(-1), int64(math.MaxInt64), uint8(1), uint8(3), 1.0)
	f.Add(1e300, math.NaN(), int64(math.MaxInt64), int64(1), uint8(2), uint8(2), 0.0)
	l := &model.Limit{Name: "api", Rate: model.Rate{Quota: 100, Period: time.Minute}}
	if err := l.Validate(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, quota, remaining float64, reset, retry int64, headers, body uint8, jitter float64) {
		r := Responder{Headers: HeaderSet(headers) & (HeadersIETF | HeadersLegacy | HeadersX), Body: BodyFormat(body % 4), Jitter: jitter}
		if r.Validate() != nil {
			r.Jitter = 0
		}
		d := model.Decision{Limit: l, Quota: quota, Remaining: remaining, Reset: time.Duration(reset), RetryAfter: time.Duration(retry)}
		if d.Reset < 0 {
			d.Reset = 0
		}
		if d.RetryAfter < 0 {
			d.RetryAfter = 0
		}
		rec := httptest.NewRecorder()
		r.Reject(rec, &d, answerNow)
		for k, vs := range rec.Header() {
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if v[i] < 0x20 || v[i] > 0x7e {
						t.Fatalf("%s: %q", k, v)
					}
				}
			}
		}
		if d.RetryAfter != model.Never {
			ra := rec.Header().Get("Retry-After")
			if n, err := strconv.ParseInt(ra, 10, 64); err != nil || n < (int64(d.RetryAfter)-1)/int64(time.Second)+1 && n < 9223372036 {
				t.Fatalf("Retry-After %q for %v", ra, d.RetryAfter)
			}
		}
	})
}
