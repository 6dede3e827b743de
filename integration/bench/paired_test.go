package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestSignTestP(t *testing.T) {
	for _, c := range []struct {
		k, m int
		want float64
	}{
		{0, 0, 1},
		{3, 0, 0.25},
		{0, 3, 0.25},
		{5, 0, 0.0625},
		{6, 0, 0.03125},
		{8, 1, 2 * 10.0 / 512},
		{2, 2, 1},
		{1, 4, 2 * 6.0 / 32},
	} {
		if got := SignTestP(c.k, c.m); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("SignTestP(%d, %d) = %v, want %v", c.k, c.m, got, c.want)
		}
	}
}

// pairedReport has kvmesh and one other arm over the given repeats.
func pairedReport(kmHit, otherHit, kmP50, otherP50 []float64) *Report {
	r := &Report{Arms: []ArmSummary{{Arm: Arm{Name: "kvmesh"}}, {Arm: Arm{Name: "sglang_cache_aware"}}}}
	for i := range kmHit {
		r.Runs = append(r.Runs,
			RunResult{Arm: "kvmesh", Repeat: i, HitRate: kmHit[i], TTFT: LatencySummary{P50: kmP50[i], P99: 1}},
			RunResult{Arm: "sglang_cache_aware", Repeat: i, HitRate: otherHit[i], TTFT: LatencySummary{P50: otherP50[i], P99: 1}})
	}
	return r
}

func TestPairedAgainst(t *testing.T) {
	// kvmesh trails on hit rate in 5 of 6 repeats, by a little each time,
	// while its medians over the repeats would be close; it is faster at
	// p50 in 3 and slower in 3; p99 ties throughout.
	r := pairedReport(
		[]float64{0.500, 0.498, 0.503, 0.501, 0.499, 0.502},
		[]float64{0.503, 0.501, 0.502, 0.504, 0.502, 0.505},
		[]float64{0.3, 0.3, 0.3, 0.5, 0.5, 0.5},
		[]float64{0.4, 0.4, 0.4, 0.4, 0.4, 0.4})
	ps := PairedAgainst(r)
	if len(ps) != 1 {
		t.Fatalf("got %d comparisons, want 1", len(ps))
	}
	p := ps[0]
	if p.Arm != "sglang_cache_aware" || p.N != 6 {
		t.Fatalf("arm %q n %d", p.Arm, p.N)
	}
	if p.HitAhead != 1 || p.HitBehind != 5 || math.Abs(p.HitP-2*7.0/64) > 1e-12 {
		t.Errorf("hit: ahead %d behind %d p %v", p.HitAhead, p.HitBehind, p.HitP)
	}
	if math.Abs(p.HitDiff.Median-(-0.003)) > 1e-9 || math.Abs(p.HitDiff.Max-0.001) > 1e-9 {
		t.Errorf("hit diff %+v", p.HitDiff)
	}
	if p.P50Faster != 3 || p.P50Slower != 3 || p.P50P != 1 {
		t.Errorf("p50: faster %d slower %d p %v", p.P50Faster, p.P50Slower, p.P50P)
	}
	if p.P99Faster != 0 || p.P99Slower != 0 || p.P99Ratio.Median != 1 {
		t.Errorf("p99 ties: faster %d slower %d ratio %v", p.P99Faster, p.P99Slower, p.P99Ratio.Median)
	}

	var buf bytes.Buffer
	ew := &errWriter{w: &buf}
	writePaired(ew, ps)
	if ew.err != nil {
		t.Fatal(ew.err)
	}
	if row := "| kvmesh | sglang_cache_aware | 6 | -0.30 (-0.30 to +0.10) | 1 / 5 | 0.22 |"; !strings.Contains(buf.String(), row) {
		t.Errorf("table lacks %q:\n%s", row, buf.String())
	}
}

func TestPairedAgainstNeedsKVMeshAndCommonRepeats(t *testing.T) {
	if PairedAgainst(&Report{Arms: []ArmSummary{{Arm: Arm{Name: "round_robin"}}}}) != nil {
		t.Error("a report without a kvmesh arm got comparisons")
	}
	r := pairedReport([]float64{0.5}, []float64{0.4}, []float64{1}, []float64{1})
	r.Runs[1].Repeat = 7 // the other arm's only run is in a repeat kvmesh has none in
	if ps := PairedAgainst(r); len(ps) != 0 {
		t.Errorf("unpaired runs were compared: %+v", ps)
	}
}

// Every arm of the kvmesh policy is paired with the arms of other
// policies; only "kvmesh" itself is paired with its variants too.
func TestPairedAgainstEveryKVMeshArm(t *testing.T) {
	arms := []Arm{{Name: "kvmesh", Policy: "kvmesh"}, {Name: "kvmesh+evict", Policy: "kvmesh", Evictions: true},
		{Name: "oracle", Policy: PolicyOracle}, {Name: "round_robin", Policy: "round_robin"}}
	r := &Report{}
	for i, a := range arms {
		r.Arms = append(r.Arms, ArmSummary{Arm: a})
		for rep := range 2 {
			r.Runs = append(r.Runs, RunResult{Arm: a.Name, Repeat: rep, HitRate: 0.1 * float64(i+1), TTFT: LatencySummary{P50: 1, P99: 2, N: 1}})
		}
	}
	var got []string
	for _, p := range PairedAgainst(r) {
		got = append(got, p.Lead+" / "+p.Arm)
		if p.N != 2 {
			t.Errorf("%s / %s: %d repeats, want 2", p.Lead, p.Arm, p.N)
		}
	}
	want := []string{"kvmesh / kvmesh+evict", "kvmesh / oracle", "kvmesh / round_robin", "kvmesh+evict / oracle", "kvmesh+evict / round_robin"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("pairs %q, want %q", got, want)
	}
	r.Arms = r.Arms[1:] // without "kvmesh": its variant still leads
	if ps := PairedAgainst(r); len(ps) != 2 || ps[0].Lead != "kvmesh+evict" || ps[1].Arm != "round_robin" {
		t.Fatalf("without kvmesh: %+v", ps)
	}
}
