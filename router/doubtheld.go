package router

import (
	"math"
	"sync/atomic"
)

// doubtHeld learns how much of what only doubted claims cover a backend
// still holds, in prompt units, from the answers (BeliefConfig.
// DoubtHeldCap): a moving average over every backend's answers to
// requests that had a doubted claim at the backend they went to. A cache
// evicts a prefix tail first, so a doubted span holds at most a head of
// itself, whose length does not grow with the span's.
type doubtHeld struct {
	mean atomic.Uint64 // float64 bits of the average held units
	n    atomic.Uint64 // answers taken in
}

// doubtHeldEWMA is one answer's weight once the average has taken in
// enough: the last ~32 answers, as the doubted worth (doubtEWMA).
const doubtHeldEWMA = doubtEWMA

// learn takes in one answer that held units of a doubted span. Answers
// arrive on many goroutines; a lost update is one answer fewer in an
// average.
func (h *doubtHeld) learn(units float64) {
	if !(units >= 0) || math.IsInf(units, 0) {
		return
	}
	n := h.n.Add(1)
	cur := math.Float64frombits(h.mean.Load())
	w := max(doubtHeldEWMA, 1/float64(n))
	h.mean.Store(math.Float64bits(cur + w*(units-cur)))
}

// limit is the cap on a candidate's doubted worth (Candidate.HeldCap):
// the average held, at least the smallest positive float so that an
// average of 0 still caps; 0 (no cap) before any answer.
func (h *doubtHeld) limit() float64 {
	if h.n.Load() == 0 {
		return 0
	}
	return max(math.Float64frombits(h.mean.Load()), math.SmallestNonzeroFloat64)
}
