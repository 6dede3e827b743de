package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

// Ten answered requests of lengths 100..1000 (shuffled), two per fifth;
// an error and a request without usage are left out of every class.
func TestBySize(t *testing.T) {
	var samples []Sample
	for i, n := range []int{700, 100, 900, 300, 500, 200, 1000, 400, 600, 800} {
		// TTFT n µs of wall time; the longer of each pair is fully cached.
		s := Sample{Index: i, Status: 200, PromptTokens: n, TTFT: time.Duration(n) * time.Microsecond}
		if n%200 == 0 {
			s.CachedTokens = n
		}
		samples = append(samples, s)
	}
	samples = append(samples, Sample{Index: 10, Status: 500, Err: "http_500", PromptTokens: 50},
		Sample{Index: 11, Status: 200, TTFT: time.Second})
	cs := bySize(samples, 10)
	if len(cs) != SizeClasses {
		t.Fatalf("%d classes, want %d", len(cs), SizeClasses)
	}
	for k, c := range cs {
		lo, hi := 100*(2*k+1), 100*(2*k+2)
		wantP50 := 10 * float64(lo+hi) / 2 / 1e6 // the pair's mean, at time scale 10
		if c.MaxTokens != hi || c.N != 2 || math.Abs(c.TTFTP50-wantP50) > 1e-9 {
			t.Errorf("class %d: %+v, want max %d, 2 requests, p50 %v", k, c, hi, wantP50)
		}
		if want := float64(hi) / float64(lo+hi); math.Abs(c.Cached-want) > 1e-9 {
			t.Errorf("class %d: cached %v, want %v", k, c.Cached, want)
		}
	}
	if bySize(samples[:4], 1) != nil {
		t.Error("fewer requests than classes were classed")
	}
}

// The summary takes each class's median over the repeats, and the report
// writes one row per arm with a column per class.
func TestBySizeSummaryAndTable(t *testing.T) {
	run := func(arm string, p50 float64) RunResult {
		r := RunResult{Arm: arm, TTFT: LatencySummary{P50: p50, N: 1}}
		for k := range SizeClasses {
			r.BySize = append(r.BySize, SizeClass{MaxTokens: 1000 * (k + 1), N: 10, TTFTP50: p50 * float64(k+1), Cached: 0.1})
		}
		return r
	}
	arms := []Arm{{Name: "kvmesh", Policy: "kvmesh"}, {Name: "oracle", Policy: PolicyOracle}}
	runs := []RunResult{run("kvmesh", 0.1), run("kvmesh", 0.3), run("kvmesh", 0.2), run("oracle", 0.5)}
	r := &Report{Arms: Summarize(arms, runs), Runs: runs}
	km := r.Find("kvmesh")
	if len(km.BySize) != SizeClasses || math.Abs(km.BySize[1].TTFTP50.Median-0.4) > 1e-9 || km.BySize[4].MaxTokens.Median != 5000 {
		t.Fatalf("kvmesh by size %+v", km.BySize)
	}
	var buf bytes.Buffer
	ew := &errWriter{w: &buf}
	writeBySize(ew, r)
	if ew.err != nil {
		t.Fatal(ew.err)
	}
	for _, want := range []string{"| arm | ≤ 1000 | ≤ 2000 | ≤ 3000 | ≤ 4000 | ≤ 5000 |", "| kvmesh | 0.200 (10.0%) | 0.400 (10.0%) |", "| oracle | 0.500 (10.0%) |"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
	// A report from before the classes (no BySize) writes no table.
	buf.Reset()
	writeBySize(ew, &Report{Arms: Summarize(arms, []RunResult{{Arm: "kvmesh"}})})
	if buf.Len() != 0 {
		t.Errorf("a report without classes wrote %q", buf.String())
	}
}
