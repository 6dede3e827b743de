package crdt

import (
	"crypto/sha256"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// FuzzSnapshotBody mutates a snapshot's body and recomputes its checksum,
// so the mutations reach the parser and Apply (FuzzParseSnapshot's stop at
// the SHA-256). What parses applies to a small index (its registry and
// capacity overflow) without a panic, leaves only claims that are live and
// within maxTTL of their time, and applying it again changes nothing.
func FuzzSnapshotBody(f *testing.F) {
	const now, maxTTL = 1_000_000, 3_600_000
	body := func(data []byte) []byte { return data[:len(data)-sha256.Size] }

	// A snapshot with several backends, one restarted, claims of two
	// lives and a floor.
	s := newSimNet(f, 43, func(_ *Config, ic *tree.Config) { ic.ForgetRemovedMillis = 60_000 })
	s.add("a")
	for i := 0; i < 12; i++ {
		ttl := int64(600_000)
		if i%4 == 0 {
			ttl = 5_000
		}
		s.learn("a", prompt(i, i%3, 4, 1), []string{"b0", "b1", "b2"}[i%3], ttl)
	}
	a := s.node("a").r
	if _, err := a.Invalidate("b1", false, s.now); err != nil {
		f.Fatal(err)
	}
	a.Index().RaiseFloor(s.now-1, s.now)
	data, _, err := AppendSnapshot(nil, a.Index(), s.now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body(data))
	// One with a forgotten name (version 2).
	if _, err := a.Invalidate("b2", true, s.now); err != nil {
		f.Fatal(err)
	}
	s.now += 61_000
	a.ForgetRemoved(s.now)
	if data, _, err = AppendSnapshot(nil, a.Index(), s.now); err != nil {
		f.Fatal(err)
	}
	f.Add(body(data))
	// An empty one.
	empty, _ := tree.New(tree.DefaultConfig())
	data, _, _ = AppendSnapshot(nil, empty, now)
	f.Add(body(data))

	small := s.icfg
	small.Capacity, small.MaxBackends, small.EvictFraction = 16, 2, 0.25
	f.Fuzz(func(t *testing.T, b []byte) {
		sum := sha256.Sum256(b)
		snap, err := ParseSnapshot(append(b[:len(b):len(b)], sum[:]...))
		if err != nil {
			return
		}
		ix, err := tree.New(small)
		if err != nil {
			t.Fatal(err)
		}
		snap.Apply(ix, now, maxTTL)
		ix.Range(now, func(c *tree.Claim) bool {
			if c.Expires <= now || c.Expires <= ix.Floor() || c.Expires > c.Time.Millis()+maxTTL {
				t.Fatalf("restored claim %+v (floor %d)", *c, ix.Floor())
			}
			return true
		})
		if ix.Len() > small.Capacity {
			t.Fatalf("%d claims in an index of %d", ix.Len(), small.Capacity)
		}
		before := sortedContents(ix, now)
		if again := snap.Apply(ix, now, maxTTL); again.Claims != 0 {
			t.Fatalf("a second apply changed %d claims", again.Claims)
		}
		if after := sortedContents(ix, now); len(after) != len(before) {
			t.Fatalf("a second apply left %d claims, the first %d", len(after), len(before))
		}
	})
}
