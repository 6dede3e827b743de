package router

import (
	"math"
	"strings"
	"testing"
)

// The policy holds a request only when it may (Request.HoldOK), its
// prefill at the best candidate is at least hold_min_prompts average
// prompts, and every candidate has more than hold_queue_prompts average
// prompts queued; a hold changes nothing else about the choice.
func TestKVMeshHoldsLongPromptsWhileEveryQueueIsBusy(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.HoldMinPrompts = 0.5
	cfg.HoldQueuePrompts = 0      // any prefill queued is busy
	cfg.InitialPromptUnits = 2000 // avg: a 40-block prompt (2,570 units) is 1.3 of it
	hold := func(pc *policyCase, ok bool) Decision {
		t.Helper()
		pc.req.HoldOK = ok
		pc.req.Held = 1 // the average stays where it is
		_, d := pc.choose(newKVMeshPolicy(cfg))
		return d
	}
	if d := hold(newPolicyCase(40, 1, "a", "b").pending(500, 800), true); !d.Hold || d.Index != 0 {
		t.Fatalf("long prompt, both queues busy: %+v, want a hold naming a (the shorter queue)", d)
	}
	if d := hold(newPolicyCase(40, 1, "a", "b").pending(500, 800), false); d.Hold {
		t.Errorf("held without HoldOK: %+v", d)
	}
	if d := hold(newPolicyCase(40, 1, "a", "b").pending(500, 0), true); d.Hold || d.Index != 1 {
		t.Errorf("b idle: %+v, want b at once", d)
	}
	// 200 blocks (12,810 units) is over hold_max_prompts (3) averages: the
	// longest prompts are never held.
	if d := hold(newPolicyCase(200, 1, "a", "b").pending(500, 800), true); d.Hold {
		t.Errorf("a prompt over hold_max_prompts held: %+v", d)
	}
	// 10 blocks (650 units) is a third of the average: short, sent at once.
	if d := hold(newPolicyCase(10, 1, "a", "b").pending(500, 800), true); d.Hold {
		t.Errorf("short prompt held: %+v", d)
	}
	// A holder of 35 of 40 blocks would compute 330 units: sent at once.
	if d := hold(newPolicyCase(40, 1, "a", "b").match(35, 0).pending(500, 800), true); d.Hold || d.Index != 0 {
		t.Errorf("prompt mostly held at a: %+v, want a at once", d)
	}
	cfg.HoldQueuePrompts = 0.5 // 1,000 units: a's 500 is short enough
	if d := hold(newPolicyCase(40, 1, "a", "b").pending(500, 1800), true); d.Hold {
		t.Errorf("a's queue under hold_queue_prompts: %+v", d)
	}
	if d := hold(newPolicyCase(40, 1, "a", "b").pending(1500, 1800), true); !d.Hold {
		t.Errorf("both queues over hold_queue_prompts: %+v, want a hold", d)
	}
	cfg.HoldMinPrompts = 0
	if d := hold(newPolicyCase(40, 1, "a", "b").pending(1500, 1800), true); d.Hold {
		t.Errorf("hold_min_prompts 0 (off) held: %+v", d)
	}
}

// In a mesh, late binding prices a prompt at the mesh's average (its
// peers' prompts folded in), the costs at the node's own: a node whose own
// prompts were short holds a prompt that is long for the mesh's, and
// exempts one that is past hold_max_prompts of the mesh's, while its
// costs' average stays its own.
func TestKVMeshHoldsAtTheMeshAverage(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.HoldQueuePrompts = 0      // any prefill queued is busy
	cfg.InitialPromptUnits = 2000 // a 40-block prompt (2,570 units) is 1.3 of it
	p := newKVMeshPolicy(cfg)
	decide := func(blocks int, peers PromptTotals) Decision {
		t.Helper()
		pc := newPolicyCase(blocks, 1, "a", "b").pending(500, 800)
		pc.req.HoldOK, pc.req.Held, pc.req.MeshShare, pc.req.PeerPrompts = true, 1, 0.125, peers
		_, d := pc.choose(p)
		return d
	}
	// 200 blocks (12,810 units) is past 3 of the node's averages: sent.
	if d := decide(200, PromptTotals{}); d.Hold {
		t.Fatalf("no peers' prompts: a 200-block prompt held: %+v", d)
	}
	decide(10, PromptTotals{N: 1, Units: 1}) // the peers' baseline
	// The peers routed 640 prompts of 8,000 units: the mesh's average is
	// near 8,000, and 12,810 units is 1.6 of it.
	if d := decide(200, PromptTotals{N: 641, Units: 1 + 640*8000}); !d.Hold {
		t.Fatalf("the mesh's average near 8,000 units: a 12,810-unit prompt not held: %+v", d)
	}
	// 40 blocks (2,570 units) is under hold_min_prompts (0.5) of it: sent.
	if d := decide(40, PromptTotals{N: 641, Units: 1 + 640*8000}); d.Hold {
		t.Errorf("a 2,570-unit prompt held at the mesh's average of ~8,000: %+v", d)
	}
	if got := math.Float64frombits(p.avgPrompt.Load()); got != cfg.InitialPromptUnits {
		t.Errorf("the costs' average moved to %v with only held decisions and peers' prompts, want %v", got, cfg.InitialPromptUnits)
	}
}

// A decision made again after a hold does not count the prompt in the
// moving average a second time.
func TestKVMeshHeldPromptCountsOnce(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(40, 1, "a", "b")
	before := p.avgPrompt.Load()
	pc.req.Held = 2
	pc.choose(p)
	if p.avgPrompt.Load() != before {
		t.Fatal("a request decided again after a hold moved the average")
	}
	pc.req.Held = 0
	pc.choose(p)
	if p.avgPrompt.Load() == before {
		t.Fatal("a first decision did not move the average")
	}
}

// hold_spare_share keeps backends free for short prompts: with 8
// candidates and a share of 1/8, a long prompt is held while at most one
// has a short queue, sent once two have.
func TestKVMeshHoldKeepsASpareBackend(t *testing.T) {
	// By default one of 8 is kept, and a backend with under 0.3 average
	// prompts queued counts as free.
	def := DefaultKVMeshConfig()
	if floor, spare := def.HoldFree(1000, 8); floor != 300 || spare != 1 {
		t.Fatalf("default HoldFree(avg 1000, 8 candidates) = %v, %d; want 300, 1", floor, spare)
	}
	if _, spare := def.HoldFree(1000, 7); spare != 0 {
		t.Fatalf("default spare of 7 candidates = %d, want 0 (the share rounds down)", spare)
	}
	cfg := DefaultKVMeshConfig()
	cfg.HoldMinPrompts = 0.5
	cfg.HoldSpareShare = 0.125
	cfg.HoldQueuePrompts = 0 // idle: nothing queued
	cfg.InitialPromptUnits = 2000
	pc := newPolicyCase(40, 1, "a", "b", "c", "d", "e", "f", "g", "h").pending(900, 0, 800, 700, 600, 500, 400, 300)
	pc.req.HoldOK, pc.req.Held = true, 1
	if _, d := pc.choose(newKVMeshPolicy(cfg)); !d.Hold || pc.cands[d.Index].Name != "b" {
		t.Fatalf("one idle backend of 8: %+v, want a hold naming b", d)
	}
	pc.pending(900, 0, 800, 700, 600, 500, 400, 0)
	if name, d := pc.choose(newKVMeshPolicy(cfg)); d.Hold || (name != "b" && name != "h") {
		t.Fatalf("two idle backends: %s %+v, want one of them at once", name, d)
	}
	cfg.HoldSpareShare = 0.25 // two kept spare: held until a third is idle
	if _, d := pc.choose(newKVMeshPolicy(cfg)); !d.Hold {
		t.Fatalf("share 1/4, two idle: %+v, want a hold", d)
	}
}

// hold_max_reuse: no hold while the backends answer that more than that
// share of each prompt was cached (0.5 before any answer).
func TestKVMeshHoldOffWhileMostIsCached(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.InitialPromptUnits = 2000
	pc := newPolicyCase(40, 1, "a", "b").pending(1500, 1800)
	pc.req.HoldOK, pc.req.Held = true, 1
	for _, c := range []struct {
		reuse float64
		hold  bool
	}{{0.1, true}, {0.3, true}, {0.5, false}, {-1, false}} {
		pc.req.Reuse = c.reuse
		if _, d := pc.choose(newKVMeshPolicy(cfg)); d.Hold != c.hold {
			t.Errorf("reuse %v (hold_max_reuse %v): hold %v, want %v", c.reuse, cfg.HoldMaxReuse, d.Hold, c.hold)
		}
	}
}

// Settings under which nothing could be held are refused, with the way
// out in the message; the defaults and each way out pass.
func TestHoldConfigValidate(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.HoldMinPrompts, cfg.HoldMaxPrompts = 2, 1
	errs := cfg.validate()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "hold_max_prompts (1) is below hold_min_prompts (2)") {
		t.Fatalf("hold_max_prompts under hold_min_prompts: %v, want one error naming both", errs)
	}
	for _, c := range [][2]float64{{0.5, 3}, {2, 0}, {0, 1}, {2, 2}} { // min, max
		cfg.HoldMinPrompts, cfg.HoldMaxPrompts = c[0], c[1]
		if errs := cfg.validate(); len(errs) != 0 {
			t.Errorf("min %v max %v: %v", c[0], c[1], errs)
		}
	}
}
