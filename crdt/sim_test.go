package crdt

import (
	"flag"
	"fmt"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

var longSim = flag.Bool("crdt.long", false, "run the long randomized CRDT simulation (more seeds, more rounds, 32 replicas)")

// TestRandomizedSimulation: N replicas learn at random while the network
// drops, duplicates and reorders messages and partitions come and go; nodes
// restart. Once delivery resumes, every replica holds identical digests
// within a bounded number of rounds, and no expired claim is held anywhere.
func TestRandomizedSimulation(t *testing.T) {
	type run struct {
		seed         uint64
		nodes, steps int
	}
	runs := []run{{1, 3, 300}, {2, 8, 200}, {3, 16, 120}}
	switch {
	case *longSim:
		runs = append(runs, run{4, 32, 400}, run{5, 8, 2000}, run{6, 16, 1000}, run{7, 32, 600})
	case raceEnabled:
		runs = []run{{1, 3, 200}, {2, 8, 80}, {4, 32, 20}}
	case !testing.Short():
		runs = append(runs, run{4, 32, 60})
	}
	for _, rn := range runs {
		t.Run(fmt.Sprintf("seed%d-n%d", rn.seed, rn.nodes), func(t *testing.T) {
			s := newSimNet(t, rn.seed, func(c *Config, ic *tree.Config) {
				ic.Capacity = 1500  // small: eviction happens
				c.LogCapacity = 256 // small: peers fall behind and need full state
			})
			for i := 0; i < rn.nodes; i++ {
				s.add(fmt.Sprintf("n%02d", i))
			}
			backends := []string{"http://b0", "http://b1", "http://b2", "http://b3"}
			for step := 0; step < rn.steps; step++ {
				s.drop, s.dup, s.reorder = 0.2, 0.1, true
				for k := 0; k < 3; k++ {
					n := s.names[s.rng.IntN(len(s.names))]
					if !s.nodes[n].up {
						continue
					}
					fam := s.rng.IntN(20)
					s.learn(n, prompt(s.rng.IntN(1000), fam, 2+s.rng.IntN(12), 1+s.rng.IntN(3)), backends[s.rng.IntN(len(backends))], int64(200+s.rng.IntN(3000)))
				}
				switch x := s.rng.IntN(100); {
				case x < 3: // partition into two random groups
					for _, n := range s.names {
						s.group[n] = s.rng.IntN(2)
					}
				case x < 8: // heal
					clear(s.group)
				case x < 10: // a backend restarts somewhere
					n := s.names[s.rng.IntN(len(s.names))]
					if s.nodes[n].up {
						if _, err := s.nodes[n].r.Invalidate(backends[s.rng.IntN(len(backends))], false, s.now); err != nil {
							t.Fatal(err)
						}
					}
				case x < 12: // a node dies, or comes back empty
					n := s.names[s.rng.IntN(len(s.names))]
					if s.nodes[n].up {
						s.kill(n)
					} else {
						s.add(n)
					}
				}
				if step%7 == 0 {
					s.antiEntropy()
				}
				s.round()
				s.noneExpired()
			}
			// Delivery resumes: no loss, no partition.
			s.drop, s.dup = 0, 0
			clear(s.group)
			rounds := s.settle(300)
			s.noneExpired()
			// Loss, duplicates, reordering, partitions and restarts never
			// look like a peer that forgot us: no full transfer is restarted
			// for acks going back (each would resend the whole state).
			for _, n := range s.nodes {
				if n.up && n.r.Stats().AckResets != 0 {
					t.Errorf("%s restarted %d full transfers for acks going back", n.r.Name(), n.r.Stats().AckResets)
				}
			}
			t.Logf("%d nodes converged %d rounds after the network healed; %d messages, %.1f KiB", rn.nodes, rounds, s.sent, float64(s.bytes)/1024)
		})
	}
}
