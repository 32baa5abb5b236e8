// Package answer turns decisions into HTTP: the rate-limit headers
// (RateLimit and RateLimit-Policy of draft-ietf-httpapi-ratelimit-headers,
// the legacy RateLimit-* and X-RateLimit-* trios), Retry-After, and the
// 429 answer's body (JSON, RFC 9457 problem details, plain text). A
// Responder is the one writer both hosts use; its constant texts per limit
// are made once (Prepare). The tables and helpers exported beside it are
// for the Traefik lane (core/lane.go), which writes the commonest answers
// itself.
//
// It imports the standard library only, so that Traefik's Yaegi
// interpreter can run it unchanged.
package answer

import (
	"encoding/json"
	"math"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// HeaderSet selects the families of rate-limit response headers a
// [Responder] writes. Sets combine with |.
type HeaderSet uint8

// The header families. Every value is the decision's: Remaining is floored
// to whole cost units, Reset rounded up to whole seconds.
const (
	// HeadersIETF writes the two fields of draft-ietf-httpapi-ratelimit-headers-10:
	//
	//	RateLimit-Policy: "api";q=100;w=60
	//	RateLimit: "api";r=42;t=17
	//
	// q and w are the limit's rate as Integers, the quota over the shortest
	// multiple of the period that makes both whole (10/100ms is q=100;w=1,
	// 2.5/s is q=5;w=2), or, for a bucket that holds more than its quota,
	// its capacity over the time it takes to refill, so that r, the
	// remaining cost units (floored), never exceeds q; t is the seconds
	// until more quota is available (draft -10: Decision.Next), on a 429
	// until the request's own quota is, so that Retry-After is never
	// earlier. Both fields are omitted when the decision has no validated
	// Limit, whose name they need.
	HeadersIETF HeaderSet = 1 << iota
	// HeadersLegacy writes the fields of the earlier drafts (up to -06):
	// RateLimit-Limit (the quota, floored to an Integer),
	// RateLimit-Remaining and RateLimit-Reset (delta seconds).
	HeadersLegacy
	// HeadersX writes the de-facto X-RateLimit-Limit (the quota, with up to
	// three decimals when fractional: "2.5"), X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix time in seconds, as GitHub does: the first
	// whole second at which the limit is whole again, ceil(now + Reset)).
	HeadersX

	// HeadersOff writes no rate-limit headers; it is the zero HeaderSet.
	HeadersOff HeaderSet = 0
	// DefaultHeaders is the standard fields plus the X- fields most clients
	// already read.
	DefaultHeaders = HeadersIETF | HeadersX
)

// allHeaders is the union of every defined header family.
const allHeaders = HeadersIETF | HeadersLegacy | HeadersX

// ParseHeaderSet reads a header set from its names, case-insensitively:
// "ietf", "legacy", "x", or "off" (which must stand alone). Blank names are
// ignored; no name at all means [DefaultHeaders]. The error names the first
// unknown value.
func ParseHeaderSet(names []string) (HeaderSet, error) {
	var set HeaderSet
	given, off := false, false
	for _, n := range names {
		switch strings.ToLower(strings.TrimSpace(n)) {
		case "":
			continue
		case "ietf":
			set |= HeadersIETF
		case "legacy":
			set |= HeadersLegacy
		case "x":
			set |= HeadersX
		case "off":
			off = true
		default:
			return 0, model.Refuse("headers", n, "unknown (want ietf, legacy, x or off)")
		}
		given = true
	}
	if off {
		if set != HeadersOff {
			return 0, model.Refuse("headers", strings.Join(names, ","), "off cannot be combined with other header sets")
		}
		return HeadersOff, nil
	}
	if !given {
		return DefaultHeaders, nil
	}
	return set, nil
}

// BodyFormat selects the body of a 429 answer.
type BodyFormat uint8

// The body formats. No body ever contains the request's key or the client's
// address; the policy name is the only variable text besides the seconds.
const (
	// BodyJSON is application/json:
	//
	//	{"error":"rate_limited","retryable":true,"retry_after":5,"policy":"api"}
	//
	// retry_after (whole seconds, equal to Retry-After) is omitted and
	// retryable is false when the cost exceeds the limit's capacity; policy
	// is omitted when the decision has no validated Limit.
	BodyJSON BodyFormat = iota
	// BodyProblem is an RFC 9457 application/problem+json document of the
	// quota-exceeded type of draft-ietf-httpapi-ratelimit-headers:
	//
	//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
	//	 "title":"Request cannot be satisfied as assigned quota has been exceeded",
	//	 "status":429,"detail":"Retry in 5 s.","violated-policies":["api"]}
	//
	// detail is "Retry in N s." with N equal to Retry-After, or, when the
	// cost exceeds the limit's capacity, a sentence saying that retrying
	// cannot succeed. violated-policies is omitted when the decision has no
	// validated Limit.
	BodyProblem
	// BodyText is text/plain: "429 Too Many Requests: retry in 5 s\n".
	BodyText
	// BodyNone sends no body (Content-Length: 0).
	BodyNone
)

// ParseBodyFormat reads a body format, case-insensitively: "json" (also the
// meaning of ""), "problem", "text" or "none". The error names the value.
func ParseBodyFormat(s string) (BodyFormat, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "json":
		return BodyJSON, nil
	case "problem":
		return BodyProblem, nil
	case "text":
		return BodyText, nil
	case "none":
		return BodyNone, nil
	}
	return 0, model.Refuse("body", s, "unknown (want json, problem, text or none)")
}

// Responder writes sluice's rate-limit headers and 429 answers. It is the
// one place where both adapters turn a [model.Decision] into HTTP. Its zero value
// writes no rate-limit headers and JSON bodies; set Headers to
// [DefaultHeaders] for the usual fields. A Responder must pass Validate and
// must not be modified afterwards; it is then safe for concurrent use.
type Responder struct {
	// Headers selects the rate-limit header families to write.
	Headers HeaderSet
	// Body selects the format of a 429 answer's body.
	Body BodyFormat
	// Jitter, between 0 and 1, lengthens each Retry-After by a random
	// fraction of itself of at most Jitter (0.2: by 0 to 20%), so that
	// clients rejected together do not all retry at the same second.
	// Zero sends the exact time.
	Jitter float64
	// Rand returns numbers in [0, 1) for the jitter; values outside are
	// clamped. Nil means math/rand's Float64. It must be safe for
	// concurrent use.
	Rand func() float64
	// Defer leaves the status line and the body of a rejection to the
	// host: Reject sets the rate-limit headers, Retry-After and
	// Cache-Control but writes nothing, and the host answers 429 its own
	// way (Caddy's handle_errors). Body is then ignored.
	Defer bool

	// texts holds the answer texts of the limits of the Gate this
	// Responder is the copy of (see Prepare), made once; the texts of
	// any other decision are made when it is answered (answerFor).
	texts map[*model.Limit]*Texts
}

// Validate reports the first field of r that is out of range, as a
// *FieldError.
func (r *Responder) Validate() error {
	if r.Headers&^allHeaders != 0 {
		return model.Refuse("headers", "0x"+strconv.FormatUint(uint64(r.Headers&^allHeaders), 16), "unknown header set bits")
	}
	if r.Body > BodyNone {
		return model.Refuse("body", strconv.Itoa(int(r.Body)), "unknown format")
	}
	if !(r.Jitter >= 0 && r.Jitter <= 1) {
		return model.Refuse("jitter", model.FormatFloat(r.Jitter), "must be between 0 and 1")
	}
	return nil
}

// SetHeaders writes the rate-limit headers of r.Headers for d into h,
// replacing any values they had; it writes each header once and nothing
// else. Adapters call it on every response the limit decided, allowed ones
// included. now is the wall clock in Unix nanoseconds, used only for
// X-RateLimit-Reset. A nil d, or r.Headers of HeadersOff, writes nothing.
//
// The values share one backing array, of which each header gets a
// one-element window whose capacity ends with it (an append to one header
// reallocates instead of overwriting the next), and keys are assigned in
// canonical form instead of through http.Header.Set: one allocation for
// the slices of every header.
func (r *Responder) SetHeaders(h http.Header, d *model.Decision, now int64) {
	set := r.Headers
	if set == HeadersOff || d == nil {
		return
	}
	a := r.answer(d)
	rem := unitsText(floorUnits(d.Remaining))
	vals := make([]string, 8)
	if set&HeadersIETF != 0 && a.ready {
		// t: the time until more quota is available (Decision.Next) or,
		// for a rejection, until the request's own quota is (RetryAfter
		// without jitter, so that Retry-After is never earlier than t),
		// in whole seconds rounded up.
		t := d.Next
		if !d.Allowed && d.RetryAfter != model.Never {
			t = d.RetryAfter
		}
		// One element per statement: Yaegi v0.16.1 loses some values
		// of a tuple assignment to slice elements.
		vals[0] = a.Policy
		vals[1] = a.IETFPrefix + rem + ";t=" + unitsText(ceilSeconds(t))
		h["Ratelimit-Policy"] = vals[0:1:1]
		h["Ratelimit"] = vals[1:2:2]
	}
	if set&HeadersLegacy != 0 {
		vals[2] = a.qInt
		vals[3] = rem
		vals[4] = unitsText(ceilSeconds(d.Reset))
		h["Ratelimit-Limit"] = vals[2:3:3]
		h["Ratelimit-Remaining"] = vals[3:4:4]
		h["Ratelimit-Reset"] = vals[4:5:5]
	}
	if set&HeadersX != 0 {
		vals[5] = a.QText
		vals[6] = rem
		vals[7] = strconv.FormatInt(ResetUnix(now, int64(d.Reset)), 10)
		h["X-Ratelimit-Limit"] = vals[5:6:6]
		h["X-Ratelimit-Remaining"] = vals[6:7:7]
		h["X-Ratelimit-Reset"] = vals[7:8:8]
	}
}

// answer is the answer texts of d: its limit's, made by Prepare, or made
// now by answerFor when it advertises another quota or its limit is not
// one of the Gate's.
func (r *Responder) answer(d *model.Decision) *Texts {
	if a := r.texts[d.Limit]; a != nil && a.quota == d.Quota {
		return a
	}
	return answerFor(d)
}

// Texts returns the answer texts that Prepare made for l, or nil.
func (r *Responder) Texts(l *model.Limit) *Texts { return r.texts[l] }

// Prepare makes the answer texts of each limit of limits, and of the limit
// of its requests in flight, which r then answers without making them.
// A Gate calls it on its own copy of the Responder, before any request.
func (r *Responder) Prepare(limits []*model.Limit) {
	if r.texts == nil {
		r.texts = make(map[*model.Limit]*Texts, 2*len(limits))
	}
	for _, l := range limits {
		for _, k := range [2]*model.Limit{l, l.Flight()} {
			if k == nil {
				continue
			}
			if a, ok := limitTexts(k, k.Rate.Quota); ok {
				r.texts[k] = &a
			}
		}
	}
}

// unitsText is strconv.FormatInt(n, 10) for n >= 0, from SmallIntTexts
// when n is small: the counts and seconds of most answers are.
func unitsText(n int64) string {
	if n < SmallInts {
		return SmallIntTexts[n]
	}
	return strconv.FormatInt(n, 10)
}

// ResetUnix is X-RateLimit-Reset's value for a limit that is whole again
// reset nanoseconds (none if negative) after now, in Unix nanoseconds: the
// first whole Unix second at or after that instant, ceil(now + reset), so
// that a client that waits until the second it names finds the limit
// whole. It is the header's one computation: SetHeaders and the lane's
// fused answers call it. It adds the reset's whole seconds apart, so that
// no reset overflows, and works on its parameters in place, which costs
// the lane nothing under Yaegi.
func ResetUnix(now, reset int64) int64 {
	if reset < 0 {
		reset = 0
	}
	now += reset % NanosPerSecond
	reset /= NanosPerSecond
	now += NanosPerSecond - 1
	now /= NanosPerSecond
	now += reset
	return now
}

// SmallInts bounds the counts whose decimal texts SmallIntTexts holds.
const SmallInts = 1000

// SmallIntTexts holds strconv.Itoa(i) at i, without the allocation of a
// formatted number (and, under Yaegi, at a tenth of a call into strconv).
var SmallIntTexts = func() (t [SmallInts]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

// Reject writes a complete 429 Too Many Requests answer to w for the
// rejecting decision d: the headers of SetHeaders, Retry-After (whole
// seconds, rounded up after jitter, at least 1; absent when d.RetryAfter is
// [model.Never]), Cache-Control: no-store, Content-Length and, with a body,
// Content-Type and X-Content-Type-Options: nosniff, then the body of
// r.Body. now is SetHeaders'. A nil d is answered as the zero Decision.
func (r *Responder) Reject(w http.ResponseWriter, d *model.Decision, now int64) {
	if d == nil {
		d = &model.Decision{}
	}
	h := w.Header()
	if r.Headers != HeadersOff && (d.Limit != nil || d.Quota > 0) {
		// Without a quota (a store failure answered by FailClosed) there
		// is nothing to describe: Retry-After alone.
		r.SetHeaders(h, d, now)
	}
	retry := int64(-1)
	if d.RetryAfter != model.Never {
		ra := d.RetryAfter
		if r.Jitter > 0 {
			ra = r.jittered(ra)
		}
		retry = int64(ra / time.Second) // ceilSeconds(ra), at least 1
		if ra%time.Second > 0 {
			retry++
		}
		if retry < 1 {
			retry = 1
		}
	}
	if r.Defer {
		deferRejection(h, retry)
		return
	}
	var body []byte
	ctype := ""
	if r.Body < BodyNone {
		tails := &r.answer(d).Tails
		body = appendBody(&BodyTexts[r.Body], retry, tails[r.Body])
		ctype = BodyTexts[r.Body].ContentType
	}

	// b is [RETRY]LENGTH.
	var buf [32]byte
	b := buf[:0]
	if retry >= 0 {
		b = strconv.AppendInt(b, retry, 10)
	}
	retryTo := len(b)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	s := string(b)
	vals := make([]string, 5)
	vals[0], vals[1] = "no-store", s[retryTo:]
	h["Cache-Control"] = vals[0:1:1]
	h["Content-Length"] = vals[1:2:2]
	if retry >= 0 {
		vals[2] = s[:retryTo]
		h["Retry-After"] = vals[2:3:3]
	}
	if ctype != "" {
		vals[3], vals[4] = ctype, "nosniff"
		h["Content-Type"] = vals[3:4:4]
		h["X-Content-Type-Options"] = vals[4:5:5]
	}
	w.WriteHeader(http.StatusTooManyRequests)
	if len(body) > 0 {
		_, _ = w.Write(body) // a failed write means the client is gone
	}
}

// deferRejection sets the headers of a rejection whose answer the host
// writes: Retry-After (unless retry < 0, never) and Cache-Control.
func deferRejection(h http.Header, retry int64) {
	h.Set("Cache-Control", "no-store")
	if retry >= 0 {
		h.Set("Retry-After", strconv.FormatInt(retry, 10))
	}
}

// jittered lengthens ra by ra*r.Jitter*u, u drawn from r.Rand (clamped to
// [0, 1]) or math/rand, at nanosecond precision and at most to Never-1.
func (r *Responder) jittered(ra time.Duration) time.Duration {
	var u float64
	if r.Rand != nil {
		u = r.Rand()
	} else {
		u = rand.Float64()
	}
	if !(u >= 0) {
		u = 0
	} else if u > 1 {
		u = 1
	}
	f := float64(ra) * (1 + r.Jitter*u)
	if !(f < float64(model.Never)) {
		return model.Never - 1
	}
	return time.Duration(f)
}

// BodyParts is the constant text of one body format: a retryable answer is
// retry, the seconds, retryEnd and the tail; the other is never and the
// tail. The tail (see Texts.Tails) closes the document.
type BodyParts struct {
	Retry, RetryEnd, never, ContentType string
}

// problemStart opens every problem body, up to the value of "detail".
const problemStart = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":`

// BodyTexts holds the texts of each BodyFormat but BodyNone, by value.
var BodyTexts = [3]BodyParts{
	BodyJSON: {
		Retry:       `{"error":"rate_limited","retryable":true,"retry_after":`,
		never:       `{"error":"rate_limited","retryable":false`,
		ContentType: "application/json",
	},
	BodyProblem: {
		Retry:       problemStart + `"Retry in `,
		RetryEnd:    ` s."`,
		never:       problemStart + `"The request costs more than the quota allows at once; retrying cannot succeed."`,
		ContentType: "application/problem+json",
	},
	BodyText: {
		Retry:       "429 Too Many Requests: retry in ",
		RetryEnd:    " s\n",
		never:       "429 Too Many Requests: the request costs more than the limit allows at once; retrying cannot succeed\n",
		ContentType: "text/plain; charset=utf-8",
	},
}

// noLimitTails close the bodies of a decision without a validated limit,
// which name no policy.
var noLimitTails = [3]string{BodyJSON: "}", BodyProblem: "}", BodyText: ""}

// appendBody builds the body of t for retry seconds (-1: never), closed by
// tail.
func appendBody(t *BodyParts, retry int64, tail string) []byte {
	if retry < 0 {
		b := make([]byte, 0, len(t.never)+len(tail))
		b = append(b, t.never...)
		return append(b, tail...)
	}
	b := make([]byte, 0, len(t.Retry)+20+len(t.RetryEnd)+len(tail))
	b = append(b, t.Retry...)
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, t.RetryEnd...)
	return append(b, tail...)
}

// NanosPerSecond is time.Second in nanoseconds, as a constant of this package:
// under Yaegi a constant of the standard library is a value allocated on
// every call of a function that uses it.
const NanosPerSecond = int64(time.Second)

// MaxSFInteger is the largest Integer a structured field can carry (RFC
// 9651, 15 digits); counts of cost units are clamped to it.
const MaxSFInteger = 999999999999999

// floorUnits floors a non-negative count of cost units to an integer,
// mapping negative and NaN counts to 0 and clamping at MaxSFInteger.
func floorUnits(x float64) int64 {
	if !(x > 0) {
		return 0
	}
	if x >= MaxSFInteger {
		return MaxSFInteger
	}
	return int64(x)
}

// ceilSeconds rounds d up to whole seconds, 0 for d <= 0; the result, at
// most 9223372037, fits a structured-field Integer.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(d / time.Second)
	if d%time.Second != 0 {
		n++
	}
	return n
}

// quotaTexts formats a quota as an Integer (floored, for the structured
// fields, whose drafts require Integers) and as text with at most three
// decimals (for X-RateLimit-Limit): 100 → "100", "100"; 2.5 → "2", "2.5";
// a positive quota under 0.0005 → "0", "0.001".
func quotaTexts(q float64) (integer, text string) {
	integer = strconv.FormatInt(floorUnits(q), 10)
	if !(q > 0) || q >= 1e12 || q == float64(int64(q)) {
		return integer, integer
	}
	text = strconv.FormatFloat(q, 'f', 3, 64)
	text = strings.TrimRight(strings.TrimRight(text, "0"), ".")
	if text == "0" {
		text = "0.001"
	}
	return integer, text
}

// Texts holds the constant strings of a limit's answers, computed
// once by Validate so that the per-request path only formats numbers.
type Texts struct {
	ready      bool      // the limit was validated: the IETF fields and tails name it
	quota      float64   // the quota the strings were made for
	Policy     string    // RateLimit-Policy value: "api";q=100;w=60
	IETFPrefix string    // start of the RateLimit value: "api";r=
	qInt       string    // quota as an Integer (floored)
	QText      string    // quota with up to three decimals
	Tails      [3]string // ends of the bodies by BodyFormat: ,"policy":"api"} ...
}

// newLimitAnswer precomputes the answer strings of l advertising quota;
// l's name and period must be valid.
func newLimitAnswer(l *model.Limit, quota float64) Texts {
	capacity := l.Capacity() * quota / l.Rate.Quota // the same burst at this quota
	q, w := policyWindow(capacity, quota, l.Rate.Period)
	return namedAnswer(l.Name, quota, ";q="+strconv.FormatInt(q, 10)+";w="+strconv.FormatInt(w, 10))
}

// newFlightAnswer precomputes the answer strings of the in-flight slots of
// a limit named name, of which most may be held at once: its policy is
// "name";q=most;qu="concurrent-requests", the quota unit of concurrency in
// draft-ietf-httpapi-ratelimit-headers, without a window.
func newFlightAnswer(name string, most int) Texts {
	return namedAnswer(name, float64(most), ";q="+strconv.Itoa(most)+`;qu="concurrent-requests"`)
}

// namedAnswer is the answer strings of a limit named nameText advertising
// quota, whose RateLimit-Policy parameters are params. Names are escaped
// defensively although Validate already refuses quotes and backslashes:
// in the structured fields, bytes outside printable ASCII become '?' (a
// String cannot carry them); in bodies, the name is a JSON string as
// encoding/json writes it.
func namedAnswer(nameText string, quota float64, params string) Texts {
	a := Texts{ready: true, quota: quota}
	a.qInt, a.QText = quotaTexts(quota)
	sfName := sfString(nameText)
	a.Policy = sfName + params
	a.IETFPrefix = sfName + ";r="
	name, err := json.Marshal(nameText)
	if err != nil { // cannot happen for a string; keep the body well-formed anyway
		name = []byte(`""`)
	}
	a.Tails[BodyJSON] = `,"policy":` + string(name) + `}`
	a.Tails[BodyProblem] = `,"violated-policies":[` + string(name) + `]}`
	return a
}

// maxPolicyScale bounds the multiples of a period policyWindow tries.
const maxPolicyScale = 10000

// policyWindow returns the quota q and window w, in seconds, that
// RateLimit-Policy advertises for a limit of the given capacity, quota and
// period. The draft makes both Integers (w at least 1), so the limit is
// advertised over the shortest multiple of its period that makes both
// whole, rather than rounded: 10/100ms is q=100;w=1, 2.5/s is q=5;w=2,
// 12.5/m is q=25;w=120. A bucket that holds more than its quota is
// advertised by its capacity over the time that capacity takes to refill
// (burst 100 at 10/m: q=100;w=600), so that the remaining units r never
// exceed q. Where no multiple up to maxPolicyScale works, w is the period
// rounded (at least 1 s) and q the units over it, rounded (at least 1).
func policyWindow(capacity, quota float64, period time.Duration) (q, w int64) {
	units, secs := quota, period.Seconds()
	if capacity > quota {
		units, secs = capacity, secs*capacity/quota
	}
	whole := func(x float64) (int64, bool) {
		r := math.Round(x)
		return int64(r), r >= 1 && r <= MaxSFInteger && math.Abs(x-r) <= 1e-9*math.Max(1, x)
	}
	for k := 1.0; k <= maxPolicyScale; k++ {
		if n, ok := whole(units * k); ok {
			if s, ok := whole(secs * k); ok {
				return n, s
			}
		}
	}
	w = int64(math.Min(MaxSFInteger, math.Max(1, math.Round(secs))))
	q = int64(math.Min(MaxSFInteger, math.Max(1, math.Round(units*float64(w)/secs))))
	return q, w
}

// answerFor makes the answer strings of a decision that SetHeaders cannot
// take from its limit: without a validated limit, the quota texts alone
// (no IETF fields, no policy in bodies); with a limit whose decision
// advertises another quota than its Rate's, the limit's strings for that
// quota.
func answerFor(d *model.Decision) *Texts {
	a, ok := limitTexts(d.Limit, d.Quota)
	if !ok {
		a.quota, a.Tails = d.Quota, noLimitTails
		a.qInt, a.QText = quotaTexts(d.Quota)
	}
	return &a
}

// limitTexts makes the answer texts of l advertising quota, or reports
// false when l has none: l is nil, was not validated, or is a limit of
// requests in flight only, whose decisions are its flight limit's. A flight
// limit (Limit.flight) has the texts of its slots (newFlightAnswer).
func limitTexts(l *model.Limit, quota float64) (Texts, bool) {
	switch {
	case l == nil || l.Namespace() == "":
		return Texts{}, false
	case l.Rated():
		return newLimitAnswer(l, quota), true
	case l.Flight() == nil:
		return newFlightAnswer(l.Name, l.MaxInFlight), true
	}
	return Texts{}, false
}

// sfString quotes s as a structured-field String (RFC 9651): backslash
// before '"' and '\', '?' for bytes outside printable ASCII.
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
