package mesh

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// A router's retraction of a failed attempt's provisional claims reaches
// every node, and ends no claim that lives longer than those (a concurrent
// answer's confirmed claim, an engine's lease) for the same blocks.
func TestRetractEndsOnlyProvisionalClaimsEverywhere(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(3)
	c.waitMesh(time.Minute)
	rng := newRand(17)
	p, q := randomPrompt(rng, 8), randomPrompt(rng, 8)
	n := c.node(nodeName(1))
	id, _ := n.ix.EnsureBackend("e0")
	learn := func(p prompt, ttl time.Duration) []tree.Key {
		var ch tree.Chain
		n.ix.Keyer().Bytes(&ch, testSeed, p.text, nil)
		ch.Learn = ch.Learn[:0]
		for d := 1; d <= len(ch.Keys); d++ {
			ch.Learn = append(ch.Learn, int32(d))
		}
		n.n.Learn(&ch, id, ttl)
		return append([]tree.Key(nil), ch.Keys...)
	}
	const provisional = 30 * time.Second
	pk := learn(p, provisional)
	qk := learn(q, 10*time.Minute)
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
	everywhere("p's claims", p, fullDepth(p))
	everywhere("q's claims", q, fullDepth(q))
	n.n.Retract(pk, id, provisional)
	n.n.Retract(qk, id, provisional)
	everywhere("p's retraction", p, 0)
	c.waitConverged(time.Minute)
	for _, tn := range c.live() {
		if d := tn.depth(q, "e0"); d != fullDepth(q) {
			t.Errorf("a node holds %d blocks of the long-lived claims after a retraction, want %d", d, fullDepth(q))
		}
	}
}
