package bench

import (
	"testing"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// truthRequest is a registered request whose chain has blocks blocks of 64
// units, as the router keys a prompt, for an oracle with Truth set.
func truthRequest(t *testing.T, o *Oracle, blocks int) (*router.Request, func()) {
	t.Helper()
	req, unregister := oracleRequest(t, o, chatBody("s", "u", 1))
	ch := &tree.Chain{UnitsPerBlock: 64, Units: blocks * 64}
	for i := range blocks {
		ch.Keys = append(ch.Keys, tree.Key(i+1))
	}
	req.Chain = ch
	return req, unregister
}

// kvmesh+truth decides with what the engines hold, not with its claims:
// the claims say b0 holds the whole prompt and doubt b1's, the engines say
// b0 has nothing and b1 three quarters; the kvmesh policy, given the
// truth, sends the request to b1 and finds the match there.
func TestTruthReplacesClaimsWithTheEnginesCache(t *testing.T) {
	cold := &fakeOracleBackend{cached: 0, prompt: 4000}
	holder := &fakeOracleBackend{cached: 3000, prompt: 4000}
	o := NewOracle(router.DefaultKVMeshConfig(), map[string]OracleBackend{"b0": cold, "b1": holder})
	kv, err := router.NewPolicy(router.PolicyKVMesh, router.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Truth = kv
	req, unregister := truthRequest(t, o, 100)
	defer unregister()
	cands := []router.Candidate{
		{Name: "b0", Weight: 1, Matched: 100, Load: router.LoadView{SignalWeight: 1}},
		{Name: "b1", Weight: 1, Matched: 0, Doubted: 100, DoubtTrust: 0.01, Discount: 0.5, Lost: true, Load: router.LoadView{SignalWeight: 1}},
	}
	scores := make([]float64, 2)
	d := o.Choose(req, cands, scores)
	if d.Index != 1 {
		t.Fatalf("chose %s with scores %v, want b1, the backend that really holds the prompt", cands[d.Index].Name, scores)
	}
	// 3,000 of 4,000 tokens: 75 of the chain's 100 blocks, believed whole.
	if c := cands[1]; c.Matched != 75 || c.Doubted != 0 || c.Discount != 0 || c.Lost {
		t.Errorf("b1's candidate after truth = %+v, want Matched 75 and no doubt", c)
	}
	if cands[0].Matched != 0 || req.Deepest != 75 {
		t.Errorf("b0 matched %d, deepest %d; want 0 and 75", cands[0].Matched, req.Deepest)
	}
	// The oracle's own queues are not booked: the router books.
	if q := o.backends["b1"].queued.Load(); q != 0 {
		t.Errorf("the oracle booked %d tokens at b1, want 0 (kvmesh+truth books in the router)", q)
	}
}

func TestTruthBlocks(t *testing.T) {
	ch := &tree.Chain{UnitsPerBlock: 64, Units: 6400 + 30, Keys: make([]tree.Key, 100)}
	for _, tc := range []struct {
		cached, prompt int
		want           int32
	}{
		{0, 1000, 0}, {500, 1000, 50}, {1000, 1000, 100}, {1200, 1000, 100}, // never past the chain
		{5, 1000, 0}, // 32 units: less than a block
		{5, 0, 0},    // no prompt known
	} {
		if got := truthBlocks(&router.Request{Chain: ch}, tc.cached, tc.prompt); got != tc.want {
			t.Errorf("truthBlocks(%d of %d) = %d, want %d", tc.cached, tc.prompt, got, tc.want)
		}
	}
	if got := truthBlocks(&router.Request{}, 500, 1000); got != 0 {
		t.Errorf("no chain: %d, want 0", got)
	}
}
