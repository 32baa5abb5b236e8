package core

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestAnswerGoldenPerAlgorithm drives each algorithm through a Gate on a
// fake clock (a burst that empties the limit, the rejection after it, and
// requests as quota comes back) and compares the status, RateLimit,
// Retry-After and X-RateLimit-Reset of every answer with
// testdata/answer/alg-<algorithm>.golden. Whatever the algorithm, t is the
// time until more quota is available, and a 429's Retry-After is never
// earlier than its t (draft-ietf-httpapi-ratelimit-headers-10).
func TestAnswerGoldenPerAlgorithm(t *testing.T) {
	cases := []struct {
		alg   model.Algorithm
		rate  string
		burst float64
		// steps: seconds to advance before each request.
		steps []float64
	}{
		// The example: 100/1m with burst 20, emptied: Retry-After 1
		// and t=1, not t=12 (the time to refill all 20).
		{model.TokenBucket, "100/m", 20, append(make([]float64, 21), 0.3, 0.3, 5)},
		{model.LeakyBucket, "2/s", 3, []float64{0, 0, 0, 0, 0.2, 0.3, 1}},
		{model.FixedWindow, "3/10s", 0, []float64{0, 0, 0, 0, 4, 6, 0}},
		{model.SlidingWindowLog, "3/10s", 0, []float64{0, 2, 2, 0, 3, 3, 10}},
		{model.SlidingWindowCounter, "3/10s", 0, []float64{0, 2, 2, 0, 3, 3, 10}},
	}
	for _, c := range cases {
		c := c
		t.Run(string(c.alg), func(t *testing.T) {
			clock := testclock.New(testclock.Epoch)
			l := gateLimit(t, "api", c.alg, c.rate, c.burst)
			store, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: store, Responder: answer.Responder{Headers: answer.DefaultHeaders}, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			at := 0.0
			for i, step := range c.steps {
				clock.Advance(time.Duration(step * float64(time.Second)))
				at += step
				rec := httptest.NewRecorder()
				v := g.Decide(context.Background(), []model.Ask{{Limit: l, Key: "k", Cost: 1}})
				if v.Outcome == OutcomeRejected {
					g.resp.Reject(rec, &v.Decision, clock.Now())
				} else {
					g.resp.SetHeaders(rec.Header(), &v.Decision, clock.Now())
					rec.WriteHeader(http.StatusOK)
				}
				h := rec.Result().Header
				fmt.Fprintf(&b, "%2d +%5.1fs %d RateLimit: %s", i+1, at, rec.Code, h.Get("RateLimit"))
				if ra := h.Get("Retry-After"); ra != "" {
					fmt.Fprintf(&b, " Retry-After: %s", ra)
					tv := h.Get("RateLimit")[strings.LastIndex(h.Get("RateLimit"), "=")+1:]
					if n, _ := strconv.Atoi(ra); strconv.Itoa(n) != ra || n < atoiOr(tv, -1) {
						t.Errorf("request %d: Retry-After %s earlier than t=%s", i+1, ra, tv)
					}
				}
				fmt.Fprintf(&b, " X-RateLimit-Reset: +%ds\n", atoiOr(h.Get("X-RateLimit-Reset"), 0)-int(clock.Now()/answer.NanosPerSecond))
			}
			got := b.String()
			coretest.Golden(t, filepath.Join("testdata", "answer", "alg-"+string(c.alg)+".golden"), got)
		})
	}
}

// atoiOr is s as an int, or def when it is not one.
func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// TestAnswerSameForEveryKey: two clients in the same state get the same
// answer, byte for byte (status, headers, body), allowed or rejected,
// through Gate.Serve and through a Lane, and no answer contains a key or
// a client address: an answer tells a client nothing about who it is to
// the limiter (issue 10).
func TestAnswerSameForEveryKey(t *testing.T) {
	clients := []string{"198.51.100.7:1111", "[2001:db8::42]:2222"}
	for _, body := range []answer.BodyFormat{answer.BodyJSON, answer.BodyProblem, answer.BodyText} {
		clock := testclock.New(testclock.Epoch)
		l := gateLimit(t, "api", model.TokenBucket, "2/m", 0)
		store, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: store, Responder: answer.Responder{Headers: answer.HeadersIETF | answer.HeadersLegacy | answer.HeadersX, Body: body}, Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		g.memClock = true
		spec, err := keyspec.Parse(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		lane := NewLane(LaneConfig{Gate: g, Asks: []LaneAsk{{Limit: l, Cost: 1}}, Specs: []*keyspec.Spec{spec}, Prefix: "lane\x00"})
		for step := 0; step < 4; step++ { // 200, 200, 429, 429
			for _, path := range []string{"gate", "lane"} {
				var answers []string
				for _, remote := range clients {
					r := httptest.NewRequest(http.MethodGet, "/", nil)
					r.RemoteAddr = remote
					rec := httptest.NewRecorder()
					if path == "lane" {
						ServeLane(lane, &countingHandler{}, rec, r)
					} else {
						key, _ := spec.Key(r)
						g.Serve(rec, r, []model.Ask{{Limit: l, Key: key, Cost: 1}})
					}
					got := coretest.RenderAnswer(rec.Code, rec.Result().Header, rec.Body.String())
					host := remote[:strings.LastIndexByte(remote, ':')]
					if strings.Contains(got, strings.Trim(host, "[]")) {
						t.Errorf("%s, body %d, step %d: the answer names the client %s:\n%s", path, body, step, host, got)
					}
					answers = append(answers, got)
				}
				if answers[0] != answers[1] {
					t.Errorf("%s, body %d, step %d: two clients in one state answered differently:\n%s\n---\n%s", path, body, step, answers[0], answers[1])
				}
			}
		}
	}
}
