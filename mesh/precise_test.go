package mesh

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// TestEndAndInvalidateReachEveryNode: what an engine's KV events do to the
// claim state on the node that owns its stream reaches every node: a
// removal (End) stops the block's claim from matching everywhere, and
// AllBlocksCleared (Invalidate) drops the backend's claims everywhere; a
// block stored again after its removal matches again.
func TestEndAndInvalidateReachEveryNode(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(3)
	c.waitMesh(time.Minute)
	rng := newRand(13)
	p, q := randomPrompt(rng, 8), randomPrompt(rng, 8)
	owner := c.node(nodeName(1))
	// Every block is claimed, as events claim them (not only at learn depths).
	learnAll := func(p prompt) []tree.Key {
		id, _ := owner.ix.EnsureBackend("e0")
		var ch tree.Chain
		owner.ix.Keyer().Bytes(&ch, testSeed, p.text, nil)
		ch.Learn = ch.Learn[:0]
		for d := 1; d <= len(ch.Keys); d++ {
			ch.Learn = append(ch.Learn, int32(d))
		}
		owner.n.Learn(&ch, id, time.Minute)
		return append([]tree.Key(nil), ch.Keys...)
	}
	keys := learnAll(p)
	learnAll(q)
	everywhere := func(what string, p prompt, want int32) {
		t.Helper()
		waitFor(t, 20*time.Second, what, func() bool {
			for _, tn := range c.live() {
				if tn.depth(p, "e0") != want {
					return false
				}
			}
			return true
		})
	}
	everywhere("the claims", p, fullDepth(p))
	// The engine evicts p's last 3 blocks.
	id, _ := owner.ix.BackendByName("e0")
	owner.n.End(keys[len(keys)-3:], id)
	everywhere("the removal", p, fullDepth(p)-3)
	c.waitConverged(time.Minute)
	// Stored again: claimed again.
	learnAll(p)
	everywhere("the re-store", p, fullDepth(p))
	// AllBlocksCleared.
	owner.n.Invalidate("e0", false)
	everywhere("the clear (p)", p, 0)
	everywhere("the clear (q)", q, 0)
	c.waitConverged(time.Minute)
}
