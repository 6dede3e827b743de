package mesh

import (
	"hash/fnv"
	"math/bits"
	"slices"
	"sort"
)

// Topology: with whom a node replicates.
//
// Up to RelayThreshold members the mesh is a full mesh: every node sends its
// own claims to every peer and relays nothing (crdt.Config.Relay off), so a
// claim costs its origin one message per peer and reaches everyone in one
// hop.
//
// Above the threshold each node replicates only with its overlay
// neighbours, and relays what is new to it (crdt.Config.Relay on): a claim
// floods the overlay, each node forwarding it once to each neighbour but the
// one it came from, so a node's egress per claim is bounded by its degree
// instead of growing with the mesh.
//
// The overlay is a Chord-like finger graph on a hash ring. Every member sits
// at ringPos(name) on a 64-bit ring. A node links to its RingNeighbours
// successors and predecessors, and has long-range fingers: for b = 1, 2, ...
// the first member at or after pos + 2^(64-b) (half the ring away, a
// quarter, an eighth, ... until that is the direct successor). A member
// accepts at most log2 N + 4 fingers and passes the rest on to its
// successor, or a member after a wide gap on the ring would collect three
// times the average. Edges are undirected: both ends replicate with each
// other, and every node computes the same graph from the same member list.
//
// With N members a node has about log2 N fingers and about as many members
// pointing at it: degree ~2·log2 N (measured: mean 12, max 19 at N = 64;
// mean 20, max 29 at N = 1,000). Fingers halve the ring distance to any
// target at each hop, so the diameter is at most log2 N (measured: 3 at
// N = 64, 5 at N = 1,000). Offsets on the sorted member list (±1, ±2, ±4,
// ...) would give the same bounds, but one joining node shifts the index of
// every member after it and rewires O(N) edges (500 at N = 200); on the hash
// ring it takes over only the fingers that now land on it, plus the overflow
// they displace: O(log N) edges (4 to 37 at N = 200, TestOverlayChurn).
// That matters because every new edge starts with a full-state transfer.

// wantOverlay decides the topology for a mesh of size members (this node
// included), with hysteresis: switch to the overlay above threshold, back to
// the full mesh at 3/4 of it.
func wantOverlay(current bool, size, threshold int) bool {
	if current {
		return size > threshold*3/4
	}
	return size > threshold
}

// ringPos is a member's position on the overlay ring.
func ringPos(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	x := h.Sum64()
	// splitmix64 finalizer: fnv's high bits are weak for similar names
	// ("router-1", "router-2"), and positions must spread over the ring.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

type ringNode struct {
	pos  uint64
	name string
}

// ring is the members sorted by position (then name, for equal positions).
type ring []ringNode

func newRing(members []string) ring {
	r := make(ring, len(members))
	for i, m := range members {
		r[i] = ringNode{pos: ringPos(m), name: m}
	}
	sort.Slice(r, func(i, j int) bool {
		if r[i].pos != r[j].pos {
			return r[i].pos < r[j].pos
		}
		return r[i].name < r[j].name
	})
	return r
}

// successor is the index of the first member at or after position x,
// wrapping around.
func (r ring) successor(x uint64) int {
	i := sort.Search(len(r), func(i int) bool { return r[i].pos >= x })
	if i == len(r) {
		return 0
	}
	return i
}

// fingers appends the indexes of member i's fingers (possibly repeated).
func (r ring) fingers(i, ringNeighbours int, dst []int) []int {
	n := len(r)
	for k := 1; k <= ringNeighbours && k < n; k++ {
		dst = append(dst, (i+k)%n, (i-k+n)%n)
	}
	next := (i + 1) % n
	for b := 1; b < 64; b++ {
		j := r.successor(r[i].pos + 1<<(64-b))
		if j == next {
			break // every shorter jump lands on the successor too
		}
		if j != i {
			dst = append(dst, j)
		}
	}
	return dst
}

// overlayNeighbours returns self's neighbours in the overlay over members
// (which include self), sorted by name.
func overlayNeighbours(self string, members []string, ringNeighbours int) []string {
	g := overlayGraph(members, ringNeighbours)
	return g[self]
}

// overlayGraph returns every member's neighbours, sorted by name.
func overlayGraph(members []string, ringNeighbours int) map[string][]string {
	r := newRing(members)
	n := len(r)
	adj := make([]map[int]struct{}, n)
	for i := range adj {
		adj[i] = make(map[int]struct{})
	}
	link := func(i, j int) {
		adj[i][j] = struct{}{}
		adj[j][i] = struct{}{}
	}
	for i := range r {
		for k := 1; k <= ringNeighbours && k < n; k++ {
			link(i, (i+k)%n)
		}
	}
	// Long-range fingers. Uncapped, a member after a wide gap on the ring
	// would collect many more fingers than average (degree 69 against a mean
	// of 21 at N = 1,000), so each member accepts at most limit fingers and
	// passes the rest on to its successor. Requests are settled walking the
	// ring once, so a change in one place moves only the overflow of the
	// members right after it.
	demand := make([][]int, n) // sources whose finger targets j
	var mine []int
	for i := range r {
		next := (i + 1) % n
		mine = mine[:0]
		for b := 1; b < 64; b++ {
			j := r.successor(r[i].pos + 1<<(64-b))
			if j == next {
				break // every shorter jump lands on the successor too
			}
			if j != i && !slices.Contains(mine, j) {
				mine = append(mine, j)
				demand[j] = append(demand[j], i)
			}
		}
	}
	in := make([]int, n)
	limit := log2Ceil(n) + 4
	var carry, waiting []int
	for lap := 0; lap < 2; lap++ {
		for j := 0; j < n; j++ {
			waiting = append(waiting[:0], carry...)
			if lap == 0 {
				waiting = append(waiting, demand[j]...)
			}
			carry = carry[:0]
			for _, i := range waiting {
				if _, ok := adj[i][j]; ok {
					continue // already linked
				}
				if i == j || in[j] >= limit {
					carry = append(carry, i)
					continue
				}
				in[j]++
				link(i, j)
			}
		}
		if len(carry) == 0 {
			break
		}
	}
	out := make(map[string][]string, n)
	for i := range r {
		names := make([]string, 0, len(adj[i]))
		for j := range adj[i] {
			names = append(names, r[j].name)
		}
		sort.Strings(names)
		out[r[i].name] = names
	}
	return out
}

func log2Ceil(n int) int { return bits.Len(uint(n - 1)) }

// fullMesh returns every member but self, sorted.
func fullMesh(self string, members []string) []string {
	out := make([]string, 0, len(members))
	for _, m := range members {
		if m != self {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}
