package router

import (
	"math"
	"sync"
	"sync/atomic"
)

// reuseAverage is the share of prompt tokens the backends answered they
// had cached (usage's cached_tokens), as a moving average weighted by
// tokens: the fleet's real reuse, which the kvmesh policy's spread term
// uses (Request.Reuse). It is what the backends say, not what the claims
// believe: on a fleet whose caches churn the claims match far more than
// is there.
//
// In a mesh it averages the mesh's answers, not only this node's: the
// peers' answer totals arrive on the load channel (PeerAnswers), and each
// increase is folded in as that many answers (fold), so that every node
// reads what one router seeing all the answers would.
type reuseAverage struct {
	mu             sync.Mutex
	prompt, cached float64 // decayed sums of tokens
	// peers is the peers' totals folded in so far; folded says the first
	// reading was taken (it is a baseline, not news: a node that joins a
	// mesh must not take its peers' whole past for their last answers).
	peers  answerTotals
	folded bool
}

// answerTotals counts answers: how many, and their prompt and cached
// tokens.
type answerTotals struct{ n, prompt, cached uint64 }

// reuseEWMA is one answer's weight in the average: the last ~128 answers
// count (of the mesh's when the peers' answers are folded in).
const reuseEWMA = 1.0 / 128

// maxReuseEWMA caps reuseWeight: an average over fewer than ~16 of a
// node's own answers would swing with each long prompt.
const maxReuseEWMA = 1.0 / 16

// reuseWeight is one answer's weight at a node that routes share
// (Request.MeshShare) of its mesh's requests but hears none of its peers'
// answers (peers of an earlier release): reuseEWMA/share, at most
// maxReuseEWMA, so that the average spans about the mesh's last ~128
// answers rather than the node's last 128 (8 nodes: the mesh's last ~1,000,
// a whole agent run, cold start included). The spread term reads it through
// r/(1-r), steep where agents' reuse lives (r 0.8: 4; 0.9: 9).
func reuseWeight(share float64) float64 { return perShare(reuseEWMA, maxReuseEWMA, share) }

// add counts one answer at weight w (reuseEWMA, or reuseWeight).
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

// fold counts the peers' answers since the last fold, given their totals
// now, and returns the share after it: n more answers age the sums as n
// answers of this node's would, and add their tokens. The first call only
// takes the baseline. Totals that went back (they never should) are taken
// as a new baseline.
func (a *reuseAverage) fold(peers answerTotals) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	last := a.peers
	a.peers = peers
	switch {
	case !a.folded:
		a.folded = true
	case peers.n > last.n && peers.prompt >= last.prompt && peers.cached >= last.cached:
		decay := math.Pow(1-reuseEWMA, float64(peers.n-last.n))
		dp := float64(peers.prompt - last.prompt)
		a.prompt = a.prompt*decay + dp
		a.cached = a.cached*decay + min(float64(peers.cached-last.cached), dp)
	}
	return a.shareLocked()
}

// share is the cached share in [0, 1], or -1 before any answer.
func (a *reuseAverage) share() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.shareLocked()
}

func (a *reuseAverage) shareLocked() float64 {
	if !(a.prompt > 0) || math.IsInf(a.prompt, 0) {
		return -1
	}
	return a.cached / a.prompt
}

// PeerAnswers is a PeerLoad that also carries the peers' answer totals
// (mesh.Node implements it).
type PeerAnswers interface {
	// PeerAnswers returns how many answers the other nodes, present and
	// departed, have counted and their prompt and cached tokens. They never
	// decrease.
	PeerAnswers() (n, prompt, cached uint64)
}

// answerCounters are this node's answer totals (LocalAnswers).
type answerCounters struct{ n, prompt, cached atomic.Uint64 }

// LocalAnswers returns how many answers this router has counted since it
// started and their prompt and cached tokens, for the mesh's load channel.
func (rt *Router) LocalAnswers() (n, prompt, cached uint64) {
	return rt.answers.n.Load(), rt.answers.prompt.Load(), rt.answers.cached.Load()
}

// peerTotals reads the peers' answer totals; ok is false when the peers
// send none (no mesh, or peers of an earlier release).
func (rt *Router) peerTotals() (t answerTotals, ok bool) {
	if rt.peerAns == nil {
		return t, false
	}
	t.n, t.prompt, t.cached = rt.peerAns.PeerAnswers()
	return t, t.n > 0
}

// observeReuse counts one of this router's answers: in its totals, and in
// the reuse average after the peers' answers so far, at one answer's weight
// of the mesh's when the peers send theirs, else at reuseWeight.
func (rt *Router) observeReuse(prompt, cached int64) {
	if prompt <= 0 {
		return
	}
	c := min(max(cached, 0), prompt)
	rt.answers.n.Add(1)
	rt.answers.prompt.Add(uint64(prompt))
	rt.answers.cached.Add(uint64(c))
	w := reuseWeight(rt.meshShare())
	if t, ok := rt.peerTotals(); ok {
		rt.reuse.fold(t)
		w = reuseEWMA
	}
	rt.reuse.add(prompt, c, w)
}

// plausibleUsage bounds the weight of an answer's usage (prompt and cached
// tokens) in the reuse average by the size of its prompt: at most
// unitsPerTokenBand times the tokens units (the prompt's length) make at
// the router's units-per-token estimate upt, the cached count scaled
// down with it (its share kept). The average is weighted by tokens, and
// the count is the backend's word: one answer of a buggy or hostile
// backend claiming prompt_tokens 2^52 for a prompt of a few KB would
// otherwise outweigh the last ~128 answers by ten orders of magnitude and
// hold the fleet's reuse at 0 (or 1, all cached) for thousands of answers,
// switching the spread term and the reuse gates with it. Unchanged
// without a prompt to compare with (units 0).
func plausibleUsage(prompt, cached int64, units int, upt float64) (int64, int64) {
	if units <= 0 || !(upt > 0) || math.IsInf(upt, 0) || prompt <= 0 {
		return prompt, cached
	}
	limit := math.Ceil(float64(units) * unitsPerTokenBand / upt)
	if float64(prompt) <= limit {
		return prompt, cached
	}
	share := float64(min(max(cached, 0), prompt)) / float64(prompt)
	return int64(limit), int64(share * limit)
}

// reuseShare is Request.Reuse: the reuse average with the peers' latest
// answers folded in (one lock on the request path).
func (rt *Router) reuseShare() float64 {
	if rt.peerAns == nil {
		return rt.reuse.share()
	}
	t, _ := rt.peerTotals()
	return rt.reuse.fold(t)
}

// ObserveAnswer counts an answer's usage (prompt and cached tokens) in the
// router's estimate of the fleet's reuse (Request.Reuse) without a request
// of its own: for a router that mirrors others' traffic, such as a
// benchmark's shadow router (Shadow). A router counts its own answers
// already.
func (rt *Router) ObserveAnswer(promptTokens, cachedTokens int64) {
	rt.reuse.add(promptTokens, cachedTokens, reuseEWMA) // it sees every answer
}
