package router

import (
	"context"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// listingPeers is a fakePeers that also says which backends the peers'
// load messages name, and whether every peer has been heard.
type listingPeers struct {
	*fakePeers
	named    map[tree.BackendID]bool
	complete bool
}

func (p *listingPeers) PeerListed(id tree.BackendID) (bool, bool) { return p.named[id], p.complete }

// Backends the claim state held as active at start (a snapshot's) that
// this node does not list are removed from the registry once the grace is
// over and every peer has been heard, except one a peer reports load at,
// has sent work to or names, and one made active again since; the sweep
// runs once.
func TestUnlistedBackendsAreRemovedOnce(t *testing.T) {
	a := newFakeBackend(t, "a")
	now := time.Unix(1_800_000_000, 0)
	var ix *tree.Index
	ids := map[string]tree.BackendID{}
	var peers *listingPeers
	g := newRig(t, func(cfg *Config, d *Deps) {
		cfg.Discovery.UnlistedGrace = 10 * time.Minute
		d.Now = func() time.Time { return now }
		ix = d.Index
		for _, name := range []string{"a", "ghost", "busy", "wrote", "named", "revived"} {
			id, err := ix.EnsureBackend(name)
			if err != nil {
				t.Fatal(err)
			}
			ids[name] = id
		}
		peers = &listingPeers{fakePeers: &fakePeers{share: 0.5, inFlight: map[tree.BackendID]float64{ids["busy"]: 1},
			written: map[tree.BackendID]float64{ids["wrote"]: 4096}}, named: map[tree.BackendID]bool{ids["named"]: true}}
		d.Peers = peers
	}, a)
	active := func(name string) bool { _, ok := ix.Generation(ids[name]); return ok }

	now = now.Add(9 * time.Minute) // the node's list is first seen here
	if n := g.rt.sweepUnlisted(now); n != 0 || !active("ghost") {
		t.Fatalf("before the grace: %d removed, ghost active %v", n, active("ghost"))
	}
	// "revived" is removed and made active again by someone who lists it:
	// a new generation.
	g.rt.learner.Invalidate("revived", true)
	g.rt.learner.Invalidate("revived", false)
	now = now.Add(2 * time.Minute)
	if n := g.rt.sweepUnlisted(now); n != 0 || !active("ghost") {
		t.Fatalf("with a peer not heard yet: %d removed, ghost active %v", n, active("ghost"))
	}
	peers.complete = true
	if n := g.rt.sweepUnlisted(now); n != 1 {
		t.Fatalf("after the grace: %d removed, want 1 (ghost)", n)
	}
	for _, name := range []string{"a", "busy", "wrote", "named", "revived"} {
		if !active(name) {
			t.Errorf("%s removed", name)
		}
	}
	if active("ghost") {
		t.Error("ghost still active")
	}
	if got := g.counter("kvmesh_router_discovery_unlisted_removed_total"); got != 1 {
		t.Fatalf("kvmesh_router_discovery_unlisted_removed_total = %v, want 1", got)
	}
	// Once only: the others stay even when the peers fall silent.
	g.rt.peers = &fakePeers{share: 1}
	if n := g.rt.sweepUnlisted(now.Add(time.Hour)); n != 0 {
		t.Fatalf("a second sweep removed %d", n)
	}
}

// unlisted_grace 0 turns the sweep off.
func TestUnlistedSweepOff(t *testing.T) {
	a := newFakeBackend(t, "a")
	var ix *tree.Index
	g := newRig(t, func(cfg *Config, d *Deps) {
		cfg.Discovery.UnlistedGrace = 0
		ix = d.Index
		if _, err := ix.EnsureBackend("ghost"); err != nil {
			t.Fatal(err)
		}
	}, a)
	id, _ := ix.BackendByName("ghost")
	for _, later := range []time.Duration{0, 24 * time.Hour} {
		if n := g.rt.sweepUnlisted(time.Now().Add(later)); n != 0 {
			t.Fatalf("off, yet %d removed", n)
		}
	}
	if _, active := ix.Generation(id); !active {
		t.Fatal("ghost removed with the sweep off")
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
	// The first list may be partial (a DNS answer with the ready pods
	// only): two discovery intervals more.
	if n := g.rt.sweepUnlisted(now.Add(time.Hour)); n != 0 {
		t.Fatalf("at the first list: %d removed", n)
	}
	if n := g.rt.sweepUnlisted(now.Add(time.Hour + 2*DefaultDiscoveryConfig().Interval)); n != 1 {
		t.Fatalf("two intervals after the first list: %d removed, want ghost", n)
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
