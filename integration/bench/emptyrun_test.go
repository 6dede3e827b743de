package bench

import (
	"testing"
	"time"
)

// A run in which no request succeeded has no latency to report: its TTFT
// and E2E summaries are empty (N 0, every field 0). Summarize must leave
// them out of the arm's spread, or an arm whose requests all failed would
// show a median TTFT of 0 s, the best of the table, and pass the floors
// that bound kvmesh's latency.
func TestSummarizeSkipsRunsWithoutLatencies(t *testing.T) {
	arm := Arm{Name: "kvmesh", Policy: "kvmesh", Nodes: 1}
	ok := func(ttft time.Duration) []Sample {
		return []Sample{{TTFT: ttft, E2E: 2 * ttft}}
	}
	failed := []Sample{{Err: "http-503"}, {Err: "transport"}}
	var runs []RunResult
	for _, s := range [][]Sample{failed, failed, ok(time.Second)} {
		r := RunResult{Arm: arm.Name}
		fillResult(&r, s, nil, time.Second, 1, func(i int) int { return i })
		runs = append(runs, r)
	}
	if runs[0].TTFT.N != 0 {
		t.Fatalf("a run without answers has %d TTFTs", runs[0].TTFT.N)
	}
	a := Summarize([]Arm{arm}, runs)[0]
	for name, sp := range map[string]Spread{"ttft p50": a.TTFTP50, "ttft p90": a.TTFTP90, "ttft p99": a.TTFTP99,
		"e2e p50": a.E2EP50, "e2e p99": a.E2EP99} {
		if sp.N != 1 || sp.Min == 0 {
			t.Errorf("%s: %+v, want the one run that measured it (the failed runs' empty summaries are not 0 s)", name, sp)
		}
	}
	if a.Errors.N != 3 || a.HitRate.N != 3 {
		t.Errorf("errors over %d runs, hit rate over %d: every run counts there", a.Errors.N, a.HitRate.N)
	}
}

// The paired comparison must not count a repeat in which kvmesh answered
// nothing as kvmesh being faster (a ratio of 0 over the other arm).
func TestPairedSkipsRepeatsWithoutLatencies(t *testing.T) {
	r := pairedReport([]float64{0.5, 0.5, 0.5}, []float64{0.4, 0.4, 0.4},
		[]float64{0.3, 0.3, 0.3}, []float64{0.4, 0.4, 0.4})
	for i := range r.Runs {
		run := &r.Runs[i]
		run.TTFT.N = 100
		if run.Arm == "kvmesh" && run.Repeat == 0 {
			run.TTFT = LatencySummary{} // every request of this run failed
		}
	}
	p := PairedAgainst(r)[0]
	if p.P50Faster != 2 || p.P99Faster+p.P99Slower != 0 || p.P50Ratio.N != 2 || p.P50Ratio.Min == 0 {
		t.Errorf("p50 faster %d (ratio %+v), p99 faster %d slower %d: the repeat without kvmesh latencies must not count",
			p.P50Faster, p.P50Ratio, p.P99Faster, p.P99Slower)
	}
	if p.N != 3 || p.HitAhead != 3 {
		t.Errorf("n %d, hit ahead %d: hit rates of every repeat still compare", p.N, p.HitAhead)
	}
}

// A kvmesh arm none of whose runs answered a request has no TTFT: the
// latency floors must be missed, not met with a ratio of 0.
func TestFloorsNeedMeasuredLatencies(t *testing.T) {
	arms := []Arm{{Name: "round_robin", Policy: "round_robin", Nodes: 1}, {Name: "kvmesh", Policy: "kvmesh", Nodes: 1}}
	var runs []RunResult
	for rep := range 3 {
		rr := RunResult{Arm: "round_robin", Repeat: rep}
		fillResult(&rr, []Sample{{TTFT: time.Second, E2E: time.Second}}, nil, time.Second, 1, func(i int) int { return i })
		km := RunResult{Arm: "kvmesh", Repeat: rep}
		fillResult(&km, []Sample{{Err: "http-502"}}, nil, time.Second, 1, func(i int) int { return i })
		runs = append(runs, rr, km)
	}
	r := &Report{Arms: Summarize(arms, runs), Runs: runs}
	for _, f := range CheckFloors(r) {
		if f.Name == "TTFT p50 vs round_robin" && f.Pass {
			t.Errorf("floor %q met (got %v) by an arm that answered nothing", f.Name, f.Got)
		}
	}
}
