package kvevents

import "hash/fnv"

// Owner chooses the node that consumes a backend's stream: the member with
// the highest rendezvous hash of (member, backend). Every node that sees
// the same members agrees without talking; when the owner leaves, only its
// streams move, each to the member that ranked next. "" when members is
// empty.
func Owner(backend string, members []string) string {
	best, bestH := "", uint64(0)
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(backend))
		v := h.Sum64()
		v ^= v >> 31 // fnv's low bits mix poorly; fold the high ones in
		v *= 0x9e3779b97f4a7c15
		if best == "" || v > bestH || (v == bestH && m > best) {
			best, bestH = m, v
		}
	}
	return best
}
