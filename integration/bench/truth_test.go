package bench

import (
	"testing"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// truthOracle is an Oracle over engines whose decisions the default
// kvmesh policy makes on the true caches (kvmesh+truth).
func truthOracle(t *testing.T, engines map[string]OracleBackend) *Oracle {
	t.Helper()
	o := NewOracle(router.DefaultKVMeshConfig(), engines)
	kv, err := router.NewPolicy(router.PolicyKVMesh, router.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Truth = kv
	return o
}

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
	o := truthOracle(t, map[string]OracleBackend{"b0": cold, "b1": holder})
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

// fakeLoader reports fixed bookings per backend id.
type fakeLoader map[tree.BackendID][3]int64

func (f fakeLoader) LocalLoad(fn func(id tree.BackendID, units, requests, inFlight, written int64)) {
	for id, l := range f {
		fn(id, l[0], l[1], l[2], 0)
	}
}

// With Peers ("kvmesh+truth+load") each candidate's peer load is the other
// nodes' exact bookings, whatever the load channel had said: here it said
// b1 was swamped, the peers have 9,000 units pending at b0 and 100 at b1,
// and both hold the same, so the request goes to b1.
func TestTruthPeersReplaceTheLoadChannel(t *testing.T) {
	same := &fakeOracleBackend{cached: 1000, prompt: 4000}
	o := truthOracle(t, map[string]OracleBackend{"b0": same, "b1": same})
	o.Peers = []LocalLoader{fakeLoader{0: {5000, 1, 1}, 1: {100, 1, 1}}, fakeLoader{0: {4000, 1, 1}}}
	req, unregister := truthRequest(t, o, 100)
	defer unregister()
	cands := []router.Candidate{
		{Name: "b0", ID: 0, Weight: 1, Load: router.LoadView{SignalWeight: 1}},
		{Name: "b1", ID: 1, Weight: 1, Load: router.LoadView{SignalWeight: 1, PeerPendingPrefill: 1e9, PeerPendingRequests: 50, PeerInFlight: 50}},
	}
	scores := make([]float64, 2)
	if d := o.Choose(req, cands, scores); d.Index != 1 {
		t.Fatalf("chose %s with scores %v, want b1: the peers' real bookings are at b0", cands[d.Index].Name, scores)
	}
	if l := cands[0].Load; l.PeerPendingPrefill != 9000 || l.PeerPendingRequests != 2 || l.PeerInFlight != 2 {
		t.Errorf("b0's peer load = %+v, want the two peers' sums (9000 units, 2 requests, 2 in flight)", l)
	}
	if l := cands[1].Load; l.PeerPendingPrefill != 100 || l.PeerPendingRequests != 1 {
		t.Errorf("b1's peer load = %+v, want 100 units and 1 request", l)
	}
}
