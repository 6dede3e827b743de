package mesh

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// The table publishes, per backend, the newest lesson any peer sent, and
// never goes back to an older one (a peer that sends an older lesson
// later, or leaves, does not undo what was adopted).
func TestLoadTableNewestLesson(t *testing.T) {
	tb := testLoadTable()
	lessons := func(seq uint64, stamp uint64, doubt uint64) *loadMsg {
		return &loadMsg{Seq: seq, Lessons: true, Entries: []loadEntry{{Idx: 11, Lesson: lessonWire{Stamp: stamp, Scale: loadFracOne, Doubt: doubt, DoubtN: 3}}}}
	}
	// A lesson before the peer's first snapshot cannot be placed.
	if got := tb.apply("p1", lessons(1, 500, 100), 10, 0); got != loadApplyUnsynced {
		t.Fatalf("a lesson before any snapshot: %v, want unsynced", got)
	}
	for i, p := range []string{"p1", "p2"} {
		if tb.apply(p, snapshot(1, 1, true, 100, 0), 10, 0) != loadApplyOK {
			t.Fatal("snapshot not applied")
		}
		if tb.apply(p, lessons(2, 500+200*uint64(i), 100*uint64(i+1)), 10, 0) != loadApplyOK {
			t.Fatal("lessons not applied")
		}
	}
	// A lesson message leaves the bookings alone.
	tb.publish(0, 0)
	if u := units(tb, 0); u != 200 {
		t.Fatalf("b0 at %v units after the lessons, want the snapshots' 200", u)
	}
	if l := tb.lesson(1); l == nil || l.Stamp != 700 || l.Doubt != 200 {
		t.Fatalf("published lesson %+v, want p2's (stamp 700)", l)
	}
	if l := tb.lesson(0); l != nil {
		t.Fatalf("b0 has a lesson no peer sent: %+v", l)
	}
	// p1 learns later; p2 then sends its older lesson again.
	tb.apply("p1", lessons(3, 900, 300), 10, 1)
	tb.apply("p2", lessons(3, 700, 200), 10, 1)
	tb.publish(1, 0)
	if l := tb.lesson(1); l.Stamp != 900 || l.Doubt != 300 {
		t.Fatalf("published lesson %+v, want p1's newer one (stamp 900)", l)
	}
	tb.expire(10_000, map[string]struct{}{})
	tb.publish(10_000, 0)
	if l := tb.lesson(1); l == nil || l.Stamp != 900 {
		t.Fatalf("the lesson went with its peers: %+v", l)
	}
	if l := tb.lesson(1000); l != nil {
		t.Fatalf("an unknown id has a lesson: %+v", l)
	}
}

// A lesson stamped beyond lessonMaxAhead past this node's clock is
// dropped: it would win over every later lesson, and at the wire's
// largest stamp stop lessons mesh-wide for good.
func TestLoadTableDropsLessonsFromTheFuture(t *testing.T) {
	tb := testLoadTable()
	lesson := func(seq, stamp uint64) *loadMsg {
		return &loadMsg{Seq: seq, Lessons: true, Entries: []loadEntry{{Idx: 11, Lesson: lessonWire{Stamp: stamp, Scale: loadFracOne, Doubt: 100, DoubtN: 3}}}}
	}
	const now = 1_000_000
	tb.apply("p", snapshot(1, 1, true, 0, 0), 10, now)
	tb.apply("p", lesson(2, maxLoadValue), 10, now)
	tb.apply("q", snapshot(1, 1, true, 0, 0), 10, now)
	tb.apply("q", lesson(2, now+lessonMaxAhead+1), 10, now)
	tb.publish(now, 0)
	if l := tb.lesson(1); l != nil {
		t.Fatalf("a lesson from the future was adopted: %+v", l)
	}
	tb.apply("q", lesson(3, now+lessonMaxAhead), 10, now) // a clock a minute ahead is fine
	tb.apply("p", lesson(3, now+1), 10, now+1)
	tb.publish(now+1, 0)
	if l := tb.lesson(1); l == nil || l.Stamp != now+lessonMaxAhead {
		t.Fatalf("published %+v, want q's lesson a minute ahead", l)
	}
	if v := tb.view(now+1, func(tree.BackendID) string { return "" }); v[0].FutureLessons != 1 || v[1].FutureLessons != 1 || v[0].UnknownBackends != 0 {
		t.Fatalf("dropped lessons not counted: %+v", v)
	}
}

// lessonLoad is a fakeLoad that also shares a lesson about b2.
type lessonLoad struct {
	*fakeLoad
	stamp atomic.Int64
}

func (l *lessonLoad) LocalLessons(_ bool, fn func(id tree.BackendID, stamp int64, scale, learned, doubt float64, doubtN uint64)) {
	if s := l.stamp.Load(); s > 0 {
		id, _ := l.ix.BackendByName("b2")
		fn(id, s, 0.5, 0, 0.125, 40)
	}
}

// A node's lesson reaches its peers over the load channel, though its
// bookings did not change, and a newer one replaces it.
func TestLoadChannelSharesLessons(t *testing.T) {
	c := newTestCluster(t, nil)
	var srcs []*lessonLoad
	for i := 0; i < 2; i++ {
		tn := c.start(nodeName(i))
		src := &lessonLoad{fakeLoad: newFakeLoad(t, tn.ix)}
		tn.n.SetLoadSource(src)
		srcs = append(srcs, src)
	}
	c.waitMesh(30 * time.Second)
	peer := c.node("n01")
	id, _ := peer.ix.BackendByName("b2")
	if stamp, _, _, _, _ := peer.n.PeerLesson(id); stamp != 0 {
		t.Fatalf("n01 has a lesson before any was learned (stamp %d)", stamp)
	}
	srcs[0].stamp.Store(1_000)
	waitFor(t, 10*time.Second, "n01 to hear n00's lesson", func() bool {
		stamp, scale, learned, doubt, n := peer.n.PeerLesson(id)
		return stamp == 1_000 && scale == 0.5 && learned == 0 && doubt == 0.125 && n == 40
	})
	srcs[0].stamp.Store(2_000)
	waitFor(t, 10*time.Second, "n01 to hear n00's newer lesson", func() bool {
		stamp, _, _, _, _ := peer.n.PeerLesson(id)
		return stamp == 2_000
	})
	if stamp, _, _, _, _ := c.node("n00").n.PeerLesson(id); stamp != 0 {
		t.Fatalf("n00 hears its own lesson back as a peer's (stamp %d)", stamp)
	}
}

// A node authors lessons once it has heard the mesh's: a snapshot with
// names from a peer (a LoadRefresh before, so that the lessons sent
// after it have arrived), or, alone, once LessonGrace has passed since
// Start; with LessonGrace 0, at once.
func TestLessonsSettle(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.LessonGrace = time.Hour })
	var nodes []*testNode
	for i := 0; i < 2; i++ {
		tn := c.start(nodeName(i))
		if i == 0 && tn.n.LessonsSettled() {
			t.Fatal("n00 settled alone, an hour before its grace ends")
		}
		tn.n.SetLoadSource(newFakeLoad(t, tn.ix))
		nodes = append(nodes, tn)
	}
	c.waitMesh(30 * time.Second)
	for _, tn := range nodes {
		waitFor(t, 10*time.Second, tn.name+" to settle on hearing its peer", tn.n.LessonsSettled)
	}

	alone := newTestCluster(t, func(cfg *Config) { cfg.LessonGrace = 50 * time.Millisecond })
	lone := alone.start(nodeName(0))
	waitFor(t, 10*time.Second, "a lone node to settle after its grace", lone.n.LessonsSettled)

	at := newTestCluster(t, func(cfg *Config) { cfg.LessonGrace = 0 })
	if tn := at.start(nodeName(0)); !tn.n.LessonsSettled() {
		t.Fatal("LessonGrace 0: not settled at once")
	}
}
