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
// lesson the node holds (up to lessonStampLead past the clock), and a
// peer's lesson with a later stamp replaces the node's own (mesh/lesson.go carries them on the load channel). A node
// adopts the peers' newest lesson before it routes and before it learns
// from an answer, so that it learns on top of it.

// PeerLessons is a PeerLoad that also carries the peers' newest lessons
// (mesh.Node implements it).
type PeerLessons interface {
	// PeerLesson returns the newest lesson the peers sent about backend id,
	// in LocalLessons' terms; stamp 0 when there is none.
	PeerLesson(id tree.BackendID) (stamp int64, scale, learned, doubt float64, doubtN uint64)
}

// LessonGate is a PeerLessons that says when this node may author lessons
// (mesh.Node implements it). Until LessonsSettled, the node has not heard
// the mesh's lessons yet: it learns from its answers but leaves what it
// learned unstamped (not a lesson: it lists no lessons at all, and the
// first lesson a peer sends replaces the figures it carries), so that a
// node that starts or restarts does not
// replace the mesh's estimate, learned from every node's answers, with
// what its first few answers taught it on top of the starting values.
type LessonGate interface {
	LessonsSettled() bool
}

// lessonStamp is the stamp a lesson learned at nowMs gets: nowMs, or
// unstamped while the gate says the mesh's lessons are not heard yet.
func (rt *Router) lessonStamp(nowMs int64) int64 {
	if !rt.lessonsSettled() {
		return unstamped
	}
	return nowMs
}

// lessonsSettled reports whether this node may author and list lessons
// (always without a LessonGate).
func (rt *Router) lessonsSettled() bool { return rt.gate == nil || rt.gate.LessonsSettled() }

// unstamped marks learning that is not a lesson (see LessonGate).
const unstamped = 0

// LocalLessons calls fn with this node's lesson about every backend it
// has one for: its stamp (ms, made later than every lesson adopted), the
// capacity as a scale over the configured or scraped capacity (0 when this
// node knows none) or, when it knows none, in prompt units learned from
// the answers alone (else 0), the learned worth of a doubted claim (0:
// none yet) and the answers it was learned from. The mesh's load channel
// reads it to tell the peers.
//
// Without all, only the lessons this node learned itself are listed: the
// peer that learned an adopted one told every other node already, and
// relaying each would multiply the traffic by the mesh's size. With all
// (the mesh's resend after each snapshot), adopted ones too, so that a
// node that joins or restarts hears the mesh's newest lessons even when
// their authors left.
func (rt *Router) LocalLessons(all bool, fn func(id tree.BackendID, stamp int64, scale, learned, doubt float64, doubtN uint64)) {
	if !rt.lessonsSettled() {
		// Nothing until the mesh's lessons are heard: an adopted lesson
		// learned on since, unstamped, would go out under its author's
		// stamp with other values.
		return
	}
	for _, b := range rt.backends() {
		if stamp, scale, learned, doubt, n, own := b.belief.lesson(); stamp > 0 && (own || all) {
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
		if b.belief.adopt(stamp, scale, learned, doubt, n, rt.unitsPerToken()) {
			rt.metrics.lessons[1].Inc()
		}
	}
}

// lessonStampLead bounds how far past this node's clock a lesson is
// stamped (ms). A lesson is stamped later than every lesson held, one ms
// past the newest when the clock has not passed it, and the mesh adopts the
// highest stamp: over a thousand lessons a second about one backend
// (mesh-wide) would push its stamps ahead of every clock without end, and
// past the peers' lessonMaxAhead (a minute, mesh/lesson.go) they would drop
// its lessons as from the future. A second is far inside that minute and
// far beyond the ms a lesson needs to be ordered after one adopted from a
// peer a little ahead (clocks within a second of each other lose nothing;
// a node whose clock is further behind ties, below).
const lessonStampLead = 1_000

// stampLocked marks a lesson learned at nowMs: later than every lesson
// held, so that the peers adopt it, but never more than lessonStampLead
// past nowMs. When one past the stamp would be further ahead, the stamp
// stays as it is (a tie: the peers take the lesson with the next stamp, a
// millisecond later); it never goes back. unstamped leaves the stamp as it
// is (see LessonGate). Caller holds mu.
func (cb *cacheBelief) stampLocked(nowMs int64) {
	if nowMs == unstamped {
		return
	}
	if s := cb.stamp.Load(); s+1 <= nowMs+lessonStampLead {
		cb.stamp.Store(max(nowMs, s+1))
	}
	cb.own = true
}

// lesson reads the belief's lesson (in LocalLessons' terms), and whether
// it was learned here (own) rather than adopted from a peer.
func (cb *cacheBelief) lesson() (stamp int64, scale, learned, doubt float64, doubtN uint64, own bool) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.capTokens.Load() > 0 {
		scale = cb.scale
	} else {
		learned = cb.learned
	}
	return cb.stamp.Load(), scale, learned, math.Float64frombits(cb.doubt.Load()), cb.doubtN.Load(), cb.own
}

// adopt takes a peer's lesson if it is later than the belief's own, and
// reports whether it did. A figure the lesson does not carry (0) keeps
// this node's: a peer that knows no configured capacity sends what it
// learned in units, converted here to a scale (upt units per token) when
// this node knows one; a scale is taken only against a known capacity.
func (cb *cacheBelief) adopt(stamp int64, scale, learned, doubt float64, doubtN uint64, upt float64) bool {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if stamp <= cb.stamp.Load() {
		return false
	}
	c := float64(cb.capTokens.Load())
	switch {
	case c > 0 && scale > 0:
		cb.scale = min(max(scale, 0.02), 50)
	case c > 0 && learned > 0 && upt > 0 && !math.IsInf(learned, 0):
		cb.scale = min(max(learned/(c*upt), 0.02), 50)
	case c == 0 && learned > 0 && !math.IsInf(learned, 0):
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
