package tree

import "hash/fnv"

// Timestamp is a hybrid-logical-clock reading: the high 48 bits are Unix
// milliseconds, the low 16 bits a counter that orders events within one
// millisecond. Package crdt produces them; tree only compares them.
type Timestamp uint64

// MakeTimestamp builds a Timestamp from milliseconds and a counter.
func MakeTimestamp(ms int64, counter uint16) Timestamp {
	return Timestamp(uint64(ms)<<16 | uint64(counter))
}

// Millis is the physical part of the timestamp in Unix milliseconds.
func (t Timestamp) Millis() int64 { return int64(t >> 16) }

// Counter is the logical part of the timestamp.
func (t Timestamp) Counter() uint16 { return uint16(t) }

// NodeID names a router node in claims. It is a stable 32-bit hash of the
// node's name (NodeIDOf), so every replica derives the same id for the same
// node without coordination. Two names colliding only affects tie-breaks
// between otherwise identical claims and per-origin metrics.
type NodeID uint32

// NodeIDOf returns the NodeID of a node name.
func NodeIDOf(name string) NodeID {
	h := fnv.New32a()
	h.Write([]byte(name))
	if id := NodeID(h.Sum32()); id != EndedOrigin {
		return id
	}
	return EndedOrigin - 1 // EndedOrigin marks tombstones (end.go)
}

// BackendID is a backend's index in one Index's registry. It is local to the
// Index: replicas refer to backends by name on the wire.
type BackendID uint16

// Claim says "the prefix named Key is warm on Backend". It is learned when a
// request is routed and replicated to every node.
type Claim struct {
	Key     Key
	Backend BackendID
	// Gen is the backend generation the claim was learned under. Bumping a
	// backend's generation (restart, removal) invalidates all its older
	// claims at once.
	Gen uint16
	// Time is when the claim was last learned or refreshed (hybrid logical
	// clock of its origin).
	Time Timestamp
	// Expires is the absolute expiry in Unix milliseconds. A claim is gone
	// everywhere once now >= Expires.
	Expires int64
	// Origin is the node that learned or refreshed it last.
	Origin NodeID
}

// Dominates reports whether a replaces b in a join of two values for the
// same (Key, Backend). The order is lexicographic on (generation, expiry,
// timestamp, origin):
//   - a newer backend generation always wins, so old-generation claims can
//     never come back after an invalidation;
//   - then the later expiry wins, so the value's expiry only ever grows: once
//     a claim has expired, no delta that any replica could still deliver can
//     revive it, whatever order deltas arrive in and whenever a replica swept
//     its expired entries;
//   - then the later timestamp and the greater origin break ties, which makes
//     the order total and the join deterministic.
//
// It is irreflexive: a.Dominates(a) is false. The Index stores only claims
// of their backend's current registry generation, so within an Index the
// order is effectively (expiry, timestamp, origin), which expiry and the
// eviction floor filter monotonically: that is what makes the join of
// replicas independent of delivery order.
func (a Claim) Dominates(b Claim) bool {
	if a.Gen != b.Gen {
		return genAfter(a.Gen, b.Gen)
	}
	if a.Expires != b.Expires {
		return a.Expires > b.Expires
	}
	if a.Time != b.Time {
		return a.Time > b.Time
	}
	return a.Origin > b.Origin
}

// genAfter compares generations in serial-number arithmetic, so the 16-bit
// counter may wrap.
func genAfter(a, b uint16) bool { return int16(a-b) > 0 }
