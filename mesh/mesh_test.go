package mesh

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var backends = []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000", "http://10.0.0.4:8000"}

type learned struct {
	p       prompt
	backend string
	origin  string
}

// learnRandom has random live nodes learn k random prompts.
func (c *testCluster) learnRandom(rng *rand.Rand, k int) []learned {
	live := c.live()
	out := make([]learned, 0, k)
	for i := 0; i < k; i++ {
		tn := live[rng.IntN(len(live))]
		l := learned{p: randomPrompt(rng, 2+rng.IntN(40)), backend: backends[rng.IntN(len(backends))], origin: tn.name}
		tn.learn(c.t, l.p, l.backend, time.Hour)
		out = append(out, l)
	}
	return out
}

// checkRoutable asserts that every live node matches every learned prompt
// at its full depth on its backend.
func (c *testCluster) checkRoutable(ls []learned) {
	c.t.Helper()
	for _, tn := range c.live() {
		for _, l := range ls {
			if d, want := tn.depth(l.p, l.backend), fullDepth(l.p); d != want {
				c.t.Fatalf("%s matches a prompt learned on %s at depth %d, want %d", tn.name, l.origin, d, want)
			}
		}
	}
}

// TestConvergence: clusters of 3, 8 and 32 nodes form a full mesh through
// one seed; after random learns on random nodes every node holds identical
// state and routes every learned prompt to its backend.
func TestConvergence(t *testing.T) {
	for _, size := range []int{3, 8, 32} {
		t.Run(fmt.Sprintf("nodes=%d", size), func(t *testing.T) {
			c := newTestCluster(t, nil)
			c.startN(size)
			took := c.waitMesh(30 * time.Second)
			t.Logf("%d nodes formed a full mesh in %v", size, took.Round(time.Millisecond))
			rng := rand.New(rand.NewPCG(uint64(size), 1))
			ls := c.learnRandom(rng, 200)
			took = c.waitConverged(30 * time.Second)
			t.Logf("converged %v after the last learn", took.Round(time.Millisecond))
			c.checkRoutable(ls)
		})
	}
}
