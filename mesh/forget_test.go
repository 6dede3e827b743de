package mesh

import (
	"sync/atomic"
	"testing"
	"time"
)

// A backend removed on one node is forgotten by every node once the
// horizon has passed (on the nodes' own clocks, here jumped ahead), its id
// goes to the next new name, and the mesh converges again without the
// removal coming back from anyone.
func TestMeshForgetsRemovedBackends(t *testing.T) {
	var skip atomic.Int64 // ms added to every node's clock
	c := newTestCluster(t, func(cfg *Config) {
		lanProbes(cfg)
		cfg.SweepInterval = 50 * time.Millisecond
	})
	c.now = func() time.Time { return time.Now().Add(time.Duration(skip.Load()) * time.Millisecond) }
	c.icfg.ForgetRemovedMillis = 2 * DefaultConfig().Replica.MaxTTL.Milliseconds()
	c.startN(2)
	c.waitMesh(30 * time.Second)
	a, b := c.node(nodeName(0)), c.node(nodeName(1))
	p := randomPrompt(newRand(3), 8)
	a.learn(t, p, "x", time.Minute)
	a.learn(t, p, "kept", time.Hour)
	c.waitConverged(30 * time.Second)
	if b.depth(p, "x") == 0 {
		t.Fatal("b never learned x's claims (the test would prove nothing)")
	}
	xa, _ := a.ix.BackendByName("x")
	a.n.Invalidate("x", true)
	c.waitConverged(30 * time.Second)
	skip.Store(c.icfg.ForgetRemovedMillis + 60_000)
	waitFor(t, 30*time.Second, "every node to forget x", func() bool {
		_, onA := a.ix.BackendByName("x")
		_, onB := b.ix.BackendByName("x")
		return !onA && !onB
	})
	for _, tn := range []*testNode{a, b} {
		if _, ok := tn.ix.Forgotten("x"); !ok {
			t.Errorf("%s keeps no entry for x", tn.name)
		}
		if _, ok := tn.ix.BackendByName("kept"); !ok {
			t.Errorf("%s lost the live backend", tn.name)
		}
	}
	if id, err := a.ix.EnsureBackend("y"); err != nil || id != xa {
		t.Fatalf("y got id %d (%v), want x's %d", id, err, xa)
	}
	c.waitConverged(30 * time.Second)
	if _, ok := b.ix.BackendByName("x"); ok {
		t.Fatal("x came back on b")
	}
}
