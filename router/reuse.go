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

// reuseDecay is the weight each answer leaves to the sums before it: the
// last ~128 answers count.
const reuseDecay = 1 - 1.0/128

// add counts one answer.
func (a *reuseAverage) add(prompt, cached int64) {
	if prompt <= 0 {
		return
	}
	c := min(max(float64(cached), 0), float64(prompt))
	a.mu.Lock()
	a.prompt = a.prompt*reuseDecay + float64(prompt)
	a.cached = a.cached*reuseDecay + c
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
	rt.reuse.add(promptTokens, cachedTokens)
}
