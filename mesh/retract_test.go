package mesh

import (
	"testing"
	"time"
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
	const provisional = 30 * time.Second
	pk := n.learnEveryBlock(p, "e0", provisional)
	qk := n.learnEveryBlock(q, "e0", 10*time.Minute)
	id, _ := n.ix.BackendByName("e0")
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
