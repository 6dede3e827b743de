package router

import (
	"math"

	"github.com/kvmesh/kvmesh/tree"
)

// Lessons: what the answers taught a node about each backend's cache (its
// capacity estimate and the worth of a doubted claim, belief.go) is shared
// with the mesh's other nodes, so that each learns from every node's
// answers rather than from its share of them. A lesson is a
// last-writer-wins register per backend: learning stamps it later than any
// lesson the node holds, and a peer's lesson with a later stamp replaces
// the node's own (mesh/lesson.go carries them on the load channel).

// PeerLessons is a PeerLoad that also carries the peers' newest lessons
// (mesh.Node implements it).
type PeerLessons interface {
	// PeerLesson returns the newest lesson the peers sent about backend id,
	// in LocalLessons' terms; stamp 0 when there is none.
	PeerLesson(id tree.BackendID) (stamp int64, scale, learned, doubt float64, doubtN uint64)
}

// LocalLessons calls fn with this node's lesson about every backend it
// has one for: its stamp (ms, made later than every lesson adopted), the
// capacity scale over the configured or scraped capacity, the capacity in
// prompt units learned with none known (0: none), the learned worth of a
// doubted claim (0: none yet) and the answers it was learned from. The
// mesh's load channel reads it to tell the peers.
//
// A lesson adopted from a peer is not listed until this node learns on top
// of it: the peer that learned it told every other node already, and
// relaying it would multiply the channel's traffic by the mesh's size.
func (rt *Router) LocalLessons(fn func(id tree.BackendID, stamp int64, scale, learned, doubt float64, doubtN uint64)) {
	for _, b := range rt.backends() {
		if stamp, scale, learned, doubt, n, own := b.belief.lesson(); stamp > 0 && own {
			fn(b.id, stamp, scale, learned, doubt, n)
		}
	}
}

// adoptLesson replaces b's lesson with the peers' newest when it is later.
func (rt *Router) adoptLesson(b *backend) {
	if rt.lessons == nil {
		return
	}
	if stamp, scale, learned, doubt, n := rt.lessons.PeerLesson(b.id); stamp > b.belief.stamp.Load() {
		if b.belief.adopt(stamp, scale, learned, doubt, n) {
			rt.metrics.lessons[1].Inc()
		}
	}
}

// stampLesson marks a lesson learned at nowMs: later than every lesson
// held, so that the peers adopt it.
func (cb *cacheBelief) stampLesson(nowMs int64) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	cb.stamp.Store(max(nowMs, cb.stamp.Load()+1))
	cb.own = true
}

// lesson reads the belief's lesson, and whether it was learned here (own)
// rather than adopted from a peer.
func (cb *cacheBelief) lesson() (stamp int64, scale, learned, doubt float64, doubtN uint64, own bool) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.stamp.Load(), cb.scale, cb.learned, math.Float64frombits(cb.doubt.Load()), cb.doubtN.Load(), cb.own
}

// adopt takes a peer's lesson if it is later than the belief's own, and
// reports whether it did.
func (cb *cacheBelief) adopt(stamp int64, scale, learned, doubt float64, doubtN uint64) bool {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if stamp <= cb.stamp.Load() {
		return false
	}
	if scale > 0 {
		cb.scale = min(max(scale, 0.02), 50)
	}
	if learned >= 0 && !math.IsInf(learned, 0) {
		cb.learned = learned
	}
	if doubt > 0 {
		cb.doubt.Store(math.Float64bits(min(max(doubt, minDoubtTrust), 1)))
		cb.doubtN.Store(doubtN)
	}
	cb.stamp.Store(stamp)
	cb.own = false
	cb.updated.Store(0) // recompute the capacity and bound at the next request
	return true
}
