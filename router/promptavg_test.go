package router

import (
	"math"
	"testing"
)

// promptingPeers is a fakePeers whose nodes send their routed prompt
// totals.
type promptingPeers struct {
	fakePeers
	totals PromptTotals
}

func (p *promptingPeers) PeerPrompts() (uint64, uint64) { return p.totals.N, p.totals.Units }

// With its peers' prompt totals a node of eight averages the mesh's
// prompts: it ends where a lone router that routed every prompt ends, and
// each long prompt of its own moves it no more than it moves the lone
// router (without them it moves eight times as far). The peers' past
// before the node first heard them is a baseline, not news; totals that
// go back are a new baseline.
func TestPromptAverageFoldsThePeers(t *testing.T) {
	lone, node, alone := newPromptAverage(4096), newPromptAverage(4096), newPromptAverage(4096)
	peers := PromptTotals{N: 5000, Units: 500_000_000} // 100,000-unit prompts before the node heard them
	if got := node.observe(peers, 0, 0.125); got != 4096 {
		t.Fatalf("the first reading of the peers moved the average to %v: their past counted as news", got)
	}
	// The mesh's prompts grow from 1,000 to 9,000 units over 800 prompts,
	// with a 60,000-unit one every 50th; the node routes every eighth.
	size := func(i int) float64 {
		if i%50 == 48 {
			return 60_000
		}
		return 1000 + float64(i)*10
	}
	var swingNode, swingAlone float64
	for i := range 800 {
		s := size(i)
		lone.observe(PromptTotals{}, s, 1)
		if i%8 != 0 {
			peers.N++
			peers.Units += uint64(s)
			continue
		}
		before := node.observe(peers, s, 0.125) // after the fold, before its own prompt
		beforeAlone := alone.observe(PromptTotals{}, s, 0.125)
		swingNode = max(swingNode, node.load()-before)
		swingAlone = max(swingAlone, alone.load()-beforeAlone)
	}
	l, n := lone.load(), node.observe(peers, 0, 0.125)
	if math.Abs(n-l) > 0.02*l {
		t.Fatalf("the lone router averages %.0f units, the node of eight with its peers' prompts %.0f; want within 2%%", l, n)
	}
	long := 60_000 * promptEWMA // at most: the average is above 0
	if swingNode > long || swingAlone < 4*long {
		t.Fatalf("one long prompt moved the node with its peers' prompts %.0f units and the node without %.0f; want at most %.0f and at least %.0f",
			swingNode, swingAlone, long, 4*long)
	}
	if got := node.observe(PromptTotals{N: 3, Units: 30}, 0, 0.125); got != n {
		t.Fatalf("totals that went back moved the average from %v to %v", n, got)
	}
	if got := node.observe(PromptTotals{N: 4, Units: 1030}, 0, 0.125); math.Abs(got-(n+(1000-n)*promptEWMA)) > 1e-6 {
		t.Fatalf("one 1000-unit prompt after a new baseline moved the average from %v to %v, want %v", n, got, n+(1000-n)*promptEWMA)
	}
}

// A router counts the prompts it routes and their units for its peers, and
// its kvmesh policy folds in the prompts its peers routed.
func TestRouterSharesPromptTotals(t *testing.T) {
	peers := &promptingPeers{fakePeers: fakePeers{share: 0.5}}
	g := newRig(t, func(c *Config, d *Deps) { c.Policy = PolicyKVMesh; d.Peers = peers }, newFakeBackend(t, "a"))
	pol := g.rt.policy.(*kvmeshPolicy)
	start := pol.holdAvg.load()
	resp := g.do("POST", "/v1/chat/completions", chat("m1", "system", "hello"))
	resp.Body.Close()
	n, units := g.rt.LocalPrompts()
	if n != 1 || units == 0 || float64(units) >= start {
		t.Fatalf("after one short prompt LocalPrompts = %d, %d; want 1 and its few units", n, units)
	}
	afterOwn := pol.holdAvg.load()
	if want := start + (float64(units)-start)*promptWeight(0.5); math.Abs(afterOwn-want) > 1e-6 {
		t.Fatalf("the peers send no prompts yet: the average went %v -> %v, want %v (a node of two's step)", start, afterOwn, want)
	}
	peers.totals = PromptTotals{N: 10, Units: 10 * 50_000} // the baseline
	resp = g.do("POST", "/v1/chat/completions", chat("m1", "system", "hello"))
	resp.Body.Close()
	peers.totals = PromptTotals{N: 74, Units: 74 * 50_000} // 64 more of 50,000 units
	resp = g.do("POST", "/v1/chat/completions", chat("m1", "system", "hello"))
	resp.Body.Close()
	if got := pol.holdAvg.load(); got < 25_000 {
		t.Fatalf("after the peers routed 64 prompts of 50,000 units the node averages %.0f, want above 25,000", got)
	}
	if got := math.Float64frombits(pol.avgPrompt.Load()); got > float64(units)+start {
		t.Fatalf("the costs' average went to %.0f with the peers' prompts, want the node's own (below %.0f)", got, float64(units)+start)
	}
}

// load returns the average without counting anything (tests).
func (a *promptAverage) load() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.avg
}
