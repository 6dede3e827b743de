package router

import (
	"math"
	"testing"
	"time"
)

// arrivalRate: each arrival counts one, the count decays by e per window.
func TestArrivalRate(t *testing.T) {
	var a arrivalRate
	w := 10 * time.Second
	t0 := time.Unix(1_700_000_000, 0).UnixNano()
	if r := a.perSecond(t0, w); r != 0 {
		t.Fatalf("no arrival: rate %v, want 0", r)
	}
	for i := 0; i < 5; i++ {
		a.observe(t0, w)
	}
	if r := a.perSecond(t0, w); math.Abs(r-0.5) > 1e-12 {
		t.Fatalf("5 arrivals now over a 10 s window: rate %v, want 0.5/s", r)
	}
	if r, want := a.perSecond(t0+int64(w), w), 0.5/math.E; math.Abs(r-want) > 1e-12 {
		t.Fatalf("one window later: rate %v, want %v (decayed by e)", r, want)
	}
	a.observe(t0+int64(w), w)
	if r, want := a.perSecond(t0+int64(w), w), (5/math.E+1)/10; math.Abs(r-want) > 1e-12 {
		t.Fatalf("after one more arrival: rate %v, want %v", r, want)
	}
	// A reading for an earlier time (a concurrent request's clock) does not grow the count.
	if r, want := a.perSecond(t0, w), (5/math.E+1)/10; math.Abs(r-want) > 1e-12 {
		t.Fatalf("read at an earlier time: %v, want %v", r, want)
	}
	if r := a.perSecond(t0, 0); r != 0 {
		t.Fatalf("no window: rate %v, want 0", r)
	}
}

// fleetLoad: the first sample is the mean; a sample one window after the
// last moves it 1-1/e of the way; a sample no later than the last one
// leaves it.
func TestFleetLoad(t *testing.T) {
	var f fleetLoad
	w := 10 * time.Second
	t0 := time.Unix(1_700_000_000, 0).UnixNano()
	if v := f.value(); v != 0 {
		t.Fatalf("no sample: %v, want 0", v)
	}
	if v := f.observe(t0, 4, w); v != 4 {
		t.Fatalf("first sample 4: mean %v, want 4", v)
	}
	if v := f.observe(t0, 100, w); v != 4 {
		t.Fatalf("a sample at the same time: mean %v, want 4 (no time stood for it)", v)
	}
	if v, want := f.observe(t0+int64(w), 1, w), 1+3/math.E; math.Abs(v-want) > 1e-12 {
		t.Fatalf("sample 1 one window later: mean %v, want %v", v, want)
	}
	if v, want := f.observe(t0, 50, w), 1+3/math.E; math.Abs(v-want) > 1e-12 || f.value() != v {
		t.Fatalf("a sample from an earlier clock: mean %v (value %v), want %v", v, f.value(), want)
	}
}

// KVMeshConfig.BlockWeight: among idle candidates that hold none of a long
// prompt, it goes to the one fewer requests are bound to; the term is
// exactly the formula; a hit (nothing to compute) pays none, and with the
// weight 0 the choice is the tie's.
func TestKVMeshBlockingTerm(t *testing.T) {
	pc := newPolicyCase(1500, 71, "a", "b") // 96,010 units, held by neither
	for i := range pc.cands {
		pc.cands[i].Load.PrefillRate = 20000 // units per second
	}
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 0.1, 0.4

	cfg := DefaultKVMeshConfig()
	off, _ := pc.choose(newKVMeshPolicy(cfg))
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 0.4, 0.1
	if again, _ := pc.choose(newKVMeshPolicy(cfg)); again != off {
		t.Fatalf("off: the bound rates moved the choice (%s, then %s)", off, again)
	}

	cfg.BlockWeight = 1
	p := newKVMeshPolicy(cfg)
	for _, tc := range []struct {
		rates [2]float64
		want  string
	}{{[2]float64{0.4, 0.1}, "b"}, {[2]float64{0.1, 0.4}, "a"}} {
		pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = tc.rates[0], tc.rates[1]
		if name, _ := pc.choose(p); name != tc.want {
			t.Fatalf("bound rates %v: chose %s, want %s", tc.rates, name, tc.want)
		}
	}
	// The term itself: lambda/mu * X * (P + X/2).
	l := LoadView{BoundRate: 0.4, PrefillRate: 20000}
	if got, want := cfg.blocking(&l, 10000, 30000, 1), 0.4/20000*10000*(30000+5000); math.Abs(got-want) > 1e-9 {
		t.Fatalf("blocking: %v, want %v", got, want)
	}
	if got, want := cfg.blocking(&l, 10000, 30000, 0.25), 4*0.4/20000*10000*(30000+5000); math.Abs(got-want) > 1e-9 {
		t.Fatalf("blocking at a quarter of the mesh's requests: %v, want %v (the mesh's rate)", got, want)
	}
	for _, lv := range []LoadView{{BoundRate: 0.4}, {PrefillRate: 20000}} {
		if got := cfg.blocking(&lv, 10000, 0, 1); got != 0 {
			t.Fatalf("a rate unknown (%+v): blocking %v, want 0", lv, got)
		}
	}
	capped := cfg
	capped.BlockMaxShare = 0.1
	if got := capped.blocking(&l, 10000, 30000, 1); got != 1000 {
		t.Fatalf("capped at a tenth of the 10,000 units computed: blocking %v, want 1000", got)
	}
	if got, want := capped.blocking(&l, 100, 0, 1), 0.4/20000*100*50; math.Abs(got-want) > 1e-12 {
		t.Fatalf("under the cap: blocking %v, want %v (the formula)", got, want)
	}
	if got := cfg.blocking(&l, 0, 30000, 1); got != 0 {
		t.Fatalf("nothing to compute: blocking %v, want 0", got)
	}

	// Gated on an idle candidate: with both queued far beyond an average
	// prompt the term is off and the rates do not move the choice; with
	// one of them idle it is on.
	gated := cfg
	gated.BlockIdleLoad = 1
	pc.pending(1e6, 1e6)
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 0.1, 0.4
	first, _ := pc.choose(newKVMeshPolicy(gated))
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 0.4, 0.1
	if again, _ := pc.choose(newKVMeshPolicy(gated)); again != first {
		t.Fatalf("gated, every candidate queued: the bound rates moved the choice (%s, then %s)", first, again)
	}
	pc.pending(1e6, 0)
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 0, 0.4
	costOfB := func(cf KVMeshConfig) float64 { pc.choose(newKVMeshPolicy(cf)); return pc.scores[1] }
	if on, off := costOfB(gated), costOfB(DefaultKVMeshConfig()); on <= off {
		t.Fatalf("gated, b idle: b's cost %v with the term, %v without: want it priced", on, off)
	}

	// Gated on the fleet's load over time: the term is on for an idle
	// fleet; a policy that has seen the fleet queued far beyond an average
	// prompt keeps it off, even for a decision whose candidates are idle at
	// that moment; after ten windows of an idle fleet it is on again. ref
	// sees the same decisions without the term.
	fleetGated := cfg
	fleetGated.BlockFleetLoad = 1
	fp, ref := newKVMeshPolicy(fleetGated), newKVMeshPolicy(DefaultKVMeshConfig())
	costsOfB := func() (gated, without float64) {
		pc.choose(fp)
		gated = pc.scores[1]
		pc.choose(ref)
		return gated, pc.scores[1]
	}
	pc.pending(0, 0)
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 0, 0.4
	if g, w := costsOfB(); g <= w {
		t.Fatalf("fleet-gated, an idle fleet: b's cost %v with the gate, %v without the term: want it priced", g, w)
	}
	pc.req.Now = pc.req.Now.Add(fleetGated.BlockWindow)
	pc.pending(1e6, 1e6)
	costsOfB()
	pc.pending(0, 0)
	if g, w := costsOfB(); g != w {
		t.Fatalf("fleet-gated, just after the fleet was saturated: b's cost %v, want %v (the term off)", g, w)
	}
	pc.req.Now = pc.req.Now.Add(10 * fleetGated.BlockWindow)
	if g, w := costsOfB(); g <= w {
		t.Fatalf("fleet-gated, ten windows of an idle fleet later: b's cost %v, %v without the term: want it priced", g, w)
	}

	// Gated on reuse: off while the backends answer that most of every
	// prompt was cached (the decision is the one without the term), on at
	// a low share and before any answer (taken as 0.5).
	reuseGated := cfg
	reuseGated.BlockMaxReuse = 0.7
	rp, rref, reuse := newKVMeshPolicy(reuseGated), newKVMeshPolicy(DefaultKVMeshConfig()), pc.req.Reuse
	pc.pending(0, 0)
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 0, 0.4
	for _, tc := range []struct {
		reuse float64
		on    bool
	}{{0.9, false}, {0.2, true}, {-1, true}} {
		pc.req.Reuse = tc.reuse
		pc.choose(rp)
		g := pc.scores[1]
		pc.choose(rref)
		if w := pc.scores[1]; (g > w) != tc.on || g < w {
			t.Fatalf("reuse-gated at 0.7, reuse %v: b's cost %v with the gate, %v without the term: want it priced %v", tc.reuse, g, w, tc.on)
		}
	}
	pc.req.Reuse = reuse

	// Fenced: the term moves the long prompt from idle a to b, which has
	// half an average prompt queued (but for that fence)...
	fenced := cfg
	fenced.BlockFence = 1
	pc.pending(0, 0.5*fenced.InitialPromptUnits)
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 0.4, 0.01
	if name, _ := pc.choose(newKVMeshPolicy(fenced)); name != "b" {
		t.Fatalf("fenced at one average prompt, b half a prompt longer: chose %s, want b", name)
	}
	// ...but not to a queue two prompts longer, though the term alone would.
	pc.pending(0, 2*fenced.InitialPromptUnits)
	if name, _ := pc.choose(newKVMeshPolicy(cfg)); name != "b" {
		t.Fatalf("unfenced, b two prompts longer: chose %s, want b (the test's premise)", name)
	}
	if name, _ := pc.choose(newKVMeshPolicy(fenced)); name != "a" {
		t.Fatalf("fenced at one average prompt, b two prompts longer: chose %s, want a", name)
	}

	// A full holder computes nothing and keeps the request, bound rate or not.
	pc.match(1500, 0).pending(0, 0)
	pc.cands[0].Load.BoundRate, pc.cands[1].Load.BoundRate = 5, 0
	if name, d := pc.choose(p); name != "a" || d.Reason != ReasonPrefix {
		t.Fatalf("a full holder with many bound requests: chose %s (%s), want a (prefix)", name, d.Reason)
	}
}

func TestKVMeshBlockWindowValidated(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.BlockWeight, cfg.BlockWindow = 1, 0
	if errs := cfg.validate(); len(errs) != 1 {
		t.Fatalf("block_window 0 with block_weight 1: %v, want one error", errs)
	}
	cfg.BlockWeight = -1
	cfg.BlockWindow = time.Minute
	if errs := cfg.validate(); len(errs) != 1 {
		t.Fatalf("block_weight -1: %v, want one error", errs)
	}
	cfg.BlockWeight, cfg.BlockMaxShare = 1, math.NaN()
	if errs := cfg.validate(); len(errs) != 1 {
		t.Fatalf("block_max_share NaN: %v, want one error", errs)
	}
	cfg.BlockMaxShare, cfg.BlockIdleLoad = 0, -1
	if errs := cfg.validate(); len(errs) != 1 {
		t.Fatalf("block_idle_load -1: %v, want one error", errs)
	}
	cfg.BlockIdleLoad, cfg.BlockFleetLoad = 0, math.Inf(1)
	if errs := cfg.validate(); len(errs) != 1 {
		t.Fatalf("block_fleet_load +Inf: %v, want one error", errs)
	}
	cfg.BlockFleetLoad, cfg.BlockFence = 0, -0.5
	if errs := cfg.validate(); len(errs) != 1 {
		t.Fatalf("block_fence -0.5: %v, want one error", errs)
	}
	for _, v := range []float64{-0.1, 1.5, math.NaN()} {
		cfg.BlockFence, cfg.BlockMaxReuse = 0, v
		if errs := cfg.validate(); len(errs) != 1 {
			t.Fatalf("block_max_reuse %v: %v, want one error", v, errs)
		}
	}
}

// The router counts a request bound to its backend when it booked at most
// half its prompt there, and reports the rate and the learned prefill rate
// in the backend's load view, and the fleet's load in /debug/route, only
// while the term is on.
func TestRouterCountsBoundArrivals(t *testing.T) {
	for _, on := range []bool{false, true} {
		a := newFakeBackend(t, "a")
		now := time.Unix(1_700_000_000, 0)
		g := newRig(t, func(c *Config, d *Deps) {
			if on {
				c.KVMesh.BlockWeight, c.KVMesh.BlockFleetLoad = 1, 2
			}
			d.Now = func() time.Time { return now }
		}, a)
		b := g.rt.backendByName("a")
		view := func() LoadView { return b.loadView(now, &g.rt.cfg, nil) }
		sys := longText("bound arrivals system prompt", 3000)
		g.call("POST", "/v1/chat/completions", chat("m1", sys, "question one"))
		if r := view().BoundRate; r != 0 {
			t.Fatalf("on=%v: after a miss, bound rate %v, want 0", on, r)
		}
		g.call("POST", "/v1/chat/completions", chat("m1", sys, "question one", "answer", "question two"))
		lv := view()
		x, _ := explainRoute(t, g, chat("m1", sys, "question one", "answer", "question two"))
		if !on {
			if lv.BoundRate != 0 || lv.PrefillRate != 0 {
				t.Fatalf("off: bound rate %v, prefill rate %v, want 0 (not computed)", lv.BoundRate, lv.PrefillRate)
			}
			if x.FleetLoad != nil {
				t.Fatalf("off: /debug/route shows a fleet load %v, want none", *x.FleetLoad)
			}
			continue
		}
		// Two decisions at an idle fleet: the mean is the load their
		// candidates had, far below an average prompt; an explanation reads it.
		if fl, _ := g.rt.policy.(fleetGated).gatingFleetLoad(); x.FleetLoad == nil || *x.FleetLoad != fl || fl > 1 {
			t.Fatalf("on: /debug/route fleet load %v, the policy's %v: want the policy's, under one prompt", x.FleetLoad, fl)
		}
		if want := 1 / g.rt.cfg.KVMesh.BlockWindow.Seconds(); math.Abs(lv.BoundRate-want) > 1e-12 {
			t.Fatalf("after a follow-up that found its context: bound rate %v, want %v (one arrival)", lv.BoundRate, want)
		}
	}
}
