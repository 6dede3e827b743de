package router

// The policies against requests and candidates their callers may build:
// a Request from outside this package, which cannot set its scratch
// space, and a candidate matched beyond (or without) the request's chain.

import (
	"math"
	"testing"
	"time"
)

// kvmesh's Choose works on a Request built outside this package (no
// scratch space: NewPolicy and Request are exported) and decides as it
// does with the router's scratch, load override included.
func TestKVMeshChooseWithoutScratch(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVMesh.LoadOverrideFactor, cfg.KVMesh.LoadOverrideFloor = 2, 0.1
	p, err := NewPolicy(PolicyKVMesh, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The holder of the prefix is far busier than the rest: the load
	// override reads the median of the loads (the scratch's second half).
	pc := newPolicyCase(40, 2, "a", "b", "c").match(40, 0, 0).pending(2000, 0, 0)
	want, wd := pc.choose(p)
	pc.req.scratch = nil
	got, gd := pc.choose(p)
	if got != want || gd != wd {
		t.Fatalf("without scratch: chose %s %+v, with it %s %+v", got, gd, want, wd)
	}
	if wd.Reason != ReasonLoadOverride {
		t.Fatalf("the case should exercise the load override: %+v", wd)
	}
}

// A candidate matched deeper than the request's chain (or with no chain
// at all) is a caller's mistake the policy survives: it prices what it
// can and counts no hot prefix by a key the chain does not have.
func TestKVMeshMatchBeyondTheChain(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(4, 1, "a", "b").match(9, 0)
	pc.cands[0].Near, pc.cands[0].NearTrust = 12, 0.5
	if name, d := pc.choose(p); name != "a" || d.Index != 0 {
		t.Fatalf("match beyond the chain: chose %s %+v", name, d)
	}
	pc.req.Chain = nil
	if _, d := pc.choose(p); d.Index < 0 || d.Index > 1 {
		t.Fatalf("no chain: %+v", d)
	}
}

// A decision whose loads overflow (a backend of a tiny weight with work
// queued: load per unit of weight is +Inf) does not leave the fleet's
// decayed mean load (KVMeshConfig.BlockFleetLoad) at +Inf, and so NaN
// after the next sample, which would gate the blocking term off for the
// rest of the process: the sample is skipped, the mean stays a number
// and follows the fleet.
func TestKVMeshFleetLoadSurvivesAnOverflow(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.BlockWeight, cfg.BlockFleetLoad = 1, 1.5
	p := newKVMeshPolicy(cfg)
	pc := newPolicyCase(40, 5, "a", "b").pending(1e9, 0)
	pc.cands[0].Weight = 1e-300
	pc.choose(p)
	pc.cands[0].Weight = 1
	pc.pending(0, 0)
	for i := range 200 {
		pc.req.Now = pc.req.Now.Add(time.Second)
		pc.choose(p)
		if v, _ := p.gatingFleetLoad(); math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("decision %d after the overflow: fleet load %v", i+1, v)
		}
	}
	if v, _ := p.gatingFleetLoad(); v > cfg.BlockFleetLoad {
		t.Fatalf("fleet load %v after 200 s of an idle fleet (window %v): the gate stays shut", v, cfg.BlockWindow)
	}
}
