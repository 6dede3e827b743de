package mesh

import (
	"slices"
	"sync"
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
	keys := owner.learnEveryBlock(p, "e0", time.Minute)
	owner.learnEveryBlock(q, "e0", time.Minute)
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
	owner.learnEveryBlock(p, "e0", time.Minute)
	everywhere("the re-store", p, fullDepth(p))
	// AllBlocksCleared.
	owner.n.Invalidate("e0", false)
	everywhere("the clear (p)", p, 0)
	everywhere("the clear (q)", q, 0)
	c.waitConverged(time.Minute)
}

// Each engine stream's owner is chosen among the members that consume the
// same streams (the same PreciseStreams digest, announced in their tags):
// a member configured otherwise (a rollout half done, a node without
// precise mode) is not offered streams it would never read, and picks
// owners among its own kind.
func TestAliveMembersConsumeTheSameStreams(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) {
		switch cfg.Name {
		case nodeName(0), nodeName(1):
			cfg.PreciseStreams = "0123456789abcdef"
		case nodeName(2):
			cfg.PreciseStreams = "fedcba9876543210"
		}
	})
	c.startN(4) // the fourth runs without precise mode
	c.waitMesh(time.Minute)
	want := map[string][]string{
		nodeName(0): {nodeName(0), nodeName(1)},
		nodeName(1): {nodeName(0), nodeName(1)},
		nodeName(2): {nodeName(2)},
		nodeName(3): {nodeName(3)},
	}
	for name, w := range want {
		if got := c.node(name).n.AliveMembers(); !slices.Equal(got, w) {
			t.Errorf("%s: AliveMembers %v, want %v", name, got, w)
		}
	}
}

// OnEnded hands a node the tombstones its peers send, in its own backend
// ids: the keys the owner ended, and no claim that merely arrived.
func TestOnEndedTellsThePeersTombstones(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(2)
	c.waitMesh(time.Minute)
	owner, peer := c.node(nodeName(0)), c.node(nodeName(1))
	var mu sync.Mutex
	told := map[tree.Key]tree.BackendID{}
	peer.n.OnEnded(func(keys []tree.Key, b tree.BackendID) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			told[k] = b
		}
	})
	p := randomPrompt(newRand(5), 8)
	keys := owner.learnEveryBlock(p, "e0", time.Minute)
	waitFor(t, 20*time.Second, "the claims on the peer", func() bool { return peer.depth(p, "e0") == fullDepth(p) })
	mu.Lock()
	if len(told) != 0 {
		t.Fatalf("told of %d ended claims before any was ended", len(told))
	}
	mu.Unlock()
	id, _ := owner.ix.BackendByName("e0")
	owner.n.End(keys[len(keys)-3:], id)
	peerID, _ := peer.ix.BackendByName("e0")
	waitFor(t, 20*time.Second, "the peer told of the 3 ended claims", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(told) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys[len(keys)-3:] {
		if b, ok := told[k]; !ok || b != peerID {
			t.Errorf("key %x: told %v (backend %d), want backend %d", k, ok, b, peerID)
		}
	}
}
