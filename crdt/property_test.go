package crdt

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// A generated state: claims and a floor. The join of states is the index
// holding the claims of both (per (key, backend) the dominating value) under
// the higher floor.
type genState struct {
	reg    []tree.BackendEntry
	claims []tree.Claim
	floor  int64
}

func genStates(r *rand.Rand, n int) []genState {
	out := make([]genState, n)
	for i := range out {
		// A registry: each backend at generation 0 or 1 (restarted once).
		for b := 0; b < 3; b++ {
			gen := uint16(r.IntN(2))
			out[i].reg = append(out[i].reg, tree.BackendEntry{Name: []string{"b0", "b1", "b2"}[b], Gen: gen,
				State: tree.BackendActive, Time: tree.MakeTimestamp(int64(gen)*500, 0), Origin: 1})
		}
		k := 50 + r.IntN(200)
		for j := 0; j < k; j++ {
			// Few keys and backends, so states overlap and conflict often.
			// A claim's generation is at most its state's registry's.
			ms := int64(1000 + r.IntN(100))
			b := r.IntN(3)
			gen := uint16(r.IntN(int(out[i].reg[b].Gen) + 1))
			out[i].claims = append(out[i].claims, tree.Claim{Key: tree.Key(1 + r.IntN(120)), Backend: tree.BackendID(b),
				Gen: gen, Time: tree.MakeTimestamp(ms, uint16(r.IntN(3))), Expires: ms + int64(r.IntN(4))*1000, Origin: tree.NodeID(r.IntN(3))})
		}
		out[i].floor = int64(r.IntN(3)) * 1000
	}
	return out
}

// join materializes the join of states, in order, as an index.
func joinStates(t *testing.T, states ...genState) []string {
	t.Helper()
	cfg := tree.DefaultConfig()
	cfg.Capacity = 1 << 12 // never full: the join itself, without eviction
	ix, err := tree.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b0", "b1", "b2"} {
		if _, err := ix.EnsureBackend(name); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range states {
		// A state arrives as a batch does: registry, floor, claims.
		for _, e := range s.reg {
			if _, _, err := ix.JoinBackend(e); err != nil {
				t.Fatal(err)
			}
		}
		ix.RaiseFloor(s.floor, 0)
		ix.UpsertBatch(s.claims, 0, nil)
	}
	return sortedContents(ix, 0)
}

func (s genState) shuffled(r *rand.Rand) genState {
	c := slices.Clone(s.claims)
	r.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
	return genState{reg: s.reg, claims: c, floor: s.floor}
}

func TestJoinIsASemilattice(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for round := 0; round < 200; round++ {
		s := genStates(r, 3)
		a, b, c := s[0], s[1], s[2]
		// Idempotent: A ⊔ A = A.
		if !slices.Equal(joinStates(t, a, a), joinStates(t, a)) {
			t.Fatal("join is not idempotent")
		}
		// Commutative: A ⊔ B = B ⊔ A, whatever the order inside each.
		if x, y := joinStates(t, a, b), joinStates(t, b.shuffled(r), a.shuffled(r)); !slices.Equal(x, y) {
			t.Fatalf("join is not commutative (round %d): %d vs %d claims", round, len(x), len(y))
		}
		// Associative: (A ⊔ B) ⊔ C = A ⊔ (B ⊔ C).
		ab := genState{reg: append(slices.Clone(a.reg), b.reg...), claims: append(slices.Clone(a.claims), b.claims...), floor: max(a.floor, b.floor)}
		bc := genState{reg: append(slices.Clone(b.reg), c.reg...), claims: append(slices.Clone(b.claims), c.claims...), floor: max(b.floor, c.floor)}
		if !slices.Equal(joinStates(t, ab, c), joinStates(t, a, bc)) {
			t.Fatal("join is not associative")
		}
	}
}
