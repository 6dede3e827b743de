package mesh

import (
	"math"

	"github.com/kvmesh/kvmesh/tree"
)

// Lessons: what a router learned from its backends' answers about each
// backend's cache (how much of what it was sent it keeps, and what a
// claim past that edge is still worth) travels on the load channel beside
// the bookings, so that every node routes on what the whole mesh's answers
// taught. Without it each of N nodes learns from 1/N of the answers, N
// times slower, and the nodes' beliefs differ (8 nodes on the Mooncake
// trace: routing precision 93.4% against one node's 95.5%).
//
// A lesson is a last-writer-wins register per backend: the router stamps
// each lesson it learns later than every lesson it holds (but never more
// than a second past its clock, router.lessonStampLead: it ties instead), a
// node adopts a peer's lesson with a newer stamp, and goes on learning
// from it. Two
// lessons learned at once on two nodes keep the later one: one answer's
// worth of learning is lost, not the estimate.

// LessonSource is a LoadSource whose lessons are shared too (the router
// implements it; see router.Router.LocalLessons).
type LessonSource interface {
	// LocalLessons calls fn with this node's lesson for every backend that
	// has one (stamp > 0): its stamp (ms, ordered: the newest wins), the
	// capacity scale over the backend's configured capacity (0: not
	// carried), the capacity in prompt units learned with none configured
	// (0: not carried), the worth of a doubted claim (0: none learned) and
	// how many answers it was learned from. Without all, only the lessons
	// the node learned itself; with all, those it adopted from peers too.
	LocalLessons(all bool, fn func(id tree.BackendID, stamp int64, scale, learned, doubt float64, doubtN uint64))
}

// PeerLesson returns the newest lesson the peers sent about backend id,
// in LocalLessons' terms; stamp 0 when none did. It takes no lock.
func (n *Node) PeerLesson(id tree.BackendID) (stamp int64, scale, learned, doubt float64, doubtN uint64) {
	l := n.loads.lesson(id)
	if l == nil {
		return 0, 0, 0, 0, 0
	}
	return int64(l.Stamp), float64(l.Scale) / loadFracOne, float64(l.Learned), float64(l.Doubt) / loadFracOne, l.DoubtN
}

// LessonsSettled reports whether this node's router may author lessons
// (router.LessonGate): it has heard a snapshot with names from a peer at
// least LoadRefresh ago, or LessonGrace has passed since Start.
func (n *Node) LessonsSettled() bool {
	if n.cfg.LessonGrace == 0 {
		return true
	}
	now := n.nowMs()
	if at := n.loads.namedAt.Load(); at > 0 && now-at >= n.cfg.LoadRefresh.Milliseconds() {
		return true
	}
	start := n.startMs.Load()
	return start > 0 && now-start >= n.cfg.LessonGrace.Milliseconds()
}

// toLessonWire converts a lesson to wire units, clamped to what the wire
// carries.
func toLessonWire(stamp int64, scale, learned, doubt float64, doubtN uint64) lessonWire {
	frac := func(v float64, limit uint64) uint64 {
		if !(v > 0) {
			return 0
		}
		return min(uint64(math.Round(min(v, float64(limit)/loadFracOne)*loadFracOne)), limit)
	}
	return lessonWire{
		Stamp:   clampU(stamp),
		Scale:   frac(scale, maxLessonScale),
		Learned: clampU(int64(min(max(learned, 0), maxLoadValue))) / loadWrittenStep * loadWrittenStep,
		Doubt:   frac(doubt, loadFracOne),
		DoubtN:  min(doubtN, maxLoadValue),
	}
}

// lessonMaxAhead bounds how far past this node's clock a peer's lesson
// may be stamped (ms). A lesson wins by its stamp, and every node stamps
// its next one just past the newest it holds: one stamped far in the
// future (a node whose clock runs ahead, or a hostile peer) would win over
// every later lesson mesh-wide, long after its author left, and one at the
// wire's maximum would stop lessons for good. Such lessons are dropped
// (counted: the peer's future_lessons_dropped in /admin/mesh); clocks within a minute of
// each other lose nothing, and a lesson adopted from up to a minute ahead
// is overtaken within that minute.
const lessonMaxAhead = 60_000

// applyLessons records a lesson message's entries, each where it is newer
// than the peer's last lesson there, so in any order of arrival (the caller
// checked that the message is of the peer's current session and that its
// indexes are known).
func (t *loadTable) applyLessons(p *peerLoad, m *loadMsg, now int64) {
	t.eachEntry(p, m, func(id tree.BackendID, e *loadEntry) {
		if e.Lesson.Stamp > uint64(max(now, 0))+lessonMaxAhead {
			p.future++
			return
		}
		if e.Lesson.Stamp > p.lessons[id].Stamp {
			p.lessons[id] = e.Lesson
			p.fresh[id] = e.Lesson
		}
	})
}

// publishLessons makes the peers' lessons received since the last publish
// the published ones where they are newer. The published lesson never
// goes back: one adopted stays adopted when its peer leaves.
func (t *loadTable) publishLessons() {
	for _, p := range t.peers {
		for id, l := range p.fresh {
			if int(id) >= len(t.sums) {
				continue
			}
			if cur := t.sums[id].lesson.Load(); cur == nil || l.Stamp > cur.Stamp {
				t.sums[id].lesson.Store(&l)
			}
		}
		clear(p.fresh)
	}
}

// lesson reads the peers' newest lesson about backend id (safe without
// the lock; nil when none).
func (t *loadTable) lesson(id tree.BackendID) *lessonWire {
	if int(id) >= len(t.sums) {
		return nil
	}
	return t.sums[id].lesson.Load()
}

// publishLessons sends this node's own lessons that changed since the
// peers were last told; with all (after a snapshot with names: the first
// ones, every loadNamesEvery-th, and when members joined), every lesson
// it holds, adopted ones included, so that a peer that joined, restarted
// or lost a message has the mesh's newest even when their authors left.
// They go in a lesson message of their own. Caller holds loadMu.
func (n *Node) publishLessons(src LoadSource, all bool) {
	ls, ok := src.(LessonSource)
	if !ok {
		return
	}
	p := &n.lp
	if p.lessonLast == nil {
		p.lessonLast = make(map[tree.BackendID]lessonWire)
	}
	m := &p.lessonOut
	*m = loadMsg{Lessons: true, Entries: m.Entries[:0]}
	ls.LocalLessons(all, func(id tree.BackendID, stamp int64, scale, learned, doubt float64, doubtN uint64) {
		l := toLessonWire(stamp, scale, learned, doubt, doubtN)
		if l.Stamp == 0 || (!all && p.lessonLast[id] == l) {
			return
		}
		p.lessonLast[id] = l
		m.Entries = append(m.Entries, loadEntry{Idx: uint32(id), Lesson: l})
	})
	if len(m.Entries) > 0 {
		n.sendLoad(m)
	}
}
