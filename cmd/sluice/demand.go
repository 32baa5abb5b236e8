package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
)

// readAdvice reads an Advice as JSON from the file at path, or from stdin
// when path is "-", and checks that it holds something to judge. Errors
// name the file.
func readAdvice(path string, stdin io.Reader) (demand.Advice, error) {
	name := path
	var data []byte
	var err error
	if path == "-" {
		name = "standard input"
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return demand.Advice{}, fmt.Errorf("calc --demand: %w", err)
	}
	var a demand.Advice
	if err := json.Unmarshal(data, &a); err != nil {
		return demand.Advice{}, fmt.Errorf("calc --demand %s: not an advice's JSON: %s", name, jsonError(data, err))
	}
	if err := checkAdvice(&a); err != nil {
		return demand.Advice{}, fmt.Errorf("calc --demand %s: %s", name, err)
	}
	return a, nil
}

// jsonError describes a decoding error with the line it occurred on.
func jsonError(data []byte, err error) string {
	var offset int64 = -1
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		offset = syntax.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	}
	if offset < 0 || offset > int64(len(data)) {
		return err.Error()
	}
	line := 1 + strings.Count(string(data[:offset]), "\n")
	return fmt.Sprintf("line %d: %v", line, err)
}

// checkAdvice reports what makes a an advice there is nothing to print
// from: no zone, an unknown algorithm, a bad period, no key-period.
func checkAdvice(a *demand.Advice) error {
	if a.Zone == "" {
		return errors.New(`no "zone": not an advice of GET /sluice/zones/<zone>/advice`)
	}
	if !slices.Contains(model.Algorithms, model.Algorithm(a.Algorithm)) {
		return fmt.Errorf(`"algorithm" %q is none of %s`, a.Algorithm, algorithmNames())
	}
	if p, err := time.ParseDuration(a.Period); err != nil || p <= 0 {
		return fmt.Errorf(`"period" %q is not a positive duration such as 1m`, a.Period)
	}
	if a.KeyPeriods == 0 && a.OpenKeyPeriods > 0 && a.FirstComplete != nil {
		return fmt.Errorf(`"key_periods" is 0: zone %q has no complete key-period to judge yet, but %d open; fetch the advice again after %s, when the first completes`, a.Zone, a.OpenKeyPeriods, a.FirstComplete.UTC().Format(timeFormat))
	}
	if a.KeyPeriods == 0 {
		return fmt.Errorf(`"key_periods" is 0: zone %q has no complete key-period to judge yet; fetch the advice again once a period (%s) of its limit has passed`, a.Zone, a.Period)
	}
	return nil
}

// writeAdvice prints a, which checkAdvice accepted, in words and as a
// table: the demand observed, then each candidate's verdict. mine, when
// not nil, is the limit calc was also given, in a's algorithm: its verdict
// if a holds it, else how to ask for it.
func writeAdvice(w io.Writer, a *demand.Advice, mine *demand.Candidate) {
	period, _ := time.ParseDuration(a.Period) // checked by checkAdvice
	alg := model.Algorithm(a.Algorithm)
	bucket := alg == model.TokenBucket || alg == model.LeakyBucket
	pm := fmt.Sprintf("±%s %%", num(a.RelativeError*100))

	fmt.Fprintf(w, "zone %s (%s): demand per key and %s period since %s\n", a.Zone, a.Algorithm, a.Period, a.Since.UTC().Format(timeFormat))
	observed := fmt.Sprintf("Observed %d keys in %d key-periods, asking a cost of %s in all", a.Keys, a.KeyPeriods, num(a.Cost))
	if a.PartialKeyPeriods > 0 {
		observed += fmt.Sprintf(" (%d key-periods cut short when their key was retired early to bound memory)", a.PartialKeyPeriods)
	}
	observed += fmt.Sprintf("; %d keys are followed now", a.FollowedKeys)
	if a.OpenKeyPeriods > 0 && a.FirstComplete != nil {
		observed += fmt.Sprintf(", and %d more key-periods are open, counted once their period is over (the first at %s)", a.OpenKeyPeriods, a.FirstComplete.UTC().Format(timeFormat))
	}
	wrap(w, fmt.Sprintf("%s. The demand of one key in one period, each figure %s:", observed, pm))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  p50\tp90\tp95\tp99\tmax\n")
	d := a.Demand
	fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", sig(d.P50), sig(d.P90), sig(d.P95), sig(d.P99), sig(d.Max))
	tw.Flush()

	fmt.Fprintln(w)
	if len(a.Candidates) == 0 {
		wrap(w, "The advice judges no candidate limit.")
	} else {
		wrap(w, "What each candidate would have refused, at least: the share of key-periods, of keys (in at least one period) and of the cost asked; then the share of the cost it refuses if keys ask steadily (steady cost). A range, when shown, holds the exact figure, which the advice only estimates.")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if bucket {
			fmt.Fprintf(tw, "candidate\trate\tburst\tallows per %s\tkey-periods\tkeys\tcost\tsteady cost\n", a.Period)
		} else {
			fmt.Fprintf(tw, "candidate\trate\tallows per %s\tkey-periods\tkeys\tcost\tsteady cost\n", a.Period)
		}
		for _, v := range a.Candidates {
			fmt.Fprintf(tw, "%s\t%s\t", v.Name, rateText(v.Rate))
			if bucket {
				fmt.Fprintf(tw, "%s\t", num(bucketSize(v.Rate, v.Burst)))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", num(v.Allowance), share(v.KeyPeriods), share(v.Keys), share(v.Cost), share(v.Sustained.Cost))
		}
		tw.Flush()
		note := "A key-period whose demand exceeds the allowance is refused at least the excess; how much more depends on when in the period its requests came, which the advice does not record."
		if bucket {
			note += " The allowance is a full bucket's: a key that asks steadily above the rate starts each period with its bucket empty and gets the rate alone, so it is refused about the steady cost; for such keys the truth lies between the two. Keys whose requests bunch into part of a period may be refused more."
		} else {
			note += " A key that asks steadily above the rate gets the rate alone, one quota a window, and is refused about the steady cost; for such keys the truth lies between the two."
		}
		if alg == model.FixedWindow {
			note += fmt.Sprintf(" For a fixed_window whose period is the zone's (%s) the shares are exact.", a.Period)
		}
		fmt.Fprintln(w)
		wrap(w, note)
		if v := a.Candidates[0]; v.Name == "configured" {
			fmt.Fprintln(w)
			wrap(w, fmt.Sprintf("The configured limit, %s, lets a key ask %s per %s; %s.", describe(v.Rate, v.Burst, bucket), num(v.Allowance), a.Period, refused(v)))
		}
	}
	if mine == nil {
		return
	}
	fmt.Fprintln(w)
	if v, ok := findVerdict(a, *mine, bucket); ok {
		wrap(w, fmt.Sprintf("Your limit, %s, is the advice's candidate %q: it lets a key ask %s per %s; %s.", describe(v.Rate, v.Burst, bucket), v.Name, num(v.Allowance), a.Period, refused(v)))
		return
	}
	// A query may hold "/" unescaped (RFC 3986, 3.4), which reads better.
	query := "candidate=" + strings.ReplaceAll(url.QueryEscape(mine.Rate.String()), "%2F", "/")
	if bucket && mine.Burst > 0 {
		query += "&burst=" + num(mine.Burst)
	}
	wrap(w, fmt.Sprintf("Your limit, %s, lets a key ask %s per %s. It is not among the advice's candidates, and the advice holds only these figures, not the demand they come from, so calc cannot judge it. Ask the endpoint that served the advice to judge it too:",
		describe(mine.Rate.String(), mine.Burst, bucket), num(mine.Allowance(alg, int64(period))), a.Period))
	fmt.Fprintf(w, "  GET /sluice/zones/%s/advice?%s\n", url.PathEscape(a.Zone), query)
}

// timeFormat is how calc writes the advice's instants.
const timeFormat = "2006-01-02 15:04:05 UTC"

// width is the most columns wrap fills a line with.
const width = 80

// wrap writes text to w, its words filled into lines of at most width
// columns (a longer word alone on its line), then a newline. It never
// breaks before a word that starts with "%", so that "2 %" stays whole.
func wrap(w io.Writer, text string) {
	var b strings.Builder
	col := 0
	for i, word := range strings.Fields(text) {
		n := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case col+1+n > width && !strings.HasPrefix(word, "%"):
			b.WriteByte('\n')
			col = 0
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += n
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// rateText writes a rate of the advice as calc writes rates: its quota
// to three decimals, its period as users write it.
func rateText(rate string) string {
	r, err := model.ParseRate(rate)
	if err != nil {
		return rate
	}
	return num(r.Quota) + "/" + model.FormatPeriod(r.Period)
}

// findVerdict returns a's verdict on the candidate of c's rate and
// burst (for a bucket, the burst it amounts to), if a holds one.
func findVerdict(a *demand.Advice, c demand.Candidate, bucket bool) (demand.Verdict, bool) {
	for _, v := range a.Candidates {
		r, err := model.ParseRate(v.Rate)
		if err != nil || r != c.Rate {
			continue
		}
		if !bucket || bucketSize(v.Rate, v.Burst) == bucketSize(v.Rate, c.Burst) {
			return v, true
		}
	}
	return demand.Verdict{}, false
}

// bucketSize is the capacity of a bucket of rate and burst: the burst, or
// when that is zero the quota (at least 1), as demand.Candidate.Allowance
// counts it.
func bucketSize(rate string, burst float64) float64 {
	if burst > 0 {
		return burst
	}
	r, err := model.ParseRate(rate)
	if err != nil {
		return 0
	}
	return math.Max(r.Quota, 1)
}

// describe writes a candidate's limit in words: its rate, and for a
// bucket its burst.
func describe(rate string, burst float64, bucket bool) string {
	if !bucket {
		return rate
	}
	return fmt.Sprintf("%s with a burst of %s", rateText(rate), num(bucketSize(rate, burst)))
}

// refused writes v's shares in words.
func refused(v demand.Verdict) string {
	return fmt.Sprintf("it would have refused at least %s of key-periods, %s of keys and %s of the cost asked, and about %s of the cost if its keys asked steadily, %s per period each", share(v.KeyPeriods), share(v.Keys), share(v.Cost), share(v.Sustained.Cost), num(v.Sustained.Allowance))
}

// share writes a share as a percentage, with its bounds when they differ
// from its value by more than the rounding.
func share(e demand.Estimate) string {
	v, lo, hi := percent(e.Value), percent(e.Low), percent(e.High)
	if lo == v && hi == v {
		return v + " %"
	}
	return fmt.Sprintf("%s %% (%s–%s %%)", v, lo, hi)
}

// percent writes a share (0 to 1) as a percentage: two decimals below 10
// %, one above, "<0.01" for a share that is positive but rounds to zero.
func percent(x float64) string {
	p := x * 100
	switch {
	case p <= 0:
		return "0"
	case p < 0.005:
		return "<0.01"
	case p < 10:
		return strconv.FormatFloat(math.Round(p*100)/100, 'f', -1, 64)
	}
	return strconv.FormatFloat(math.Round(p*10)/10, 'f', -1, 64)
}

// sig writes x to three significant digits, as much as a figure within
// ±2 % tells.
func sig(x float64) string {
	if x <= 0 {
		return "0"
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 3, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}
