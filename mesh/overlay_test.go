package mesh

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"testing"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// graphShape returns the maximum degree, mean degree and diameter of an
// overlay graph; the diameter is -1 when the graph is disconnected.
func graphShape(g map[string][]string) (maxDeg int, meanDeg float64, diameter int) {
	total := 0
	for _, nb := range g {
		maxDeg = max(maxDeg, len(nb))
		total += len(nb)
	}
	meanDeg = float64(total) / float64(len(g))
	for src := range g {
		dist := map[string]int{src: 0}
		queue := []string{src}
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			for _, v := range g[u] {
				if _, ok := dist[v]; !ok {
					dist[v] = dist[u] + 1
					diameter = max(diameter, dist[v])
					queue = append(queue, v)
				}
			}
		}
		if len(dist) != len(g) {
			return maxDeg, meanDeg, -1
		}
	}
	return maxDeg, meanDeg, diameter
}

func log2ceil(n int) int { return bits.Len(uint(n - 1)) }

// TestOverlayShape: for meshes from just above the threshold to a thousand
// nodes, with two naming schemes, the overlay is connected, undirected, has
// degree O(log N) (at most 3·log2 N + 2·RingNeighbours) and diameter at most
// log2 N.
func TestOverlayShape(t *testing.T) {
	for _, n := range []int{33, 48, 64, 128, 256, 1000} {
		for _, prefix := range []string{"router-", "kvmesh-7d9f8c6b5-"} {
			members := names(prefix, n)
			g := overlayGraph(members, 1)
			for a, nb := range g {
				for _, b := range nb {
					if !slices.Contains(g[b], a) {
						t.Fatalf("n=%d: edge %s-%s is one-way", n, a, b)
					}
					if a == b {
						t.Fatalf("n=%d: %s is its own neighbour", n, a)
					}
				}
			}
			maxDeg, meanDeg, diam := graphShape(g)
			lg := log2ceil(n)
			t.Logf("n=%4d %-18s max degree %2d, mean %.1f, diameter %d (log2 N = %d)", n, prefix, maxDeg, meanDeg, diam, lg)
			if diam < 0 {
				t.Fatalf("n=%d: overlay is disconnected", n)
			}
			if diam > lg {
				t.Errorf("n=%d: diameter %d > log2 N = %d", n, diam, lg)
			}
			if maxDeg > 3*lg+2 {
				t.Errorf("n=%d: max degree %d > 3·log2 N + 2 = %d", n, maxDeg, 3*lg+2)
			}
			if meanDeg > 2.5*math.Log2(float64(n)) {
				t.Errorf("n=%d: mean degree %.1f > 2.5·log2 N", n, meanDeg)
			}
		}
	}
}

// TestOverlayChurn: a node joining an overlay rewires O(log N) edges among
// the members already there, where offsets on the sorted member list would
// rewire O(N).
func TestOverlayChurn(t *testing.T) {
	for _, n := range []int{40, 48, 70, 100, 200} {
		members := names("router-", n)
		before := overlayGraph(members, 1)
		for _, newcomer := range []string{"router-new", "zz-late", "a"} {
			after := overlayGraph(append(slices.Clone(members), newcomer), 1)
			changed := 0 // edges between old members that appeared or vanished
			for _, a := range members {
				for _, b := range after[a] {
					if b != newcomer && !slices.Contains(before[a], b) {
						changed++
					}
				}
				for _, b := range before[a] {
					if !slices.Contains(after[a], b) {
						changed++
					}
				}
			}
			changed /= 2 // each undirected edge was counted from both ends
			t.Logf("n=%d: join of %s rewired %d edges among old members; it has %d neighbours", n, newcomer, changed, len(after[newcomer]))
			// Offsets on the sorted member list rewire 70 edges at n=48 and
			// 500 at n=200 for the same joins.
			if limit := 5 * log2ceil(n+1); changed > limit {
				t.Errorf("n=%d: a join rewired %d edges among old members; want at most 5·log2 N = %d", n, changed, limit)
			}
		}
	}
}

// TestOverlayDeterministic: every node computes the same graph whatever
// order it lists the members in.
func TestOverlayDeterministic(t *testing.T) {
	members := names("n", 50)
	a := overlayGraph(members, 2)
	rev := slices.Clone(members)
	slices.Reverse(rev)
	b := overlayGraph(rev, 2)
	for _, m := range members {
		if !slices.Equal(a[m], b[m]) {
			t.Fatalf("%s: %v vs %v", m, a[m], b[m])
		}
		if got := overlayNeighbours(m, rev, 2); !slices.Equal(got, a[m]) {
			t.Fatalf("overlayNeighbours(%s) = %v, graph says %v", m, got, a[m])
		}
	}
}

// TestOverlayRingNeighbours: with RingNeighbours=k every node is linked to
// its k ring successors and predecessors.
func TestOverlayRingNeighbours(t *testing.T) {
	members := names("n", 40)
	r := newRing(members)
	g := overlayGraph(members, 3)
	for i, rn := range r {
		for k := 1; k <= 3; k++ {
			for _, j := range []int{(i + k) % len(r), (i - k + len(r)) % len(r)} {
				if !slices.Contains(g[rn.name], r[j].name) {
					t.Fatalf("%s lacks ring neighbour %s at distance %d", rn.name, r[j].name, k)
				}
			}
		}
	}
}

func TestWantOverlayHysteresis(t *testing.T) {
	cases := []struct {
		current    bool
		size       int
		want       bool
		explaining string
	}{
		{false, 32, false, "at the threshold: full mesh"},
		{false, 33, true, "above it: overlay"},
		{true, 30, true, "a little below it: stay in the overlay"},
		{true, 25, true, "above 3/4 of it: stay"},
		{true, 24, false, "at 3/4: back to the full mesh"},
		{false, 3, false, "small"},
	}
	for _, c := range cases {
		if got := wantOverlay(c.current, c.size, 32); got != c.want {
			t.Errorf("wantOverlay(%v, %d, 32) = %v (%s)", c.current, c.size, got, c.explaining)
		}
	}
}

func TestFullMesh(t *testing.T) {
	got := fullMesh("b", []string{"c", "b", "a"})
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("fullMesh = %v", got)
	}
}
