package router

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvmesh/kvmesh/tree"
)

// lessonPeers is a fakePeers that also carries a lesson per backend id.
type lessonPeers struct {
	fakePeers
	lessons map[tree.BackendID][5]float64 // stamp, scale, learned, doubt, answers
}

func (f *lessonPeers) PeerLesson(id tree.BackendID) (int64, float64, float64, float64, uint64) {
	l := f.lessons[id]
	return int64(l[0]), l[1], l[2], l[3], uint64(l[4])
}

// A belief adopts a peer's lesson only when it is newer than its own, and
// a lesson learned after it is stamped later still, whatever the clock
// says, so that the peers adopt it in turn.
func TestCacheBeliefAdoptsNewerLessons(t *testing.T) {
	cfg := DefaultBeliefConfig()
	var cb cacheBelief
	cb.init()
	cb.capTokens.Store(1000)
	cb.adopt(5_000, 0.5, 0, 0.2, 12)
	if stamp, scale, _, doubt, n, own := cb.lesson(); stamp != 5_000 || scale != 0.5 || doubt != 0.2 || n != 12 || own {
		t.Fatalf("after adopting: stamp %d, scale %v, doubt %v, %d answers, own %v", stamp, scale, doubt, n, own)
	}
	if got := cb.doubtTrust(&cfg); got != 0.2 {
		t.Fatalf("adopted doubt worth %v, want 0.2", got)
	}
	cb.adopt(4_000, 2, 0, 0.9, 50) // older: ignored
	if stamp, scale, _, doubt, _, _ := cb.lesson(); stamp != 5_000 || scale != 0.5 || doubt != 0.2 {
		t.Fatalf("an older lesson was adopted: stamp %d, scale %v, doubt %v", stamp, scale, doubt)
	}
	// This node's clock is behind the peer that taught it: its next lesson
	// is still later than the adopted one.
	cb.learnDoubt(0, &cfg)
	cb.stampLesson(1_000)
	if stamp, _, _, doubt, n, own := cb.lesson(); stamp != 5_001 || n != 13 || !(doubt < 0.2) || !own {
		t.Fatalf("a lesson after adopting: stamp %d, doubt %v, %d answers, own %v; want 5001, below 0.2, 13, own", stamp, doubt, n, own)
	}
	cb.stampLesson(9_000)
	if stamp := cb.stamp.Load(); stamp != 9_000 {
		t.Fatalf("a lesson at a later clock is stamped %d, want 9000", stamp)
	}
	// Out-of-range figures from a peer are clamped to what a belief holds.
	cb.adopt(10_000, 1e9, math.Inf(1), 7, 1)
	if _, scale, learned, doubt, _, _ := cb.lesson(); scale != 50 || learned != 0 || doubt != 1 {
		t.Fatalf("out-of-range lesson adopted as scale %v, learned %v, doubt %v", scale, learned, doubt)
	}
}

// The router adopts the mesh's newest lesson about a backend before it
// routes: the doubted-claim worth and capacity the peers' answers taught
// are what this node routes on.
func TestRouterAdoptsPeerLessons(t *testing.T) {
	a := newFakeBackend(t, "a")
	peers := &lessonPeers{fakePeers: fakePeers{share: 1}, lessons: map[tree.BackendID][5]float64{}}
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.DoubtBeyond, c.Belief.DoubtTrust, c.Belief.DoubtLearn = true, 1, 0.5, true
		c.Backends[0].KVCapacityTokens = 5000
		d.Peers = peers
	}, a)
	b := g.rt.backendByName("a")
	peers.lessons[b.id] = [5]float64{float64(g.rt.now().UnixMilli()), 0.25, 0, 0.05, 40}
	g.call("POST", "/v1/chat/completions", chat("m1", "a prompt", "to route"))
	if got := b.belief.doubtTrust(&g.rt.cfg.Belief); got != 0.05 {
		t.Fatalf("doubt worth %v after routing, want the peers' 0.05", got)
	}
	if got := counterValue(g.rt.metrics.lessons[1], new(dto.Metric)); got != 1 {
		t.Fatalf("belief_lessons_total{source=peer} = %v, want 1", got)
	}
	if _, scale, _, _, _, _ := b.belief.lesson(); scale != 0.25 {
		t.Fatalf("capacity scale %v after routing, want the peers' 0.25", scale)
	}
	// An adopted lesson is not relayed: its author told every peer.
	g.rt.LocalLessons(func(id tree.BackendID, stamp int64, _, _, _ float64, _ uint64) {
		t.Errorf("the adopted lesson about %d (stamp %d) is listed as this node's", id, stamp)
	})
	// An older lesson than the one held is not adopted.
	peers.lessons[b.id] = [5]float64{1, 1, 0, 0.9, 1}
	g.call("POST", "/v1/chat/completions", chat("m1", "another prompt", "to route"))
	if got := b.belief.doubtTrust(&g.rt.cfg.Belief); got != 0.05 {
		t.Fatalf("doubt worth %v after an older peer lesson, want 0.05 kept", got)
	}
	if got := counterValue(g.rt.metrics.lessons[1], new(dto.Metric)); got != 1 {
		t.Fatalf("belief_lessons_total{source=peer} = %v after an older lesson, want 1", got)
	}
}
