package bench

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentileKnownValues(t *testing.T) {
	v := []float64{1, 2, 3, 4}
	for _, c := range []struct{ p, want float64 }{
		{0, 1}, {100, 4}, {50, 2.5}, {25, 1.75}, {90, 3.7}, {99, 3.97}, {-5, 1}, {150, 4},
	} {
		if got := Percentile(v, c.p); !near(got, c.want) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", v, c.p, got, c.want)
		}
	}
	// 1..100: p99 by R-7 is 99.01, p50 50.5.
	var h []float64
	for i := 1; i <= 100; i++ {
		h = append(h, float64(i))
	}
	if got := Percentile(h, 99); !near(got, 99.01) {
		t.Errorf("p99 of 1..100 = %v, want 99.01", got)
	}
	if got := Percentile(h, 50); !near(got, 50.5) {
		t.Errorf("p50 of 1..100 = %v, want 50.5", got)
	}
	if got := Percentile([]float64{7}, 90); got != 7 {
		t.Errorf("p90 of one value = %v, want 7", got)
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile of no values is not NaN")
	}
}

func TestCVKnownValues(t *testing.T) {
	// Mean 5, population standard deviation 2.
	if got := CV([]float64{2, 4, 4, 4, 5, 5, 7, 9}); !near(got, 0.4) {
		t.Errorf("CV = %v, want 0.4", got)
	}
	if got := CV([]float64{3, 3, 3}); got != 0 {
		t.Errorf("CV of equal values = %v, want 0", got)
	}
	// One of four backends did all the work: sqrt(n-1).
	if got := CV([]float64{0, 0, 0, 12}); !near(got, math.Sqrt(3)) {
		t.Errorf("CV of one busy backend of four = %v, want sqrt(3)", got)
	}
	if got := CV([]float64{0, 0}); got != 0 {
		t.Errorf("CV of no work = %v, want 0", got)
	}
	if !math.IsNaN(CV(nil)) {
		t.Error("CV of no values is not NaN")
	}
}

func TestSpreadOf(t *testing.T) {
	s := SpreadOf([]float64{0.3, 0.1, math.NaN(), 0.2})
	if s.N != 3 || !near(s.Median, 0.2) || s.Min != 0.1 || s.Max != 0.3 || !near(s.Q1, 0.15) || !near(s.Q3, 0.25) {
		t.Errorf("SpreadOf = %+v", s)
	}
	if z := SpreadOf(nil); z != (Spread{}) {
		t.Errorf("SpreadOf(nil) = %+v, want the zero Spread", z)
	}
}

func TestSummarizeLatency(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3}
	s := summarizeLatency(v)
	if s.N != 5 || s.P50 != 3 || s.Max != 5 || s.Mean != 3 || !near(s.P90, 4.6) || !near(s.P99, 4.96) {
		t.Errorf("summarizeLatency = %+v", s)
	}
	if z := summarizeLatency(nil); z != (LatencySummary{}) {
		t.Errorf("summarizeLatency(nil) = %+v, want zero", z)
	}
}
