package bench

import "math"

// Paired comparisons: how sure a report is that kvmesh leads or trails
// another arm. The medians of the summary table hide how the arms moved
// together: every repeat runs each arm once, with fresh caches, in a
// rotated order, so the repeat's runs are a pair (or a set) measured under
// the same conditions, and the per-repeat difference is a finer measure
// than the difference of medians taken over runs that drift together. The
// sign test on those differences says whether a lead could be chance: with
// n repeats of which k go one way, the two-sided p-value is twice the
// binomial tail P(X <= min(k, n-k)) at p = 1/2 (ties are dropped). With 3
// repeats no lead can reach p < 0.25; 5 repeats all one way give 0.0625,
// 6 give 0.031.

// Paired is a kvmesh arm (Lead) measured against one other arm, repeat by
// repeat.
type Paired struct {
	Lead string
	Arm  string
	// N counts the repeats in which both arms have a run.
	N int
	// HitDiff is kvmesh's hit rate minus the arm's, per repeat (as a
	// share: 0.003 is 0.3 points); HitAhead, HitBehind count the repeats
	// with kvmesh above or below; HitP is the sign test's p-value.
	HitDiff             Spread
	HitAhead, HitBehind int
	HitP                float64
	// P50Ratio and P99Ratio are kvmesh's TTFT percentile over the arm's,
	// per repeat; *Faster count the repeats with kvmesh below, *Slower
	// above; *P the sign test's p-value.
	P50Ratio             Spread
	P50Faster, P50Slower int
	P50P                 float64
	P99Ratio             Spread
	P99Faster, P99Slower int
	P99P                 float64
}

// PairedAgainst compares the report's "kvmesh" arm with every other arm
// that ran in the same repeats, and each other arm of the kvmesh policy
// (kvmesh+evict, a mesh) with every arm of another policy: each variant
// has to beat the other routers by itself. Nil without a kvmesh arm.
func PairedAgainst(r *Report) []Paired {
	var out []Paired
	for _, lead := range r.Arms {
		if lead.Arm.Name != "kvmesh" && lead.Arm.Policy != "kvmesh" {
			continue
		}
		for _, a := range r.Arms {
			if a.Arm.Name == lead.Arm.Name || lead.Arm.Name != "kvmesh" && (a.Arm.Name == "kvmesh" || a.Arm.Policy == "kvmesh") {
				continue
			}
			if p, ok := pairRuns(r.Runs, lead.Arm.Name, a.Arm.Name); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// pairRuns compares arm lead with arm other over the repeats both ran in.
func pairRuns(runs []RunResult, lead, other string) (Paired, bool) {
	byRepeat := map[int]*RunResult{}
	for i := range runs {
		if run := &runs[i]; run.Arm == lead {
			byRepeat[run.Repeat] = run
		}
	}
	p := Paired{Lead: lead, Arm: other}
	var hit, p50, p99 []float64
	for i := range runs {
		run := &runs[i]
		km := byRepeat[run.Repeat]
		if run.Arm != other || km == nil {
			continue
		}
		p.N++
		d := km.HitRate - run.HitRate
		hit = append(hit, d)
		tally(d > 0, d < 0, &p.HitAhead, &p.HitBehind)
		// A percentile of 0 is a run that answered nothing (an empty
		// summary): no ratio, on either side.
		if run.TTFT.P50 > 0 && km.TTFT.P50 > 0 {
			x := km.TTFT.P50 / run.TTFT.P50
			p50 = append(p50, x)
			tally(x < 1, x > 1, &p.P50Faster, &p.P50Slower)
		}
		if run.TTFT.P99 > 0 && km.TTFT.P99 > 0 {
			x := km.TTFT.P99 / run.TTFT.P99
			p99 = append(p99, x)
			tally(x < 1, x > 1, &p.P99Faster, &p.P99Slower)
		}
	}
	if p.N == 0 {
		return p, false
	}
	p.HitDiff, p.P50Ratio, p.P99Ratio = SpreadOf(hit), SpreadOf(p50), SpreadOf(p99)
	p.HitP = SignTestP(p.HitAhead, p.HitBehind)
	p.P50P = SignTestP(p.P50Faster, p.P50Slower)
	p.P99P = SignTestP(p.P99Faster, p.P99Slower)
	return p, true
}

// tally counts one repeat as a lead (up), a deficit (down) or a tie.
func tally(up, down bool, ups, downs *int) {
	if up {
		*ups++
	}
	if down {
		*downs++
	}
}

// SignTestP is the two-sided sign test's p-value for k results one way
// and m the other (ties already dropped): 2 * P(X <= min(k, m)) for X
// binomial(k+m, 1/2), at most 1; 1 when k+m is 0.
func SignTestP(k, m int) float64 {
	n := k + m
	if n == 0 {
		return 1
	}
	lo := min(k, m)
	// Sum C(n, i) / 2^n for i <= lo, in logs to stay finite for any n.
	var tail float64
	lg, _ := math.Lgamma(float64(n + 1))
	for i := 0; i <= lo; i++ {
		li, _ := math.Lgamma(float64(i + 1))
		lni, _ := math.Lgamma(float64(n - i + 1))
		tail += math.Exp(lg - li - lni - float64(n)*math.Ln2)
	}
	return min(2*tail, 1)
}

// writePaired writes the paired comparison table.
func writePaired(ew *errWriter, ps []Paired) {
	if len(ps) == 0 {
		return
	}
	p := ew.printf
	p("kvmesh against each arm, and each other kvmesh arm against each arm of another policy, repeat by repeat (each repeat ran every arm once with fresh caches, so its runs are compared with each other): ")
	p("the difference in hit rate (points) and the ratio of TTFT percentiles, median (min–max) over the repeats; ")
	p("*ahead* / *behind* count the repeats kvmesh led or trailed, and *p* is the two-sided sign test on them: ")
	p("below 0.05 the lead (or the deficit) is unlikely to be chance; with 3 repeats no result can get there.\n\n")
	p("| kvmesh arm | arm | repeats | hit rate, kvmesh - arm | ahead / behind | p | TTFT p50, kvmesh / arm | faster / slower | p | TTFT p99, kvmesh / arm | faster / slower | p |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range ps {
		p("| %s | %s | %d | %+.2f (%+.2f to %+.2f) | %d / %d | %.2g | %.3f (%.3f–%.3f) | %d / %d | %.2g | %.3f (%.3f–%.3f) | %d / %d | %.2g |\n",
			x.Lead, x.Arm, x.N, 100*x.HitDiff.Median, 100*x.HitDiff.Min, 100*x.HitDiff.Max, x.HitAhead, x.HitBehind, x.HitP,
			x.P50Ratio.Median, x.P50Ratio.Min, x.P50Ratio.Max, x.P50Faster, x.P50Slower, x.P50P,
			x.P99Ratio.Median, x.P99Ratio.Min, x.P99Ratio.Max, x.P99Faster, x.P99Slower, x.P99P)
	}
	p("\n")
}
