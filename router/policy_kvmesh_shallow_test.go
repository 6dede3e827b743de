package router

import (
	"math"
	"testing"
)

// KVMeshConfig.ShallowMatchShare: a long prompt whose 512-unit head a
// queued backend holds goes there by default (the head's cache credit
// outweighs 5,000 units of queue) and to the idle backend when the head is
// under the share; a match over the share keeps its credit.
func TestKVMeshShallowMatchShare(t *testing.T) {
	pc := newPolicyCase(1500, 83, "a", "b").match(8, 0).pending(5000, 0) // 96,010 units, a holds 512
	cfg := DefaultKVMeshConfig()
	if name, d := pc.choose(newKVMeshPolicy(cfg)); name != "a" || d.Reason != ReasonPrefix {
		t.Fatalf("off: chose %s (%s), want a (prefix): the premise", name, d.Reason)
	}
	credited := pc.scores[0]
	shallow := cfg
	shallow.ShallowMatchShare = 0.05
	if name, _ := pc.choose(newKVMeshPolicy(shallow)); name != "b" {
		t.Fatalf("a 512-unit head of 96,010 under a share of 0.05: chose %s, want b (idle)", name)
	}
	if got, want := pc.scores[0]-credited, cfg.CacheWeight*512; math.Abs(got-want) > 1e-6 {
		t.Fatalf("the shallow holder pays %v more, want the cache weight times its match, %v", got, want)
	}
	pc.match(200, 0) // 12,800 units: 13% of the prompt
	if name, _ := pc.choose(newKVMeshPolicy(shallow)); name != "a" {
		t.Fatalf("a 12,800-unit match of 96,010 over the share: chose %s, want a", name)
	}

	for _, v := range []float64{-0.1, 1.5, math.NaN()} {
		bad := DefaultKVMeshConfig()
		bad.ShallowMatchShare = v
		if errs := bad.validate(); len(errs) != 1 {
			t.Fatalf("shallow_match_share %v: %v, want one error", v, errs)
		}
	}
}
