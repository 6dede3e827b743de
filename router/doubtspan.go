package router

import (
	"math"
	"strconv"
	"sync/atomic"
)

// The worth of a doubted span by its distance past the edge and its
// length (BeliefConfig.DoubtSpanCurve): the share of the blocks a doubted
// claim covers beyond the trusted match (a near claim's, then the far
// claim's beyond it) that the answers showed still cached, learned apart
// for each of DoubtCurve's distance ranges and spans of up to 2,048, 8,192
// and 32,768 tokens and longer ones, from every backend's answers (this
// node's). A cache evicts a prefix from its tail, so how much of a span
// survives depends on its length as well as its distance, and how is the
// workload's and the fleet's: on Mooncake 2x spans over 20,000 tokens held
// 0.5% of their blocks at every distance, at 3x 15%, mostly just past
// the edge.

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

// spanCurve is the worth learned per distance range and span range.
// Answers arrive on many goroutines; a lost update is one answer fewer in
// an average.
type spanCurve struct {
	w, n [doubtRanges][spanRanges]atomic.Uint64 // float64 bits of the worth; answers taken in
}

// learn takes in an answer that found share (0..1) of a doubted span of
// tokens tokens, in distance range d, cached: a plain mean over the
// cell's first answers, then a moving average over its last ~32
// (doubtEWMA).
func (c *spanCurve) learn(d int, tokens, share float64) {
	if d < 0 || d >= doubtRanges || !(tokens > 0) || !(share >= 0 && share <= 1) {
		return
	}
	i := spanRange(tokens)
	cur := math.Float64frombits(c.w[d][i].Load())
	w := max(doubtEWMA, 1/float64(c.n[d][i].Add(1)))
	c.w[d][i].Store(math.Float64bits(cur + w*(share-cur)))
}

// worth is what a doubted span of tokens tokens in distance range d is
// worth, and whether its cell has been taught (ok false: no answer yet,
// price it as without the curve). A taught worth is at least
// minDoubtTrust.
func (c *spanCurve) worth(d int, tokens float64) (float64, bool) {
	if d < 0 || d >= doubtRanges || !(tokens > 0) {
		return 0, false
	}
	return c.worthOf(d, spanRange(tokens))
}

// worthOf is cell (d, i)'s worth, and whether an answer has taught it.
func (c *spanCurve) worthOf(d, i int) (float64, bool) {
	if c.n[d][i].Load() == 0 {
		return 0, false
	}
	return max(math.Float64frombits(c.w[d][i].Load()), minDoubtTrust), true
}

// spanRangeLabel is range i's upper end in tokens, as a metric label
// ("+Inf" for the last).
func spanRangeLabel(i int) string {
	if i >= len(spanBounds) {
		return "+Inf"
	}
	return strconv.FormatFloat(spanBounds[i], 'g', -1, 64)
}
