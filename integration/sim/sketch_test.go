package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLatencySketchQuantilesWithinHalfABucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r sketchRecorder
	vals := make([]float64, 20000)
	for i := range vals {
		vals[i] = math.Exp(rng.NormFloat64()*1.5 - 1) // 0.002 s to 100 s or so
		r.observe(vals[i])
	}
	slices.Sort(vals)
	s := r.snapshot()
	if s.N() != uint64(len(vals)) {
		t.Fatalf("N %d, want %d", s.N(), len(vals))
	}
	for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 1} {
		rank := max(int(math.Ceil(q*float64(len(vals)))), 1)
		exact := vals[rank-1]
		if got := s.Quantile(q); math.Abs(got/exact-1) > 0.0051 {
			t.Errorf("q %v: %v, exact %v (off by %.2f%%)", q, got, exact, 100*math.Abs(got/exact-1))
		}
	}
}

func TestLatencySketchEdges(t *testing.T) {
	var empty LatencySketch
	if empty.N() != 0 || empty.Quantile(0.5) != 0 {
		t.Fatalf("empty sketch: N %d, p50 %v", empty.N(), empty.Quantile(0.5))
	}
	var r sketchRecorder
	for _, v := range []float64{math.NaN(), -1, 0, 1e-9, 1e9, math.Inf(1)} {
		r.observe(v) // never panics: below sketchMin counts in the first bucket, beyond the range in the last
	}
	s := r.snapshot()
	if s.N() != 6 || s.Counts[0] != 4 || s.Counts[sketchBuckets-1] != 2 {
		t.Fatalf("N %d, first bucket %d, last %d; want 6, 4, 2", s.N(), s.Counts[0], s.Counts[sketchBuckets-1])
	}
	if q := s.Quantile(0.5); q > 2*sketchMin {
		t.Errorf("p50 of four tiny and two huge: %v, want about %v", q, sketchMin)
	}
}

func TestLatencySketchAddMerges(t *testing.T) {
	var a, b sketchRecorder
	for i := range 100 {
		a.observe(0.1) // the lower half
		b.observe(float64(i+1) * 10)
	}
	sa, sb := a.snapshot(), b.snapshot()
	sa.Add(&sb)
	if sa.N() != 200 {
		t.Fatalf("merged N %d, want 200", sa.N())
	}
	if p := sa.Quantile(0.5); math.Abs(p/0.1-1) > 0.006 {
		t.Errorf("merged p50 %v, want 0.1 (the 100th of 200)", p)
	}
	if p := sa.Quantile(0.5025); math.Abs(p/10-1) > 0.006 {
		t.Errorf("merged q 0.5025 %v, want 10 (the 101st is b's first)", p)
	}
}

func TestStatsTTFTCountsWhatTheHistogramCounts(t *testing.T) {
	in, srv := startServer(t, nil)
	for i := range 3 {
		chat(t, srv.URL, chatBody(t, 4, nil, msg{"user", words(string(rune('a'+i)), 200)}))
	}
	n, sum := histogram(t, in.Registry(), "vllm:time_to_first_token_seconds")
	st := in.Stats()
	if n != 3 || st.TTFT.N() != n {
		t.Fatalf("histogram count %d, sketch N %d; want 3 each", n, st.TTFT.N())
	}
	// Three prompts of the same length on an idle engine: the median is
	// within a bucket of the mean.
	if p := st.TTFT.Quantile(0.5); math.Abs(p/(sum/3)-1) > 0.25 {
		t.Errorf("sketch p50 %v, histogram mean %v", p, sum/3)
	}
}
