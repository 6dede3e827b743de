package mesh

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
)

// TestOverlayCluster: 48 nodes (above the default RelayThreshold of 32)
// switch to the relaying overlay, each replicating with O(log N)
// neighbours; random learns still reach every node, and each node's delta
// egress per learned claim stays within its degree times the per-peer cost
// of a claim, where a full mesh would cost a claim's origin 47 peers.
func TestOverlayCluster(t *testing.T) {
	const size = 48
	// 48 race-instrumented nodes share two cores here, which makes every
	// node slow to answer: probe as on a LAN (this test kills no one), and
	// give acks half a minute before retransmitting. The in-memory network
	// loses nothing, so a retransmission here only ever answers a late ack;
	// with 2 s, on a machine with one core kept busy every one of the 48
	// nodes retransmitted while the claims spread, its resent deltas counted
	// in its egress, and the byte budget below checked no node at all. The
	// topology under test depends on neither setting.
	c := newTestCluster(t, func(cfg *Config) {
		lanProbes(cfg)
		cfg.Replica.RetransmitAfter = 30 * time.Second
		cfg.FlushInterval = 25 * time.Millisecond
		cfg.AntiEntropyInterval = 5 * time.Second
	})
	c.startN(size)
	// The waits are generous limits, not measurements: on a machine shared
	// with the rest of make test and a busy core, 48 race-instrumented
	// nodes took over 90 s to form (1-2 s alone).
	took := c.waitMesh(5 * time.Minute)
	t.Logf("%d nodes formed the overlay in %v", size, took.Round(time.Millisecond))
	maxDeg := 0
	for _, tn := range c.live() {
		v := tn.n.view.Load()
		if !v.overlay {
			t.Fatalf("%s is not in overlay mode with %d members", tn.name, size)
		}
		maxDeg = max(maxDeg, len(v.peers))
	}
	if lg := log2ceil(size); maxDeg > 3*lg+2 {
		t.Fatalf("max degree %d > 3·log2 N + 2 = %d", maxDeg, 3*lg+2)
	}
	// Let the topology switch's full-state transfers finish.
	waitFor(t, 3*time.Minute, "full-state transfers to finish", func() bool {
		for _, tn := range c.live() {
			tn.n.mu.Lock()
			ps := tn.n.rep.Peers()
			tn.n.mu.Unlock()
			for _, p := range ps {
				if p.InFullSync || p.Backlog > 0 {
					return false
				}
			}
		}
		return true
	})

	before := map[string]float64{}
	retransmitsBefore := map[string]uint64{}
	var changesBefore uint64
	for _, tn := range c.live() {
		before[tn.name] = counterValue(tn.n.m.sentBytesBy[crdt.MsgDelta])
		st := tn.n.stats()
		changesBefore += st.LocalChanges
		retransmitsBefore[tn.name] = st.Retransmits
	}
	rng := rand.New(rand.NewPCG(48, 48))
	ls := c.learnRandom(rng, 2*size)
	took = c.waitConverged(3 * time.Minute)
	t.Logf("converged %v after the last learn", took.Round(time.Millisecond))
	c.checkRoutable(ls)

	var claims uint64
	for _, tn := range c.live() {
		claims += tn.n.stats().LocalChanges
	}
	claims -= changesBefore
	// A node that retransmitted (its acks came late: a busy machine, not
	// the topology) sent some deltas twice; its bytes are no measure of
	// the per-claim cost and it is left out of the budget.
	worst, checked := 0.0, 0
	for _, tn := range c.live() {
		if re := tn.n.stats().Retransmits - retransmitsBefore[tn.name]; re > 0 {
			t.Logf("%s retransmitted %d messages: left out of the byte budget", tn.name, re)
			continue
		}
		checked++
		sent := counterValue(tn.n.m.sentBytesBy[crdt.MsgDelta]) - before[tn.name]
		deg := len(tn.peers())
		perPeer := sent / float64(claims) / float64(deg)
		worst = max(worst, perPeer)
		if perPeer > 48 {
			t.Errorf("%s sent %.0f delta bytes for %d claims over %d neighbours: %.1f B per claim per neighbour, budget 48",
				tn.name, sent, claims, deg, perPeer)
		}
	}
	t.Logf("%d claims; max degree %d (a full mesh: %d); worst of %d nodes without retransmissions sent %.1f delta bytes per claim per neighbour",
		claims, maxDeg, size-1, checked, worst)
	// The budget must have measured the overlay, not a handful of nodes.
	if checked < size/2 {
		t.Errorf("only %d of %d nodes sent no retransmission while the claims spread: the byte budget measured too few", checked, size)
	}
}

// TestTopologySwitch: a mesh growing past RelayThreshold switches every
// node to the overlay (a new Replica with relaying on) and shrinking to
// 3/4 of it switches back; claims learned in each phase reach every node.
func TestTopologySwitch(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.RelayThreshold = 4 })
	c.startN(4)
	c.waitMesh(time.Minute)
	rng := rand.New(rand.NewPCG(4, 4))
	ls := c.learnRandom(rng, 20)
	c.waitConverged(time.Minute)
	for _, tn := range c.live() {
		if tn.n.view.Load().overlay {
			t.Fatalf("%s uses the overlay at the threshold", tn.name)
		}
	}

	c.start("n04")
	c.start("n05")
	c.waitMesh(time.Minute)
	for _, tn := range c.live() {
		if !tn.n.view.Load().overlay {
			t.Fatalf("%s does not use the overlay with 6 members", tn.name)
		}
		if tn.name < "n04" && counterValue(tn.n.m.topologyChanges) != 1 {
			t.Fatalf("%s changed topology %v times, want 1", tn.name, counterValue(tn.n.m.topologyChanges))
		}
	}
	ls = append(ls, c.learnRandom(rng, 20)...)
	c.waitConverged(time.Minute)
	c.checkRoutable(ls)

	// 4 members: above 3/4 of the threshold, the overlay stays.
	c.kill("n05")
	c.kill("n04")
	c.waitMesh(time.Minute)
	if !c.node("n00").n.view.Load().overlay {
		t.Fatal("n00 left the overlay at 4 members: no hysteresis")
	}
	// 3 members: back to the full mesh.
	c.kill("n03")
	c.waitMesh(time.Minute)
	for _, tn := range c.live() {
		if tn.n.view.Load().overlay {
			t.Fatalf("%s still uses the overlay with 3 members", tn.name)
		}
	}
	ls = append(ls, c.learnRandom(rng, 20)...)
	c.waitConverged(time.Minute)
	c.checkRoutable(ls)
}
