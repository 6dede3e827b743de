package mesh

import (
	"testing"
	"time"
)

// TestLearnDoesNotWaitForBusyReplica: while the replica is held (a digest
// or a large apply in progress), Learn queues the claims and returns; they
// are written and replicated once the replica is free. With the queue
// full, Learn waits instead of dropping claims.
func TestLearnDoesNotWaitForBusyReplica(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.LearnQueue = 8 })
	c.startN(2)
	c.waitMesh(time.Minute)
	tn := c.node("n00")
	rng := newRand(3)
	p1 := randomPrompt(rng, 70) // 4 learn depths: half, 32, 64, end
	p2 := randomPrompt(rng, 70)

	tn.n.mu.Lock() // the replica is busy
	done := make(chan struct{})
	go func() { tn.learn(t, p1, backends[0], time.Hour); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		tn.n.mu.Unlock()
		t.Fatal("Learn waited for a busy replica")
	}
	if got := counterValue(tn.n.m.learnsQueued); got != 1 {
		tn.n.mu.Unlock()
		t.Fatalf("learns queued = %v, want 1", got)
	}
	// The queue holds 8 keys: p1 took 4, p2 needs 4 more, a third must wait.
	go func() { tn.learn(t, p2, backends[1], time.Hour) }()
	waitFor(t, 10*time.Second, "the second learn to queue", func() bool { return counterValue(tn.n.m.learnsQueued) == 2 })
	p3 := randomPrompt(rng, 70)
	blocked := make(chan struct{})
	go func() { tn.learn(t, p3, backends[2], time.Hour); close(blocked) }()
	select {
	case <-blocked:
		tn.n.mu.Unlock()
		t.Fatal("Learn returned with the queue full and the replica busy: its claims would be lost")
	case <-time.After(100 * time.Millisecond):
	}
	if d := tn.depth(p1, backends[0]); d != 0 {
		t.Fatalf("a queued learn is in the index before the replica took it (depth %d)", d)
	}
	tn.n.mu.Unlock()
	<-blocked
	ls := []learned{{p1, backends[0], "n00"}, {p2, backends[1], "n00"}, {p3, backends[2], "n00"}}
	waitFor(t, 10*time.Second, "queued learns to reach both nodes", func() bool {
		for _, n := range c.live() {
			for _, l := range ls {
				if n.depth(l.p, l.backend) != fullDepth(l.p) {
					return false
				}
			}
		}
		return true
	})
}

// TestEncryptedGossip: nodes sharing a gossip key form a mesh; a node with
// another key cannot join it.
func TestEncryptedGossip(t *testing.T) {
	key, _ := GenerateGossipKey()
	other, _ := GenerateGossipKey()
	c := newTestCluster(t, func(cfg *Config) {
		cfg.DevMode = false
		cfg.GossipKey = key
		if cfg.Name == "intruder" {
			cfg.GossipKey = other
		}
	})
	c.startN(3)
	c.waitMesh(time.Minute)
	for _, tn := range c.live() {
		if s := tn.n.serf.Load(); !s.EncryptionEnabled() {
			t.Fatalf("%s gossips in the clear", tn.name)
		}
	}
	in := c.start("intruder")
	waitFor(t, 10*time.Second, "the intruder's join attempts to fail", func() bool {
		return counterValue(in.n.m.joins.WithLabelValues("failed")) >= 2
	})
	for _, tn := range c.live() {
		for _, m := range tn.n.Members() {
			if tn.name != "intruder" && m.Name == "intruder" {
				t.Fatalf("%s lists the intruder as %s", tn.name, m.Status)
			}
		}
	}
	if len(in.n.Members()) != 1 {
		t.Fatalf("the intruder sees %d members", len(in.n.Members()))
	}
}
