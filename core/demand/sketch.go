package demand

import "math"

// RelativeError is the sketch's accuracy: a value it reports (a quantile,
// the demand of a bucket) is within this fraction of a value it recorded.
const RelativeError = 0.02

// The sketch's range. Values below minValue count as minValue's bucket
// (a demand smaller than a hundredth of a cost unit per period), values
// above maxValue as maxValue's; both are far beyond a limit's useful
// range, and the exact sum and largest value are kept besides.
const (
	minValue = 1e-2
	maxValue = 1e8
)

// gamma is the ratio of a bucket's upper bound to its lower bound, such
// that a bucket's midpoint 2·γ^i/(γ+1) (times minValue) is within
// RelativeError of any value in it: (γ−1)/(γ+1) = RelativeError.
var (
	gamma    = (1 + RelativeError) / (1 - RelativeError)
	lnGamma  = math.Log(gamma)
	nBuckets = int(math.Ceil(math.Log(maxValue/minValue)/lnGamma)) + 1
)

// Sketch is a log-bucketed histogram of positive values in the manner of
// DDSketch (Masson, Rim and Lee, VLDB 2019): bucket i holds the values in
// (minValue·γ^(i−1), minValue·γ^i], so that every quantile it reports is
// within RelativeError of a recorded value of that rank; the last bucket
// holds everything above maxValue/γ, reported within the largest value
// recorded. Like DDSketch's dense store, it holds the counts of the
// buckets from its smallest value's to its largest's only: 8 bytes a
// bucket, about 1.4 KB for demands from 1 to 1,000 and 4.6 KB at most.
// Two sketches merge exactly by adding their counts. The zero Sketch is
// empty and ready to use; it is not safe for concurrent use.
type Sketch struct {
	counts []uint64 // counts[j] is bucket offset+j's
	offset int
	n      uint64  // values recorded
	sum    float64 // their exact sum
	max    float64 // the largest
}

// bucket returns the index of the bucket holding v.
func bucket(v float64) int {
	if v <= minValue {
		return 0
	}
	i := int(math.Ceil(math.Log(v/minValue) / lnGamma))
	if i >= nBuckets {
		return nBuckets - 1
	}
	return i
}

// bounds returns the lower (exclusive) and upper (inclusive) bounds of
// bucket i of s: bucket 0 holds everything up to minValue, the last
// everything above its lower bound, up to s's largest value.
func (s *Sketch) bounds(i int) (lo, hi float64) {
	hi = minValue * math.Pow(gamma, float64(i))
	if i == nBuckets-1 && s.max > hi {
		hi = s.max
	}
	if i == 0 {
		return 0, hi
	}
	return minValue * math.Pow(gamma, float64(i-1)), hi
}

// value is the value the sketch reports for bucket i: within
// RelativeError of every value in it, but for the last bucket, whose
// values above maxValue are reported as s's largest.
func (s *Sketch) value(i int) float64 {
	v := minValue * 2 * math.Pow(gamma, float64(i)) / (gamma + 1)
	if v > s.max || i == nBuckets-1 && s.max > maxValue {
		return s.max
	}
	return v
}

// Add records v, which must be positive.
func (s *Sketch) Add(v float64) {
	if !(v > 0) || math.IsInf(v, 0) {
		return
	}
	s.addCount(bucket(v), 1)
	s.n++
	s.sum += v
	if v > s.max {
		s.max = v
	}
}

// addCount adds c to bucket i's count, growing the store to hold it.
// (Fields are assigned one per statement: Yaegi v0.16.1 loses values in
// a tuple assignment of calls to fields.)
func (s *Sketch) addCount(i int, c uint64) {
	switch {
	case s.counts == nil:
		s.counts = make([]uint64, 1, 16)
		s.offset = i
	case i < s.offset:
		grown := make([]uint64, s.offset-i+len(s.counts))
		copy(grown[s.offset-i:], s.counts)
		s.counts = grown
		s.offset = i
	case i >= s.offset+len(s.counts):
		s.counts = append(s.counts, make([]uint64, i-s.offset-len(s.counts)+1)...)
	}
	s.counts[i-s.offset] += c
}

// Bucketing says how a Sketch buckets a value v, for a store that counts
// values in buckets of its own (redisstore.Demand's script): bucket 0 when
// v ≤ lo, else ⌈ln(v/lo) / lnGamma⌉, at most last. SketchOf turns such
// counts back into a Sketch.
func Bucketing() (lo, lnG float64, last int) { return minValue, lnGamma, nBuckets - 1 }

// SketchOf returns the Sketch of values counted in buckets as Bucketing
// says, counts[i] of them in bucket i, whose exact sum and largest value
// are sum and largest. Counts of buckets out of range are left out.
func SketchOf(counts map[int]uint64, sum, largest float64) Sketch {
	var s Sketch
	for i, c := range counts {
		if i >= 0 && i < nBuckets && c > 0 {
			s.addCount(i, c)
			s.n += c
		}
	}
	if s.n > 0 {
		s.sum = sum
		s.max = largest
	}
	return s
}

// Merge adds every value of o to s.
func (s *Sketch) Merge(o *Sketch) {
	if o.n == 0 {
		return
	}
	for j, c := range o.counts {
		if c != 0 {
			s.addCount(o.offset+j, c)
		}
	}
	s.n += o.n
	s.sum += o.sum
	if o.max > s.max {
		s.max = o.max
	}
}

// Count is the number of values recorded.
func (s *Sketch) Count() uint64 { return s.n }

// Sum is the exact sum of the values recorded.
func (s *Sketch) Sum() float64 { return s.sum }

// Quantile returns the value of rank q·(Count−1) among those recorded,
// within RelativeError (values above maxValue as the largest); q = 1
// returns the largest value exactly. It returns 0 for an empty sketch.
func (s *Sketch) Quantile(q float64) float64 {
	if s.n == 0 {
		return 0
	}
	if q >= 1 {
		return s.max
	}
	if q < 0 {
		q = 0
	}
	rank := uint64(q * float64(s.n-1))
	var seen uint64
	for j, c := range s.counts {
		seen += c
		if seen > rank {
			return s.value(s.offset + j)
		}
	}
	return s.max
}

// Over estimates how many of the values recorded exceed a, and by how
// much in total, with bounds: the values of the bucket holding a may lie
// on either side of it, so count's bounds differ by that bucket's count,
// and each value's excess is known within its bucket's width.
func (s *Sketch) Over(a float64) (count, excess Estimate) {
	if s.max <= a { // no value exceeds a
		return Estimate{}, Estimate{}
	}
	for j, c := range s.counts {
		if c == 0 {
			continue
		}
		i := s.offset + j
		lo, hi := s.bounds(i)
		n := float64(c)
		if v := s.value(i); v > a {
			count.Value += n
			excess.Value += n * (v - a)
		}
		if lo >= a {
			count.Low += n
			excess.Low += n * (lo - a)
		}
		if hi > a {
			count.High += n
			excess.High += n * (hi - a)
		}
	}
	return count, excess
}

// Estimate is a figure the sketch can only bound: its best value and the
// interval that holds the exact one.
type Estimate struct {
	Value float64 `json:"value"`
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
}

// share returns e as a share of d, to the hundredth of a percent (so the
// bounds hold the exact share to within that rounding); e unchanged when
// d is 0.
func (e Estimate) share(d float64) Estimate {
	if d == 0 {
		return e
	}
	return Estimate{Value: percent(e.Value / d), Low: percent(e.Low / d), High: percent(e.High / d)}
}

// percent rounds a share to the hundredth of a percent.
func percent(x float64) float64 { return math.Round(x*1e4) / 1e4 }
