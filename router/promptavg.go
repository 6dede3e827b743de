package router

import (
	"math"
	"sync"
)

// promptAverage is late binding's moving average of prompt sizes (units):
// what hold_min_prompts, hold_max_prompts and hold_queue_prompts are
// counted in (policy_kvmesh_hold.go).
//
// In a mesh it averages the mesh's prompts, not only this node's: the
// peers' routed prompt totals arrive on the load channel (PeerPrompts), and
// each increase is folded in as that many prompts of their mean size, so
// that every node reads about what one router routing everything would. A
// node of 8 averaging only its own prompts weighs each at 1/8
// (promptWeight): its average reads below the mean most of the time (a
// window of ~8 long-tailed sizes rarely holds a long one) and jumps after
// each long prompt of its own, so it exempted from late binding prompts
// one router holds and held others one router sends. On Mooncake at 3x
// the 8-node mesh sent 87-103 prompts of 20,000-40,000 tokens a run at
// once into a busy fleet against one router's 49-53 (docs/bench/
// HISTORY.md, "The harness's CPU"). The costs keep the node's own
// average (kvmeshPolicy.avgPrompt): priced at the mesh's, the 8-node
// mesh's hit rate fell ~0.3 points.
type promptAverage struct {
	mu  sync.Mutex
	avg float64
	// peers is the peers' totals folded in so far; folded says the first
	// reading was taken (a baseline, not news: a node that joins a mesh
	// must not take its peers' whole past for their last prompts).
	peers  PromptTotals
	folded bool
}

// PromptTotals counts the prompts routed (first attempts) and their units.
type PromptTotals struct{ N, Units uint64 }

// PeerPrompts is a PeerLoad that also carries the peers' routed prompt
// totals (mesh.Node implements it).
type PeerPrompts interface {
	// PeerPrompts returns how many prompts the other nodes, present and
	// departed, have routed and their units. They never decrease.
	PeerPrompts() (n, units uint64)
}

// newPromptAverage starts the average at initial units.
func newPromptAverage(initial float64) *promptAverage {
	return &promptAverage{avg: initial}
}

// observe folds in the peers' prompts since the last call, given their
// totals now (zero: none heard), and returns the average; then, when own
// is positive, counts one prompt of this node's of own units, at
// promptEWMA when the peers' prompts are folded in, else at
// promptWeight(share). A fold of n prompts ages the average as n of this
// node's would, and adds their mean. Totals that went back (they never
// should) are taken as a new baseline.
func (a *promptAverage) observe(peers PromptTotals, own, share float64) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := promptWeight(share)
	if peers.N > 0 {
		w = promptEWMA
		last := a.peers
		a.peers = peers
		if a.folded && peers.N > last.N && peers.Units >= last.Units {
			n := float64(peers.N - last.N)
			keep := math.Pow(1-promptEWMA, n)
			a.avg = a.avg*keep + float64(peers.Units-last.Units)/n*(1-keep)
		}
		a.folded = true
	}
	avg := a.avg
	if own > 0 {
		a.avg += (own - a.avg) * w
	}
	return avg
}

// LocalPrompts returns how many prompts this router has routed (first
// attempts) since it started and their units, for the mesh's load channel.
func (rt *Router) LocalPrompts() (n, units uint64) {
	return rt.routed.Load(), rt.routedUnits.Load()
}

// peerPromptTotals reads the peers' routed prompt totals (zero without a
// mesh, or from peers of an earlier release).
func (rt *Router) peerPromptTotals() PromptTotals {
	if rt.peerPr == nil {
		return PromptTotals{}
	}
	var t PromptTotals
	t.N, t.Units = rt.peerPr.PeerPrompts()
	return t
}
