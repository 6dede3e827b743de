package router

import (
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// newEdgeRig is a router over backend a alone, 5,000 tokens of KV
// capacity, with the belief on (claims doubted past one capacity, at a
// learned worth starting from 0.5), set's belief options, and a clock
// that moves 5 ms at each reading; it returns a's state and the clock (Unix
// ms) too.
func newEdgeRig(t *testing.T, a *fakeBackend, set func(*BeliefConfig)) (*testRig, *backend, *atomic.Int64) {
	t.Helper()
	clock := new(atomic.Int64)
	clock.Store(time.Now().UnixMilli())
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.DoubtBeyond, c.Belief.DoubtTrust, c.Belief.DoubtLearn = true, 1, 0.5, true
		set(&c.Belief)
		c.Backends[0].KVCapacityTokens = 5000
		d.Now = func() time.Time { return time.UnixMilli(clock.Add(5)) }
	}, a)
	return g, g.rt.backendByName("a"), clock
}

// writeFillers sends b prompts of fillerBytes that nothing else shares
// until the mesh counts at least units written to b, and returns what it
// counts.
func writeFillers(t *testing.T, g *testRig, b *backend, units float64, fillerBytes int) float64 {
	t.Helper()
	start := g.rt.meshWritten(b)
	for i := 0; g.rt.meshWritten(b)-start < units; i++ {
		if i == 200 {
			t.Fatal("nothing is counted as written")
		}
		g.call("POST", "/v1/chat/completions", chat("m1", fmt.Sprintf("%d %s", i, longText(fmt.Sprint("filler ", i), fillerBytes)), "q"))
	}
	return g.rt.meshWritten(b) - start
}

// belief.depth_edge: a deep claim whose own units plus what was written
// after it pass the capacity is trusted only down to the depth that still
// fits, and the rest is priced as a near-edge doubted claim; without it
// the claim is trusted whole until what was written after it alone passes
// the capacity.
//
// With depth_edge_max_reuse below the share of prompt tokens the answers
// report cached (all of them here), the claims do not count their depth.
func TestDepthEdgeCutsADeepClaim(t *testing.T) {
	for _, mode := range []struct {
		on       bool
		maxReuse float64
	}{{false, 0}, {true, 0}, {true, 0.5}} {
		t.Run(fmt.Sprintf("depth_edge=%v,max_reuse=%v", mode.on, mode.maxReuse), func(t *testing.T) {
			on := mode.on && mode.maxReuse == 0 // whether the cut applies
			a := newFakeBackend(t, "a")
			// Every answer reports its whole prompt cached: nothing the test
			// sends teaches the capacity or the written count.
			a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) { answerCached(w, body, int64(len(body)/4)) })
			g, b, _ := newEdgeRig(t, a, func(c *BeliefConfig) { c.DepthEdge, c.DepthEdgeMaxReuse = mode.on, mode.maxReuse })
			deep := chat("m1", longText("deep claim", 9000), "question one")
			g.call("POST", "/v1/chat/completions", deep)
			follow := chat("m1", longText("deep claim", 9000), "question one", "answer", "question two")
			explain := func() (RouteExplanation, CandidateExplanation) { return explainRoute(t, g, follow) }
			_, c0 := explain()
			kappa := math.Float64frombits(b.belief.kappa.Load())
			depth := float64(c0.MatchedUnits)
			if !(kappa > 0) || depth < 0.3*kappa || depth > 0.7*kappa {
				t.Fatalf("set-up: claim of %v units against a capacity of %v units; want 0.3-0.7 capacities", depth, kappa)
			}
			// Write past the claim until its units and what followed it pass
			// the capacity by a fifth, while what followed alone stays inside.
			written := writeFillers(t, g, b, kappa-depth+0.2*kappa, 1500)
			if written >= 0.95*kappa {
				t.Fatalf("set-up: wrote %v units after the claim, capacity %v: the claim is past the edge either way", written, kappa)
			}
			x, c := explain()
			if !on {
				wantWholeClaim(t, x, c, c0)
				return
			}
			want := kappa - written // the depth that still fits
			if got := float64(c.MatchedUnits); math.Abs(got-want) > 0.03*kappa+float64(x.UnitsPerBlock) {
				t.Fatalf("on: trusted %v units, want about %v (capacity %v less %v written after the claim)", got, want, kappa, written)
			}
			if c.NearBlocks != c0.MatchedBlocks {
				t.Fatalf("on: the cut part is not priced as a near claim: near %d blocks, want the claim's %d", c.NearBlocks, c0.MatchedBlocks)
			}
			if c.Score <= c0.Score {
				t.Fatalf("on: the cut claim costs %v, no more than the whole claim did (%v)", c.Score, c0.Score)
			}
		})
	}
}

// With belief.depth_edge, a prompt whose deepest claim has passed the edge
// is still trusted as deep as a shallower claim that fits by its own stamp:
// a tenant's shared context that another user sent since is held whole,
// even though the conversation's own tail was stamped long before.
func TestDepthEdgeKeepsAFreshSharedHead(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) { answerCached(w, body, int64(len(body)/4)) })
	g, b, clock := newEdgeRig(t, a, func(c *BeliefConfig) { c.DepthEdge = true })
	shared := longText("tenant context", 8000)
	tail := longText("user tail", 6000)
	g.call("POST", "/v1/chat/completions", chat("m1", shared, tail))
	follow := chat("m1", shared, tail, "answer", "question two")
	explain := func() CandidateExplanation { _, c := explainRoute(t, g, follow); return c }
	// The shared head alone: how deep its claim is.
	_, hc := explainRoute(t, g, chat("m1", shared, "other user"))
	head := hc.MatchedUnits
	c0 := explain()
	kappa := math.Float64frombits(b.belief.kappa.Load())
	if !(kappa > 0) || head <= 0 || float64(c0.MatchedUnits) < 0.6*kappa || float64(c0.MatchedUnits) > 0.9*kappa || c0.MatchedUnits < head+1000 {
		t.Fatalf("set-up: head %d units, whole claim %d units, capacity %v", head, c0.MatchedUnits, kappa)
	}
	// Write until the cut by the deepest claim's stamp falls below the head.
	start := g.rt.meshWritten(b)
	for i := 0; g.rt.meshWritten(b)-start < kappa-float64(head)+0.05*kappa; i++ {
		if i == 200 {
			t.Fatal("nothing is counted as written")
		}
		g.call("POST", "/v1/chat/completions", chat("m1", fmt.Sprintf("%d %s", i, longText(fmt.Sprint("filler ", i), 1500)), "q"))
	}
	if w := g.rt.meshWritten(b) - start; w >= 0.95*kappa {
		t.Fatalf("set-up: wrote %v units after the claim, capacity %v: the head is past the edge too", w, kappa)
	}
	if c := explain(); c.MatchedUnits >= head {
		t.Fatalf("set-up: trusted %d units before the head was used again, want below the head's %d", c.MatchedUnits, head)
	}
	// Another user of the tenant sends the shared context: its claim is
	// fresh, the conversation's tail is not. (A claim's stamp is refreshed
	// once it lags its last use by more than tree's RefreshMaxMillis, 2 s.)
	clock.Add(3000)
	g.call("POST", "/v1/chat/completions", chat("m1", shared, "other user"))
	c := explain()
	if c.MatchedUnits < head || c.MatchedUnits >= c0.MatchedUnits {
		t.Fatalf("trusted %d units after the head was used again, want the head's %d (and less than the whole claim's %d)", c.MatchedUnits, head, c0.MatchedUnits)
	}
	if c.NearBlocks != c0.MatchedBlocks {
		t.Fatalf("the rest is not priced as a near claim: near %d blocks, want the claim's %d", c.NearBlocks, c0.MatchedBlocks)
	}
}
