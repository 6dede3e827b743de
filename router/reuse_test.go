package router

import (
	"math"
	"testing"
)

// The reuse average weighs answers by their tokens, clamps cached to the
// prompt, and says -1 before any answer.
func TestReuseAverage(t *testing.T) {
	var a reuseAverage
	if got := a.share(); got != -1 {
		t.Fatalf("before any answer: %v, want -1", got)
	}
	a.add(0, 5, reuseEWMA) // no prompt: ignored
	if got := a.share(); got != -1 {
		t.Fatalf("after an empty answer: %v, want -1", got)
	}
	a.add(1000, 0, reuseEWMA)
	a.add(10, 10, reuseEWMA)
	want := 10 / (1000*(1-reuseEWMA) + 10)
	if got := a.share(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("share %v, want %v (token-weighted)", got, want)
	}
	var b reuseAverage
	b.add(100, 500, reuseEWMA) // cached beyond the prompt counts as the whole prompt
	b.add(100, -3, reuseEWMA)  // negative as none
	if got := b.share(); math.Abs(got-(1-reuseEWMA)/((1-reuseEWMA)+1)) > 1e-12 {
		t.Fatalf("clamped share %v", got)
	}
	for range 2000 { // old answers fade
		b.add(100, 100, reuseEWMA)
	}
	if got := b.share(); got < 0.99 {
		t.Fatalf("after 2000 fully cached answers: %v", got)
	}
}

// A mirroring router (a benchmark's shadow) learns the fleet's reuse from
// answers it did not route.
func TestObserveAnswer(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	g.rt.ObserveAnswer(100, 80)
	if got := g.rt.reuse.share(); math.Abs(got-0.8) > 1e-12 {
		t.Fatalf("reuse after one observed answer: %v, want 0.8", got)
	}
}

// A node that routes an eighth of the mesh's requests weighs each answer
// eight times as much, so that its average spans the mesh's last ~128
// answers as a lone router's does, not the last ~1,000.
func TestReuseFollowsTheMesh(t *testing.T) {
	for _, c := range []struct{ share, want float64 }{
		{1, reuseEWMA}, {0, reuseEWMA}, {0.5, 2 * reuseEWMA}, {0.125, 8 * reuseEWMA}, {0.01, maxReuseEWMA},
	} {
		if got := reuseWeight(c.share); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("reuseWeight(%v) = %v, want %v", c.share, got, c.want)
		}
	}
	// The fleet's reuse climbs from none to 0.9: the mesh answers 512
	// uncached prompts, then 128 at 0.9. A lone router sees them all, a node
	// of eight every eighth; both end within a few points of each other.
	lone := newRig(t, nil, newFakeBackend(t, "a"))
	node := newRig(t, nil, newFakeBackend(t, "a"))
	node.rt.peers = &fakePeers{share: 0.125}
	climb(lone, node, nil)
	l, n := lone.rt.reuse.share(), node.rt.reuse.share()
	if l < 0.5 || math.Abs(n-l) > 0.05 {
		t.Fatalf("after the climb the lone router reads %.3f, the node of eight %.3f; want the same within 0.05", l, n)
	}
}

// answeringPeers is a fakePeers whose nodes send their answer totals.
type answeringPeers struct {
	fakePeers
	totals answerTotals
}

func (p *answeringPeers) PeerAnswers() (uint64, uint64, uint64) {
	return p.totals.n, p.totals.prompt, p.totals.cached
}

// With peers that send their answer totals, a node of eight averages the
// mesh's answers: it reads what a lone router that saw every answer reads,
// though it saw an eighth of them; the peers' past before the node first
// heard them is a baseline, not news.
func TestReuseFoldsThePeersAnswers(t *testing.T) {
	lone := newRig(t, nil, newFakeBackend(t, "a"))
	peers := &answeringPeers{fakePeers: fakePeers{share: 0.125}, totals: answerTotals{n: 5000, prompt: 5_000_000, cached: 5_000_000}}
	node := newRig(t, func(_ *Config, d *Deps) { d.Peers = peers }, newFakeBackend(t, "a"))
	if got := node.rt.reuseShare(); got != -1 {
		t.Fatalf("before any answer of its own the node reads %v: the peers' past counted as news", got)
	}
	climb(lone, node, func(cached int64) { // the peers' answers
		peers.totals.n++
		peers.totals.prompt += 100
		peers.totals.cached += uint64(cached)
	})
	l, n := lone.rt.reuse.share(), node.rt.reuseShare()
	if l < 0.5 || math.Abs(n-l) > 0.01 {
		t.Fatalf("the lone router reads %.4f, the node of eight with its peers' answers %.4f; want the same within 0.01", l, n)
	}
	if got, p, c := node.rt.LocalAnswers(); got != 80 || p != 8000 || c != 16*90 {
		t.Fatalf("the node's own totals: %d answers, %d prompt, %d cached; want 80, 8000, 1440", got, p, c)
	}
}

// climb feeds the answers of a mesh whose reuse climbs from none to 0.9:
// 512 uncached 100-token prompts, then 128 at 90 cached. lone sees every
// answer, node every eighth; peer (if any) is told of the others.
func climb(lone, node *testRig, peer func(cached int64)) {
	for i := range 640 {
		cached := int64(0)
		if i >= 512 {
			cached = 90
		}
		lone.rt.learnFromAnswer(nil, &reqState{}, Decision{}, 100, cached)
		switch {
		case i%8 == 0:
			node.rt.learnFromAnswer(nil, &reqState{}, Decision{}, 100, cached)
		case peer != nil:
			peer(cached)
		}
	}
}
