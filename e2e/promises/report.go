package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// traceLines bounds the requests a violation's trace shows.
const traceLines = 40

// report prints the checks' and defects' verdicts, the figures and, on a
// violation, the seed, the fault schedule and each violation's trace; it
// reports whether everything passed.
func (t *topology) report(sel map[string]bool, vs []*violation, figs []figure, defects []*defectResult) bool {
	want := func(c string) bool { return len(sel) == 0 || sel[c] }
	byCheck := map[string][]*violation{}
	for _, v := range vs {
		byCheck[v.check] = append(byCheck[v.check], v)
	}
	failed := false
	fmt.Println("--- promises: figures")
	t.summary()
	for _, f := range figs {
		fmt.Printf("  %-9s %s\n", f.check, f.text)
	}
	fmt.Println("--- promises: checks")
	for _, c := range checkNames {
		if strings.HasPrefix(c, "defect") && c != "defect1" || !want(c) {
			continue
		}
		v := byCheck[c]
		if len(v) == 0 {
			fmt.Printf("PASS: %s\n", c)
			continue
		}
		failed = true
		fmt.Printf("FAIL: %s: %d violation(s)\n", c, len(v))
		for i, x := range v {
			if i == 3 {
				var at []string
				for j, y := range v[3:] {
					if j == 30 {
						at = append(at, "...")
						break
					}
					at = append(at, fmt.Sprintf("%.2fs", y.from.Seconds()))
				}
				fmt.Printf("  ... and %d more, from %s\n", len(v)-3, strings.Join(at, " "))
				break
			}
			t.trace(x)
		}
	}
	for _, d := range defects {
		switch {
		case len(d.problems) > 0:
			failed = true
			fmt.Printf("FAIL: %s: %s\n", d.name, d.promise)
			for _, p := range d.problems {
				fmt.Printf("  %s\n", p)
			}
			for _, n := range d.notes {
				fmt.Printf("  (%s)\n", n)
			}
			for i, x := range d.recs {
				if i == traceLines {
					break
				}
				fmt.Printf("    %s\n", x)
			}
		case d.inconclusive != "":
			failed = true
			fmt.Printf("FAIL: %s: inconclusive: %s\n", d.name, d.inconclusive)
		default:
			fmt.Printf("PASS: %s: %s (%s)\n", d.name, d.promise, strings.Join(d.notes, "; "))
		}
	}
	if failed {
		fmt.Printf("--- promises: FAILED with seed %d; rerun: bash e2e/promises.sh -seed %d -mode %s\n", t.seed, t.seed, map[bool]string{true: "long", false: "small"}[t.long])
		fmt.Println("the fault schedule:")
		for _, f := range t.faults {
			fmt.Println("  ", f)
		}
		for _, rl := range t.reloads {
			fmt.Printf("   reload of %s at %.3fs..%.3fs %s\n", rl.h.name, rl.at.Seconds(), rl.done.Seconds(), rl.err)
		}
		return false
	}
	fmt.Printf("--- promises: all checks passed (seed %d)\n", t.seed)
	return true
}

// summary prints the run's figures: requests and answers, faults by kind.
func (t *topology) summary() {
	recs := t.rc.all()
	kinds := map[string]int{}
	for _, f := range t.faults {
		kinds[f.kind]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(ks)
	fmt.Printf("  seed %d: %d requests in %.0f s; %d faults (%s); %d reloads; Redis started empty %d times\n",
		t.seed, len(recs), t.since().Seconds(), len(t.faults), strings.Join(ks, ", "), len(t.reloads), len(t.restarts))
	for _, rl := range t.reloads {
		if rl.err != "" {
			fmt.Printf("  reload of %s at %.1fs failed: %s\n", rl.h.name, rl.at.Seconds(), rl.err)
		}
	}
	// How much the failure policies let through beyond the bounds:
	// answers not from Redis, per policy.
	n := map[string]int{}
	for _, x := range recs {
		if x.admitted() && (x.cls == classPolicy || x.cls == classFallback) && !strings.HasPrefix(x.r.name, "d") {
			n[x.r.policy+"/"+x.cls.String()]++
		}
	}
	fmt.Printf("  admitted by a failure policy: %d by allow, %d by the local fallback (deny admits none: %d)\n",
		n["allow/policy"], n["fallback/fallback"], n["deny/policy"])
	if k, most := t.stalls.summary(); k > 0 {
		fmt.Printf("  the machine stalled %d times (a 5 ms sleep overslept %v or more), at most %v: the timing bounds allow for them\n", k, stallMin, most.Round(time.Millisecond))
	}
}

// trace prints v and the fewest requests, answers and faults that show
// it.
func (t *topology) trace(v *violation) {
	fmt.Printf("  %s\n", v.msg)
	recs := append([]*rec(nil), v.recs...)
	sort.Slice(recs, func(i, j int) bool { return recs[i].s < recs[j].s })
	for i, x := range recs {
		if len(recs) > traceLines && i == traceLines/2 {
			fmt.Printf("    ... %d more\n", len(recs)-traceLines)
		}
		if len(recs) > traceLines && i >= traceLines/2 && i < len(recs)-traceLines/2 {
			continue
		}
		fmt.Printf("    %s\n", x)
	}
	if len(v.arrivals) > 0 {
		var s []string
		for i, a := range v.arrivals {
			if i == traceLines {
				s = append(s, "...")
				break
			}
			s = append(s, fmt.Sprintf("%.3f", a.Seconds()))
		}
		fmt.Printf("    upstream arrivals (s): %s\n", strings.Join(s, " "))
	}
	for _, f := range t.faults {
		a, b := f.window()
		if b+recoveryBound < v.from-2*time.Second || a > v.to+500*time.Millisecond {
			continue
		}
		for _, h := range t.affects(f) {
			if inGroups(h.group, v.groups) {
				fmt.Printf("    fault %s\n", f)
				break
			}
		}
	}
	for _, rl := range t.reloads {
		if rl.done >= v.from-2*time.Second && rl.at <= v.to && inGroups(rl.h.group, v.groups) {
			fmt.Printf("    reload of %s at %.3fs..%.3fs\n", rl.h.name, rl.at.Seconds(), rl.done.Seconds())
		}
	}
}

func inGroups(g *group, gs []*group) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}

// writeDump writes the run to the file -dump names: its faults, reloads
// and every answer, by the instant its request was sent.
func (t *topology) writeDump() error {
	f, err := os.Create(t.dump)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "seed %d\n", t.seed)
	for _, x := range t.faults {
		fmt.Fprintf(w, "fault %s\n", x)
	}
	for _, rl := range t.reloads {
		fmt.Fprintf(w, "reload of %s at %.3fs..%.3fs %s\n", rl.h.name, rl.at.Seconds(), rl.done.Seconds(), rl.err)
	}
	recs := t.rc.all()
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].s < recs[j].s })
	for _, x := range recs {
		fmt.Fprintln(w, x)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
