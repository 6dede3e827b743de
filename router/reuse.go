package router

import (
	"math"
	"sync"
)

// reuseAverage is the share of prompt tokens the backends answered they
// had cached (usage's cached_tokens), as a moving average weighted by
// tokens: the fleet's real reuse, which the kvmesh policy's spread term
// uses (Request.Reuse). It is what the backends say, not what the claims
// believe: on a fleet whose caches churn the claims match far more than
// is there.
type reuseAverage struct {
	mu             sync.Mutex
	prompt, cached float64 // decayed sums of tokens
}

// reuseEWMA is one answer's weight in the average at a router alone: the
// last ~128 answers count (reuseDecay is what it leaves to the sums
// before it).
const (
	reuseEWMA  = 1.0 / 128
	reuseDecay = 1 - reuseEWMA
)

// maxReuseEWMA caps reuseWeight: an average over fewer than ~16 of a
// node's own answers would swing with each long prompt.
const maxReuseEWMA = 1.0 / 16

// reuseWeight is one answer's weight at a node that routes share
// (Request.MeshShare) of its mesh's requests: reuseEWMA/share, at most
// maxReuseEWMA, so that the average spans the mesh's last ~128 answers,
// not the node's last 128 (8 nodes: the mesh's last ~1,000, a whole agent
// run, cold start included). The spread term reads it through r/(1-r),
// steep where agents' reuse lives (r 0.8: 4; 0.9: 9), so a node whose
// average trails the fleet's prices crowding at a fraction of what a lone
// router does, the same lag promptWeight removes from the average prompt.
func reuseWeight(share float64) float64 {
	if share > 0 && share < 1 {
		return min(reuseEWMA/share, maxReuseEWMA)
	}
	return reuseEWMA
}

// add counts one answer at weight w (reuseWeight).
func (a *reuseAverage) add(prompt, cached int64, w float64) {
	if prompt <= 0 {
		return
	}
	c := min(max(float64(cached), 0), float64(prompt))
	a.mu.Lock()
	a.prompt = a.prompt*(1-w) + float64(prompt)
	a.cached = a.cached*(1-w) + c
	a.mu.Unlock()
}

// share is the cached share in [0, 1], or -1 before any answer.
func (a *reuseAverage) share() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !(a.prompt > 0) || math.IsInf(a.prompt, 0) {
		return -1
	}
	return a.cached / a.prompt
}

// ObserveAnswer counts an answer's usage (prompt and cached tokens) in the
// router's estimate of the fleet's reuse (Request.Reuse) without a request
// of its own: for a router that mirrors others' traffic, such as a
// benchmark's shadow router (Shadow). A router counts its own answers
// already.
func (rt *Router) ObserveAnswer(promptTokens, cachedTokens int64) {
	rt.reuse.add(promptTokens, cachedTokens, reuseEWMA) // it sees every answer
}
