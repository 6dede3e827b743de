package router

import (
	"math"
	"strconv"
)

// The worth of a trusted match's tail near the cache's edge
// (BeliefConfig.EdgeLearn).
//
// A trusted match is a claim with less than a capacity written after it:
// by the LRU model the backend still holds it. An engine's cache does not
// follow the model exactly (running requests' blocks are out of its LRU,
// how many varies with the load, and it evicts a prefix block by block), so
// what is still held falls smoothly as the distance nears the capacity. A
// prompt's claims are stamped one by one at each use, so the head of a
// match that other conversations keep using (a tenant's context, a system
// prompt) is stamped later than the tail only this conversation used:
// the head is safe while the tail ages. EdgeLearn prices the two apart:
// the blocks up to the backend's deepest claim with at most EdgeStart
// capacities written after it count in full, the rest at what answers
// taught about tails of the trusted match's distance (edgeBounds).

// edgeBounds are the upper ends of the ranges of a trusted match's distance
// whose tails learn a worth of their own, as fractions of the way from
// EdgeStart to the edge (one capacity); the last range has no upper end
// (a trusted match past the capacity: doubt_beyond above 1, or 0).
var edgeBounds = [...]float64{0.25, 0.5, 0.75, 1}

const edgeRanges = len(edgeBounds) + 1

// edgeSafe is the distance, in capacities, within which a claim is priced
// in full: EdgeStart with EdgeLearn on, else 0 (no such bound: the whole
// match is priced by trust).
func (c *BeliefConfig) edgeSafe() float64 {
	if !c.EdgeLearn {
		return 0
	}
	return c.EdgeStart
}

// edgeRange is the range of a trusted match with x capacities written after
// it.
func edgeRange(x float64, cfg *BeliefConfig) int {
	for i, f := range edgeBounds {
		if x <= cfg.EdgeStart+f*(1-cfg.EdgeStart) {
			return i
		}
	}
	return len(edgeBounds)
}

// edgeRangeLabel is range i's upper end in capacities, as a metric label
// ("+Inf" for the last).
func edgeRangeLabel(i int, cfg *BeliefConfig) string {
	if i >= len(edgeBounds) {
		return "+Inf"
	}
	return strconv.FormatFloat(cfg.EdgeStart+edgeBounds[i]*(1-cfg.EdgeStart), 'g', 3, 64)
}

// edgeWorth is what the tail of a trusted match with x capacities written
// after it is worth here: what its range learned, 1 (the LRU model's word)
// until an answer has taught it.
func (cb *cacheBelief) edgeWorth(x float64, cfg *BeliefConfig) float64 {
	if v := cb.edge[edgeRange(x, cfg)].Load(); v != 0 {
		return math.Float64frombits(v)
	}
	return 1
}

// learnEdge moves the worth of the range of x towards the share of a
// tail's blocks an answer found cached (0..1). The ranges are this node's:
// they are not part of the mesh's lessons.
func (cb *cacheBelief) learnEdge(share, x float64, cfg *BeliefConfig) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	i := edgeRange(x, cfg)
	cb.edge[i].Store(math.Float64bits(doubtStep(cb.edgeWorth(x, cfg), share, &cb.edgeN[i])))
}

// edgeCurveOf lists the worth of each range (nil with EdgeLearn off).
func (cb *cacheBelief) edgeCurveOf(cfg *BeliefConfig) []float64 {
	if !cfg.EdgeLearn {
		return nil
	}
	out := make([]float64, edgeRanges)
	for i := range out {
		if v := cb.edge[i].Load(); v != 0 {
			out[i] = math.Float64frombits(v)
		} else {
			out[i] = 1
		}
	}
	return out
}
