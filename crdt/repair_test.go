package crdt

import (
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// A digest that differs in every bucket (another bucket count, or a peer
// that missed a lot) is answered by messages that follow the claims, not
// the buckets: with the mesh's 4,096 buckets a small state used to go out
// as 4,096 repair messages, each with the whole registry, after which the
// repair request was queued last: more than a peer's send queue (1,024)
// holds, so the tail (the same high buckets every time) and the request
// were dropped. The request leads, and every claim still goes.
func TestRepairOfEveryBucketIsFewMessages(t *testing.T) {
	s := newSimNet(t, 15, func(c *Config, _ *tree.Config) { c.DigestBuckets = 4096 })
	a := s.add("a")
	s.add("b")
	for i := range 40 {
		s.learn("a", prompt(i, i, 8, 0), "http://x", 60_000)
	}
	s.settle(100)
	a.r.Receive(&Message{Type: MsgDigest, From: "b", Incarnation: s.node("b").r.inc, Now: s.now, Digest: []uint64{1}}, s.now)
	var repairs, claims int
	var types []MsgType
	for _, e := range a.r.Outgoing(s.now, nil) {
		types = append(types, e.Msg.Type)
		if e.Msg.Type == MsgRepair {
			repairs++
			claims += len(e.Msg.Batch.Claims)
		}
	}
	want := a.r.Index().Len()/s.cfg.MaxBatchClaims + 1
	if repairs == 0 || repairs > want {
		t.Fatalf("%d repair messages for %d claims (at most %d per message); want 1 to %d", repairs, a.r.Index().Len(), s.cfg.MaxBatchClaims, want)
	}
	if claims != a.r.Index().Len() {
		t.Fatalf("the repairs carry %d claims, the state has %d", claims, a.r.Index().Len())
	}
	if types[0] != MsgRepairRequest {
		t.Fatalf("messages to b: %v; want the repair request first", types)
	}
	if st := a.r.Stats(); st.BucketsRepaired != 4096 {
		t.Fatalf("%d buckets repaired, want 4096", st.BucketsRepaired)
	}
}
