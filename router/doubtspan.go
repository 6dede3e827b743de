package router

import (
	"math"
	"strconv"
	"sync/atomic"
)

// The worth of a doubted span by its length (BeliefConfig.DoubtSpanCurve):
// the share of the blocks only a doubted claim covers that the answers
// showed still cached, learned apart for spans of up to 2,048, 8,192 and
// 32,768 tokens and longer ones, from every backend's answers (this
// node's). A cache evicts a prefix from its tail, so how much of a span
// survives depends on its length as much as on its distance past the
// edge, and how it depends on it is the workload's and the fleet's: on
// Mooncake 2x spans over 20,000 tokens held 0.5% of their blocks, at 3x
// 15%.

// spanBounds are the upper ends of the span lengths, in tokens, that learn
// a worth of their own; the last range has no upper end.
var spanBounds = [...]float64{2048, 8192, 32768}

const spanRanges = len(spanBounds) + 1

// spanRange is the range of a doubted span of tokens tokens.
func spanRange(tokens float64) int {
	for i, b := range spanBounds {
		if tokens <= b {
			return i
		}
	}
	return len(spanBounds)
}

// spanCurve is the worth learned per span range. Answers arrive on many
// goroutines; a lost update is one answer fewer in an average.
type spanCurve struct {
	w, n [spanRanges]atomic.Uint64 // float64 bits of the worth; answers taken in
}

// learn takes in an answer that found share (0..1) of a doubted span of
// tokens tokens cached: a plain mean over the range's first answers,
// then a moving average over its last ~32 (doubtEWMA).
func (c *spanCurve) learn(tokens, share float64) {
	if !(tokens > 0) || !(share >= 0 && share <= 1) {
		return
	}
	i := spanRange(tokens)
	cur := math.Float64frombits(c.w[i].Load())
	w := max(doubtEWMA, 1/float64(c.n[i].Add(1)))
	c.w[i].Store(math.Float64bits(cur + w*(share-cur)))
}

// worth is what a doubted span of tokens tokens is worth, and whether its
// range has been taught (ok false: no answer yet, price it as without the
// curve). A taught worth is at least minDoubtTrust.
func (c *spanCurve) worth(tokens float64) (float64, bool) { return c.worthOf(spanRange(tokens)) }

// worthOf is range i's worth, and whether an answer has taught it.
func (c *spanCurve) worthOf(i int) (float64, bool) {
	if c.n[i].Load() == 0 {
		return 0, false
	}
	return max(math.Float64frombits(c.w[i].Load()), minDoubtTrust), true
}

// spanRangeLabel is range i's upper end in tokens, as a metric label
// ("+Inf" for the last).
func spanRangeLabel(i int) string {
	if i >= len(spanBounds) {
		return "+Inf"
	}
	return strconv.FormatFloat(spanBounds[i], 'g', -1, 64)
}
