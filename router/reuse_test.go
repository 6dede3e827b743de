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
	want := 10 / (1000*reuseDecay + 10)
	if got := a.share(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("share %v, want %v (token-weighted)", got, want)
	}
	var b reuseAverage
	b.add(100, 500, reuseEWMA) // cached beyond the prompt counts as the whole prompt
	b.add(100, -3, reuseEWMA)  // negative as none
	if got := b.share(); math.Abs(got-reuseDecay/(reuseDecay+1)) > 1e-12 {
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
	for i := range 640 {
		cached := int64(0)
		if i >= 512 {
			cached = 90
		}
		lone.rt.learnFromAnswer(nil, &reqState{}, Decision{}, 100, cached)
		if i%8 == 0 {
			node.rt.learnFromAnswer(nil, &reqState{}, Decision{}, 100, cached)
		}
	}
	l, n := lone.rt.reuse.share(), node.rt.reuse.share()
	if l < 0.5 || math.Abs(n-l) > 0.05 {
		t.Fatalf("after the climb the lone router reads %.3f, the node of eight %.3f; want the same within 0.05", l, n)
	}
}
