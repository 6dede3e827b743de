package bench

import (
	"math"
	"slices"
)

// Percentile returns the p-th percentile (0 <= p <= 100) of sorted values
// by linear interpolation between the closest ranks (the "R-7" definition
// NumPy and most spreadsheets use): rank h = (n-1)*p/100, value
// v[floor h] + (h - floor h) * (v[floor h + 1] - v[floor h]). NaN for an
// empty slice. sorted must be in ascending order.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(p) {
		return math.NaN()
	}
	p = min(max(p, 0), 100)
	h := float64(n-1) * p / 100
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Mean returns the arithmetic mean (NaN for no values).
func Mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// CV returns the coefficient of variation of v: population standard
// deviation over mean. It measures load imbalance across backends: 0 when
// every backend did the same work, 1 when the spread is as large as the
// mean, sqrt(n-1) when one of n backends did everything. 0 when the mean is
// 0 (no work, no imbalance); NaN for no values.
func CV(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	m := Mean(v)
	if m == 0 {
		return 0
	}
	var ss float64
	for _, x := range v {
		d := x - m
		ss += d * d
	}
	return math.Sqrt(ss/float64(len(v))) / math.Abs(m)
}

// Spread summarises one figure over the repeats of an arm.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Q1 and Q3 are the 25th and 75th percentiles (Percentile's definition);
	// with three repeats they lie halfway between the median and the ends.
	Q1 float64 `json:"q1"`
	Q3 float64 `json:"q3"`
	N  int     `json:"n"`
}

// SpreadOf summarises values (any order; NaNs are ignored). With no values
// it is the zero Spread (N == 0).
func SpreadOf(values []float64) Spread {
	v := make([]float64, 0, len(values))
	for _, x := range values {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Spread{} // N == 0 says there is nothing (JSON cannot carry NaN)
	}
	slices.Sort(v)
	return Spread{
		Median: Percentile(v, 50),
		Min:    v[0],
		Max:    v[len(v)-1],
		Q1:     Percentile(v, 25),
		Q3:     Percentile(v, 75),
		N:      len(v),
	}
}

// LatencySummary is the distribution of one latency over a run's requests,
// in simulated seconds.
type LatencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
	N    int     `json:"n"`
}

// summarizeLatency sorts v in place and summarises it.
func summarizeLatency(v []float64) LatencySummary {
	if len(v) == 0 {
		return LatencySummary{} // N == 0 says there is nothing (JSON cannot carry NaN)
	}
	slices.Sort(v)
	return LatencySummary{
		P50:  Percentile(v, 50),
		P90:  Percentile(v, 90),
		P99:  Percentile(v, 99),
		Mean: Mean(v),
		Max:  v[len(v)-1],
		N:    len(v),
	}
}
