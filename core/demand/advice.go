package demand

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// Candidate is a limit an operator considers for a zone, in the zone's
// algorithm: a rate and, for the buckets, a capacity.
type Candidate struct {
	// Name says where the candidate comes from: "configured", "half",
	// "double", "p99x1.2" or "asked".
	Name string
	Rate model.Rate
	// Burst is a bucket's capacity; zero means the quota, as in
	// model.Limit. Window algorithms ignore it.
	Burst float64
	// MaxDelay is the zone's: a token_bucket lends what it refills in it.
	MaxDelay time.Duration
}

// Allowance is the most cost a candidate can admit to one key in one
// period of length period (nanoseconds) of the recorder's, aligned on the
// epoch as the windows are: for the window algorithms the quota of each of
// the candidate's windows that such a period meets (ceil(period/window),
// one more when neither length divides the other); for the buckets their
// capacity plus what they refill in the period (a bucket that starts the
// period full), plus, for a token_bucket, what it lends within MaxDelay. A
// key-period whose demand exceeds it is refused at least the excess, so
// the shares Advice derives from it are the least a candidate would
// refuse; they are exact for a fixed_window whose window is the period.
// Sustained bounds them from above for keys that ask steadily.
func (c Candidate) Allowance(alg model.Algorithm, period int64) float64 {
	window := int64(c.Rate.Period)
	if windowed(alg) {
		n := (period + window - 1) / window
		if period%window != 0 && window%period != 0 {
			n++
		}
		return c.Rate.Quota * float64(n)
	}
	burst := c.Burst
	if burst == 0 {
		burst = c.Rate.Quota
		if burst < 1 {
			burst = 1
		}
	}
	refill := c.Rate.Quota * float64(period) / float64(window)
	if alg != model.LeakyBucket {
		refill += c.Rate.Quota * float64(c.MaxDelay) / float64(window)
	}
	return burst + refill
}

// Sustained is the most cost a candidate admits one key in one period of
// length period (nanoseconds) in the long run: its rate times the period.
// It is what a key asking steadily above the rate gets each period once
// its first burst is spent: a bucket that starts every period empty (a
// token_bucket's loan within MaxDelay taken from one period to the next)
// admits only its refill, windows their quota per window. Such a key is
// refused about its demand's excess over it (to within a request's cost),
// so that for keys asking steadily the shares Advice derives from it bound
// the truth from above, as Allowance's do from below; a key whose asks
// bunch into part of a period, a bucket it emptied before, may be refused
// more.
func (c Candidate) Sustained(period int64) float64 {
	return c.Rate.Quota * float64(period) / float64(c.Rate.Period)
}

// windowed reports whether alg counts cost in windows, which take their
// capacity from the quota.
func windowed(alg model.Algorithm) bool {
	return alg == model.FixedWindow || alg == model.SlidingWindowLog || alg == model.SlidingWindowCounter
}

// Quantiles of the demand per key-period.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Verdict is what a candidate would have refused of the demand recorded:
// at least its Refusal at the candidate's Allowance, which every key-period
// is refused (a bucket full at each period's start); and its Sustained
// refusal, at the candidate's Sustained allowance, which a key asking
// steadily above the rate is refused (a bucket empty at each period's
// start). For keys that ask steadily the truth lies between the two.
type Verdict struct {
	Name  string  `json:"name"`
	Rate  string  `json:"rate"`
	Burst float64 `json:"burst,omitempty"`
	Refusal
	Sustained Refusal `json:"sustained"`
}

// Refusal is what an allowance of cost per key and period would have
// refused of the demand recorded, each key-period refused its demand's
// excess over it: the share of key-periods refused (some of their cost),
// of keys refused in at least one period, and of the cost asked, each an
// Estimate whose bounds hold the exact share of that excess in the demand
// recorded (to the 0.01 % they are rounded to).
type Refusal struct {
	Allowance float64 `json:"allowance"`

	KeyPeriods Estimate `json:"refused_key_periods"`
	Keys       Estimate `json:"refused_keys"`
	Cost       Estimate `json:"refused_cost"`
}

// Advice is a zone's demand and what candidate limits would have refused
// of it: the answer to "if I set this limit, whom would it refuse, and how
// much?".
type Advice struct {
	Zone string `json:"zone"`
	// Scope is "instance" when the figures are the demand the answering
	// instance saw, "fleet" when they are every instance's that records
	// the zone's demand in its Redis store (redisstore.Demand).
	Scope     string `json:"scope"`
	Algorithm string `json:"algorithm"`
	Period    string `json:"period"`
	// Since is when the figures start (the zone's start or last reset).
	Since time.Time `json:"since"`
	// Keys is the number of keys with a complete period; KeyPeriods the
	// number of complete key-periods, of which PartialKeyPeriods were cut
	// short by the bound on memory; FollowedKeys the keys followed now.
	Keys              uint64 `json:"keys"`
	KeyPeriods        uint64 `json:"key_periods"`
	PartialKeyPeriods uint64 `json:"partial_key_periods"`
	FollowedKeys      int    `json:"followed_keys"`
	// Cost is the cost asked in the complete key-periods.
	Cost float64 `json:"cost"`
	// OpenKeyPeriods is the number of key-periods recorded that no figure
	// counts yet, their period not over: until one is, an advice counts no
	// key and no cost however many keys it follows. For a fleet, they are
	// this instance's and those Redis holds of the periods not yet read (a
	// key with parts in both counts in each). FirstComplete is when the
	// first of them will count: its period's end, for a fleet once every
	// instance has had the time to send it (some 3 s later); absent when
	// none is open.
	OpenKeyPeriods int        `json:"open_key_periods"`
	FirstComplete  *time.Time `json:"first_complete,omitempty"`
	// RelativeError bounds the error of each quantile (written to 4
	// significant digits, which adds at most 0.05 %).
	RelativeError float64   `json:"relative_error"`
	Demand        Quantiles `json:"demand_per_key_period"`
	// Candidates are the configured limit, its quota halved and doubled,
	// the observed p99 plus a fifth, and those asked for.
	Candidates []Verdict `json:"candidates"`
}

// Advise returns the advice on zone, whose limit is l, from s; asked are
// the operator's own candidates, judged after the standard ones.
func Advise(zone string, l *model.Limit, s *Snapshot, asked []Candidate) Advice {
	period := l.PeriodNanos()
	a := Advice{
		Zone:              zone,
		Scope:             ScopeInstance,
		Algorithm:         string(l.Algorithm),
		Period:            model.FormatPeriod(time.Duration(period)),
		Since:             time.Unix(0, s.Since).UTC(),
		Keys:              s.Keys.Count(),
		KeyPeriods:        s.Periods.Count(),
		PartialKeyPeriods: s.Partial,
		FollowedKeys:      s.Followed,
		OpenKeyPeriods:    s.Open,
		Cost:              s.Periods.Sum(),
		RelativeError:     RelativeError,
		Demand: Quantiles{ // to 4 significant digits: within 0.05 % of the sketch's
			P50: digits(s.Periods.Quantile(0.5), 4),
			P90: digits(s.Periods.Quantile(0.9), 4),
			P95: digits(s.Periods.Quantile(0.95), 4),
			P99: digits(s.Periods.Quantile(0.99), 4),
			Max: s.Periods.Quantile(1),
		},
	}
	if s.Open > 0 && s.OpenEnd > 0 {
		end := time.Unix(0, s.OpenEnd).UTC()
		a.FirstComplete = &end
	}
	if a.Algorithm == "" {
		a.Algorithm = string(model.TokenBucket)
	}
	cands := []Candidate{
		{Name: "configured", Rate: l.Rate, Burst: l.Burst},
		{Name: "half", Rate: model.Rate{Quota: l.Rate.Quota / 2, Period: l.Rate.Period}, Burst: l.Burst / 2},
		{Name: "double", Rate: model.Rate{Quota: l.Rate.Quota * 2, Period: l.Rate.Period}, Burst: l.Burst * 2},
	}
	if p99 := a.Demand.P99; p99 > 0 {
		// The configured limit's shape, rescaled so that a period admits
		// 1.2 × p99: quota and burst in the same proportion, to three
		// significant digits, as an operator would write them (a window's
		// quota at least 1, as model.Limit requires).
		allow := (Candidate{Rate: l.Rate, Burst: l.Burst, MaxDelay: l.MaxDelay}).Allowance(l.Algorithm, period)
		k := 1.2 * p99 / allow
		c := Candidate{Name: "p99x1.2", Rate: model.Rate{Quota: digits(l.Rate.Quota*k, 3), Period: l.Rate.Period}, Burst: digits(l.Burst*k, 3)}
		if windowed(l.Algorithm) && c.Rate.Quota < 1 {
			c.Rate.Quota = 1
		}
		cands = append(cands, c)
	}
	cands = append(cands, asked...)
	for i := range cands {
		cands[i].MaxDelay = l.MaxDelay // the zone's, whatever the candidate
	}
	for _, c := range cands {
		a.Candidates = append(a.Candidates, judge(c, l.Algorithm, period, s))
	}
	return a
}

// AdviseQuery is the advice that Answer gives for a GET: the advice on
// zone, whose limit is l, from r's figures at now, with the candidates
// the query q asks for (ParseCandidates), or the error that names the
// query's bad parameter.
func AdviseQuery(r *Recorder, zone string, l *model.Limit, now int64, q url.Values) (Advice, error) {
	asked, err := Asked(l, q)
	if err != nil {
		return Advice{}, err
	}
	s := r.Snapshot(now)
	return Advise(zone, l, &s, asked), nil
}

// Answer is the answer on the advice endpoint of a zone, whose limit is
// l, that records its demand in r: for DELETE, Reset and 204; for any
// other method, AdviseQuery and 200 with the advice; 400 with a
// model.FieldError for a bad query. adv is nil but with 200.
// redisstore.Demand.Answer is its twin for a fleet's demand, and
// redisstore.AnswerAdvice, which both hosts call, picks one of the two.
func (r *Recorder) Answer(method, zone string, l *model.Limit, now int64, q url.Values) (status int, adv *Advice, err error) {
	if method == http.MethodDelete {
		r.Reset(now)
		return http.StatusNoContent, nil, nil
	}
	a, err := AdviseQuery(r, zone, l, now, q)
	if err != nil {
		return http.StatusBadRequest, nil, err
	}
	return http.StatusOK, &a, nil
}

// Asked returns the candidates the query q asks about a zone whose limit
// is l (ParseCandidates), or a FieldError naming the query's bad
// parameter, such as a candidate admitting more than a zone's period can
// be judged on.
func Asked(l *model.Limit, q url.Values) ([]Candidate, error) {
	asked, err := ParseCandidates(q)
	if err != nil {
		return nil, err
	}
	for _, c := range asked {
		c.MaxDelay = l.MaxDelay
		if a := c.Allowance(l.Algorithm, l.PeriodNanos()); math.IsInf(a, 0) || math.IsNaN(a) || a > maxAllowance {
			return nil, model.Refuse("candidate", c.Rate.String(), "admits more than "+strconv.FormatFloat(maxAllowance, 'g', -1, 64)+" a period of the zone")
		}
	}
	return asked, nil
}

// digits rounds v to n significant digits.
func digits(v float64, n int) float64 {
	if !(v > 0) {
		return 0
	}
	// Through the decimal text, so that 45.4 is not 45.400000000000006.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', n, 64), 64)
	return r
}

// judge returns what c would have refused of s.
func judge(c Candidate, alg model.Algorithm, period int64, s *Snapshot) Verdict {
	return Verdict{Name: c.Name, Rate: c.Rate.String(), Burst: c.Burst,
		Refusal:   refuse(c.Allowance(alg, period), s),
		Sustained: refuse(c.Sustained(period), s)}
}

// refuse returns what an allowance per key-period would have refused of s.
func refuse(allow float64, s *Snapshot) Refusal {
	r := Refusal{Allowance: allow}
	n, excess := s.Periods.Over(allow)
	r.KeyPeriods = n.share(float64(s.Periods.Count()))
	r.Cost = excess.share(s.Periods.Sum())
	keys, _ := s.Keys.Over(allow)
	r.Keys = keys.share(float64(s.Keys.Count()))
	return r
}

// ParseCandidates reads the candidates an operator asks for in a query:
// each candidate=<rate> (model.ParseRate's syntax), with the burst=<n>
// that follows it in order, if any (burst values pair with candidate
// values by position). Errors name the parameter.
func ParseCandidates(q url.Values) ([]Candidate, error) {
	rates, bursts := q["candidate"], q["burst"]
	if len(bursts) > len(rates) {
		return nil, model.Refuse("burst", bursts[len(rates)], "every burst needs a candidate before it")
	}
	if len(rates) > maxAsked {
		return nil, model.Refuse("candidate", strconv.Itoa(len(rates)), "at most "+strconv.Itoa(maxAsked)+" candidates")
	}
	var out []Candidate
	for i, s := range rates {
		r, err := model.ParseRate(s)
		if err != nil {
			reason := err.Error()
			if fe := model.FieldOf(err); fe != nil {
				reason = fe.Reason
			}
			return nil, model.Refuse("candidate", s, reason)
		}
		c := Candidate{Name: "asked", Rate: r}
		if i < len(bursts) {
			b, err := strconv.ParseFloat(bursts[i], 64)
			if err != nil || !(b > 0) || math.IsInf(b, 0) {
				return nil, model.Refuse("burst", bursts[i], "want a positive number")
			}
			c.Burst = b
		}
		out = append(out, c)
	}
	return out, nil
}

// maxAsked bounds the candidates one query may ask for.
const maxAsked = 16

// maxAllowance bounds what an asked candidate may admit a period: beyond
// any demand, and finite in JSON.
const maxAllowance = 1e15
