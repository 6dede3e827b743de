package router

import (
	"context"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// Backends the claim state held as active at start (a snapshot's) that
// this node does not list are removed from the registry once the grace is
// over, except one a peer reports load at and one made active again since;
// the sweep runs once, and not before the node lists anything.
func TestUnlistedBackendsAreRemovedOnce(t *testing.T) {
	a := newFakeBackend(t, "a")
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	var ix *tree.Index
	ids := map[string]tree.BackendID{}
	g := newRig(t, func(cfg *Config, d *Deps) {
		cfg.Discovery.UnlistedGrace = 10 * time.Minute
		d.Now = clock
		ix = d.Index
		for _, name := range []string{"a", "ghost", "busy", "revived"} {
			id, err := ix.EnsureBackend(name)
			if err != nil {
				t.Fatal(err)
			}
			ids[name] = id
		}
		d.Peers = &fakePeers{share: 1, inFlight: map[tree.BackendID]float64{ids["busy"]: 1}}
	}, a)
	active := func(name string) bool { _, ok := ix.Generation(ids[name]); return ok }

	now = now.Add(9 * time.Minute)
	if n := g.rt.sweepUnlisted(now); n != 0 || !active("ghost") {
		t.Fatalf("before the grace: %d removed, ghost active %v", n, active("ghost"))
	}
	// "revived" is removed and made active again by someone who lists it:
	// a new generation.
	g.rt.learner.Invalidate("revived", true)
	g.rt.learner.Invalidate("revived", false)
	now = now.Add(2 * time.Minute)
	if n := g.rt.sweepUnlisted(now); n != 1 {
		t.Fatalf("after the grace: %d removed, want 1 (ghost)", n)
	}
	if active("ghost") || !active("a") || !active("busy") || !active("revived") {
		t.Fatalf("active after the sweep: ghost %v (want false), a %v, busy %v, revived %v (want true)",
			active("ghost"), active("a"), active("busy"), active("revived"))
	}
	if got := g.counter("kvmesh_router_discovery_unlisted_removed_total"); got != 1 {
		t.Fatalf("kvmesh_router_discovery_unlisted_removed_total = %v, want 1", got)
	}
	// Once only: "busy" stays even when its peers fall silent.
	g.rt.peers = &fakePeers{share: 1}
	if n := g.rt.sweepUnlisted(now.Add(time.Hour)); n != 0 || !active("busy") {
		t.Fatalf("a second sweep removed %d", n)
	}
}

// A node whose discovery has delivered no list yet sweeps nothing: a
// source still failing at the end of the grace must not empty the
// registry. The sweep waits for the first list.
func TestUnlistedSweepWaitsForAList(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var ix *tree.Index
	g := newRig(t, func(cfg *Config, d *Deps) {
		cfg.Backends = nil
		cfg.Discovery.Mode = DiscoveryKubernetes // a source that has delivered nothing yet
		cfg.Discovery.Kubernetes.Selector = "app=vllm"
		cfg.Discovery.Models = []string{"m1"}
		d.Discoverer = silentDiscoverer{}
		cfg.Discovery.UnlistedGrace = time.Minute
		d.Now = func() time.Time { return now }
		ix = d.Index
		if _, err := ix.EnsureBackend("ghost"); err != nil {
			t.Fatal(err)
		}
	})
	id, _ := ix.BackendByName("ghost")
	if n := g.rt.sweepUnlisted(now.Add(time.Hour)); n != 0 {
		t.Fatalf("with nothing listed: %d removed", n)
	}
	a := newFakeBackend(t, "a")
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a.URL()}}); err != nil {
		t.Fatal(err)
	}
	if n := g.rt.sweepUnlisted(now.Add(time.Hour)); n != 1 {
		t.Fatalf("once a list came: %d removed, want ghost", n)
	}
	if _, active := ix.Generation(id); active {
		t.Fatal("ghost still active")
	}
}

// silentDiscoverer never delivers a list.
type silentDiscoverer struct{}

func (silentDiscoverer) Run(ctx context.Context, _ *DiscoverySink) error {
	<-ctx.Done()
	return nil
}
