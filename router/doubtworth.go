package router

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
)

// The worth of a doubted claim (BeliefConfig.DoubtTrust, DoubtLearn,
// DoubtCurve, DoubtPool): the share of a doubted claim's blocks that the
// answers showed were still cached, learned per backend and, with
// DoubtCurve, per range of distance past the edge.

// doubtBounds are the upper ends of the ranges of distance past the edge
// whose doubted claims learn a worth of their own (BeliefConfig.DoubtCurve),
// in multiples of DoubtBeyond; the last range has no upper end.
var doubtBounds = [...]float64{1.25, 1.5, 2, 3}

const doubtRanges = len(doubtBounds) + 1

// doubtRangeLabel is range i's upper end in capacities, as a metric label
// ("+Inf" for the last).
func doubtRangeLabel(i int, cfg *BeliefConfig) string {
	if i >= len(doubtBounds) {
		return "+Inf"
	}
	return strconv.FormatFloat(doubtBounds[i]*cfg.DoubtBeyond, 'g', -1, 64)
}

// doubtRange is the range of a claim with x capacities written after it.
func doubtRange(x float64, cfg *BeliefConfig) int {
	for i, b := range doubtBounds {
		if x <= b*cfg.DoubtBeyond {
			return i
		}
	}
	return len(doubtBounds)
}

// doubtEWMA weighs one answer in a backend's learned doubt trust once it
// has taken in enough; until then the trust is the mean of its answers
// and of the starting worth counted as doubtPrior answers, so that a few
// answers already move it most of the way: from 0.5, an average weighted
// 1/32 from the first answer needs 51 refutations to fall to 0.1, and on
// customers (4% of doubted claims held) a backend sees fewer answers with
// a doubted claim than that in much of a run, routing the meantime on a
// worth of 0.2-0.5.
//
// minDoubtTrust keeps the worth above 0, which reads as "nothing learned
// yet". It was 0.02, to keep a backend whose doubted claims all failed
// lately from ignoring them for good; but an answer teaches the worth
// whatever drew its request to a holder of a doubted claim (its trusted
// match or its load draw one in eight there when doubted claims count for
// nothing), so they are never ignored for good, and at 0.02 a doubted
// span of 8,000 tokens still priced 2,700 tokens of prefill saved (at
// cache_weight 16) on a trace where doubted claims hold nothing. At 0.001,
// with the learning counted past doubtFloor (kvmesh arm, 8 backends, runs
// alternating with 0.02 and the old floor; medians): Mooncake 2x, 5 pairs:
// TTFT p90 1.925 against 1.967 s (faster in 5 of 5), p99 5.76 against
// 5.80 s, hit rate 14.54% against 14.81% (ahead in 2); customers, 3 pairs:
// 50.1% against 50.2%, p99 1.356 against 1.358 s; agent, 3 pairs: 85.1%
// against 85.0%, p99 6.6 against 9.9 s (faster in 3). Ignoring doubted
// claims altogether (belief.doubt_trust 0) drew Mooncake 2x's p90 to
// 1.84-1.86 s against 1.95-1.99 s (8 of 8 pairs) but cost customers 1.3
// points of hit rate (48.9% against 50.2%, 3 of 3).
const (
	doubtEWMA     = 1.0 / 32
	doubtPrior    = 2
	minDoubtTrust = 0.001
)

// doubtTrust is what a doubted claim's blocks are worth at this backend.
func (cb *cacheBelief) doubtTrust(cfg *BeliefConfig) float64 {
	if cfg.DoubtTrust == 0 || !cfg.DoubtLearn {
		return cfg.DoubtTrust
	}
	if v := cb.doubt.Load(); v != 0 {
		return math.Float64frombits(v)
	}
	return cfg.DoubtTrust
}

// worthAt is what the doubted blocks of a claim with x capacities written
// after it are worth here: with DoubtCurve, what its range learned (the
// backend's one worth until an answer has taught it), else doubtTrust.
func (cb *cacheBelief) worthAt(x float64, cfg *BeliefConfig) float64 {
	if !curveOn(cfg) {
		return cb.doubtTrust(cfg)
	}
	return cb.rangeWorth(doubtRange(x, cfg), cfg)
}

// curveOn says whether doubted claims learn a worth per range.
func curveOn(cfg *BeliefConfig) bool { return cfg.DoubtCurve && cfg.DoubtTrust != 0 && cfg.DoubtLearn }

// rangeWorth is range i's learned worth (the fleet's with DoubtPool), the
// backend's one worth until an answer has taught it.
func (cb *cacheBelief) rangeWorth(i int, cfg *BeliefConfig) float64 {
	if w := cb.curveFor(cfg).worth(i); w > 0 {
		return w
	}
	return cb.doubtTrust(cfg)
}

// curveFor is the curve this backend's doubted claims are priced on and
// teach: the fleet's with DoubtPool, else its own.
func (cb *cacheBelief) curveFor(cfg *BeliefConfig) *doubtCurve {
	if cfg.DoubtPool && cb.pool != nil {
		return cb.pool
	}
	return &cb.curve
}

// doubtCurve is a worth learned per range of distance past the edge
// (BeliefConfig.DoubtCurve): one backend's, or with DoubtPool the fleet's,
// which every backend's answers teach. Learners hold mu; the request
// path loads the atomics.
type doubtCurve struct {
	mu   sync.Mutex
	w, n [doubtRanges]atomic.Uint64 // float64 bits of the worth (0: untaught); answers taken in
}

// worth is range i's learned worth (0: untaught).
func (c *doubtCurve) worth(i int) float64 { return math.Float64frombits(c.w[i].Load()) }

// learn moves range i's worth towards share by one answer, from start
// while the range is untaught.
func (c *doubtCurve) learn(i int, start, share float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.worth(i); w > 0 {
		start = w
	}
	c.w[i].Store(math.Float64bits(doubtStep(start, share, &c.n[i])))
}

// doubtStep moves the worth cur towards share by one answer, the n-th
// (counted in n) that taught it: a mean with the starting worth counted
// as doubtPrior answers, then a moving average; kept in [minDoubtTrust, 1].
func doubtStep(cur, share float64, n *atomic.Uint64) float64 {
	w := max(doubtEWMA, 1/float64(n.Add(1)+doubtPrior))
	return min(max(cur+w*(share-cur), minDoubtTrust), 1)
}

// learnDoubt moves the learned doubt worth, and with DoubtCurve the worth
// of the range of x (capacities written after the claim), towards what an
// answer showed of the doubted blocks they price: the share of them that
// were cached (0..1). It stamps the lesson at nowMs (lesson.go; unstamped
// leaves the stamp alone).
func (cb *cacheBelief) learnDoubt(share, x float64, cfg *BeliefConfig, nowMs int64) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if curveOn(cfg) {
		cb.curveFor(cfg).learn(doubtRange(x, cfg), cb.doubtTrust(cfg), share)
	}
	cb.doubt.Store(math.Float64bits(doubtStep(cb.doubtTrust(cfg), share, &cb.doubtN)))
	cb.stampLocked(nowMs)
}

// curveOf lists the worth of each range (BeliefConfig.DoubtCurve; nil
// when off).
func (cb *cacheBelief) curveOf(cfg *BeliefConfig) []float64 {
	if !curveOn(cfg) {
		return nil
	}
	out := make([]float64, doubtRanges)
	for i := range out {
		out[i] = cb.rangeWorth(i, cfg)
	}
	return out
}
