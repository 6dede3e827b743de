package router

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The ranges of a trusted match's distance (belief.edge_learn) split the
// way from edge_start to one capacity in quarters; each learns its own
// worth, an untaught one is worth 1 (the LRU model's word), and the
// curve is listed only with edge_learn on.
func TestCacheBeliefEdgeCurve(t *testing.T) {
	cfg := DefaultBeliefConfig()
	cfg.EdgeLearn, cfg.EdgeStart = true, 0.2
	for _, c := range []struct {
		x    float64
		want int
	}{{0.3, 0}, {0.4, 0}, {0.41, 1}, {0.7, 2}, {0.95, 3}, {1, 3}, {1.2, 4}} {
		if got := edgeRange(c.x, &cfg); got != c.want {
			t.Errorf("edgeRange(%v) = %d, want %d", c.x, got, c.want)
		}
	}
	var labels []string
	for i := range edgeRanges {
		labels = append(labels, edgeRangeLabel(i, &cfg))
	}
	if fmt.Sprint(labels) != "[0.4 0.6 0.8 1 +Inf]" {
		t.Errorf("labels %v", labels)
	}
	var cb cacheBelief
	cb.init()
	for range 40 {
		cb.learnEdge(1, 0.3, &cfg)
		cb.learnEdge(0, 0.95, &cfg)
	}
	near, far, untaught := cb.edgeWorth(0.3, &cfg), cb.edgeWorth(0.95, &cfg), cb.edgeWorth(0.7, &cfg)
	if near != 1 || !(far < 0.1) || untaught != 1 {
		t.Fatalf("worth at 0.3 (all held) %v, at 0.95 (none held) %v, untaught %v; want 1, below 0.1, 1", near, far, untaught)
	}
	if c := cb.edgeCurveOf(&cfg); len(c) != edgeRanges || c[3] != far || c[2] != 1 {
		t.Fatalf("curve %v", c)
	}
	if cfg.edgeSafe() != 0.2 {
		t.Fatalf("edgeSafe %v, want edge_start", cfg.edgeSafe())
	}
	cfg.EdgeLearn = false
	if cb.edgeCurveOf(&cfg) != nil || cfg.edgeSafe() != 0 {
		t.Fatal("edge_learn off: want no curve and no safe bound")
	}
}

// A trusted match whose tail is priced apart (Candidate.Safe, TailTrust)
// counts its safe head in full and its tail at the tail's worth: a
// backend believed to hold 16 blocks, of which only the first 4 are safe
// and the rest worth 0.2, loses to one that holds 8 in full.
func TestKVMeshTrustedTail(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(20, 34, "a", "b", "c").match(0, 16, 8)
	if name, _ := pc.choose(p); name != "b" {
		t.Fatalf("every claim in full: chose %s, want b (16 blocks)", name)
	}
	pc.cands[1].Safe, pc.cands[1].TailTrust = 4, 0.2
	if saved, want := pc.cands[1].SavedUnits(&pc.chain), 4*64+0.2*12*64; math.Abs(saved-want) > 1e-9 {
		t.Fatalf("SavedUnits: %v, want %v", saved, want)
	}
	if name, _ := pc.choose(p); name != "c" {
		t.Fatalf("b's tail at 0.2: chose %s, want c", name)
	}
	// Booking only (belief.edge_route off): the policy prices the whole
	// match, the dispatch books the tail at its worth.
	pc.cands[1].TailBookOnly = true
	if saved, exp := pc.cands[1].SavedUnits(&pc.chain), pc.cands[1].ExpectedUnits(&pc.chain); saved != 16*64 || math.Abs(exp-(4*64+0.2*12*64)) > 1e-9 {
		t.Fatalf("booking only: SavedUnits %v (want %v), ExpectedUnits %v (want %v)", saved, 16*64, exp, 4*64+0.2*12*64)
	}
	if name, _ := pc.choose(p); name != "b" {
		t.Fatalf("booking only: chose %s, want b (the whole match priced)", name)
	}
	pc.cands[1].TailBookOnly = false
	// A lost match's discount falls on what the tail pricing leaves.
	pc.cands[1].Discount = 0.5
	if saved, want := pc.cands[1].SavedUnits(&pc.chain), 0.5*(4*64+0.2*12*64); math.Abs(saved-want) > 1e-9 {
		t.Fatalf("SavedUnits with a discount: %v, want %v", saved, want)
	}
	// TailTrust 0: no tail pricing, the whole match counts.
	pc.cands[1].Discount, pc.cands[1].TailTrust = 0, 0
	if saved := pc.cands[1].SavedUnits(&pc.chain); saved != 16*64 {
		t.Fatalf("SavedUnits without tail pricing: %v, want %v", saved, 16*64)
	}
}

// Through the router: a conversation whose own tail has half a capacity
// written after it, behind a system prompt that other conversations keep
// using, is matched whole but priced apart: the system prompt's blocks are
// safe, the tail at its range's worth. An answer that had only the system
// prompt cached teaches that range the share 0: from 1 (counted as
// doubtPrior answers) the worth becomes 2/3.
func TestEdgeLearnPricesTheTailApart(t *testing.T) {
	a := newFakeBackend(t, "a")
	var cachedTokens atomic.Int64
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			len(body)/4, cachedTokens.Load())
	})
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.EdgeLearn, c.Belief.EdgeStart = true, true, 0.2
		c.Backends[0].KVCapacityTokens = 5000
		d.Now = func() time.Time { return time.UnixMilli(clock.Add(5)) }
	}, a)
	b := g.rt.backendByName("a")
	sys := longText("edge tail system prompt", 2000)
	q1 := longText("the conversation's own question", 2000)
	g.call("POST", "/v1/chat/completions", chat("m1", sys, q1))
	start := g.rt.meshWritten(b)
	for i := 0; g.rt.meshWritten(b)-start < 10000; i++ { // half of 5000 tokens at 4 units each
		if i == 100 {
			t.Fatal("nothing is counted as written")
		}
		g.call("POST", "/v1/chat/completions", chat("m1", sys, longText(fmt.Sprint("other question ", i), 1500)))
	}
	follow := chat("m1", sys, q1, "answer", "question two")
	_, body := adminCall(t, g, "POST", "/debug/route", follow)
	var x RouteExplanation
	if err := json.Unmarshal(body, &x); err != nil {
		t.Fatal(err)
	}
	c := x.Candidates[0]
	if c.TailTrust != 1 || c.SafeBlocks <= 0 || c.SafeBlocks >= c.MatchedBlocks || !(c.Beyond > 0.2 && c.Beyond < 1) {
		t.Fatalf("want the match priced apart (safe head, untaught tail worth 1) at a distance in (0.2, 1): %+v", c)
	}
	upt := float64(x.Units) / float64(len(follow)/4)
	cachedTokens.Store(int64(float64(c.SafeBlocks*x.UnitsPerBlock) / upt)) // only the safe head
	g.call("POST", "/v1/chat/completions", follow)
	want := doubtPrior / (doubtPrior + 1.0)
	if got := b.belief.edgeWorth(c.Beyond, &g.rt.cfg.Belief); math.Abs(got-want) > 0.01 {
		t.Fatalf("after an answer with only the head cached: tail worth %v, want %v", got, want)
	}
	_, body = adminCall(t, g, "GET", "/admin/backends", "")
	var bs []BackendStatus
	if err := json.Unmarshal(body, &bs); err != nil || len(bs) != 1 {
		t.Fatalf("admin backends: %v %s", err, body)
	}
	if ec := bs[0].Belief.EdgeCurve; len(ec) != edgeRanges || math.Abs(ec[edgeRange(c.Beyond, &g.rt.cfg.Belief)]-want) > 0.01 {
		t.Fatalf("edge_curve %v, want %v in the range of %v", ec, want, c.Beyond)
	}
	le := edgeRangeLabel(edgeRange(c.Beyond, &g.rt.cfg.Belief), &g.rt.cfg.Belief)
	if got := g.counter("kvmesh_router_backend_belief_edge_curve_ratio", "backend", "a", "distance_le", le); math.Abs(got-want) > 0.01 {
		t.Fatalf("kvmesh_router_backend_belief_edge_curve_ratio{distance_le=%q} = %v, want %v", le, got, want)
	}
}
