package router

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvmesh/kvmesh/tree"
)

// lessonPeers is a fakePeers that also carries a lesson per backend id.
type lessonPeers struct {
	fakePeers
	mu      sync.Mutex
	lessons map[tree.BackendID][5]float64 // stamp, scale, learned, doubt, answers
}

func (f *lessonPeers) PeerLesson(id tree.BackendID) (int64, float64, float64, float64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.lessons[id]
	return int64(l[0]), l[1], l[2], l[3], uint64(l[4])
}

func (f *lessonPeers) set(id tree.BackendID, l [5]float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lessons[id] = l
}

// A belief adopts a peer's lesson only when it is newer than its own, and
// a lesson learned after it is stamped later still, whatever the clock
// says, so that the peers adopt it in turn.
func TestCacheBeliefAdoptsNewerLessons(t *testing.T) {
	cfg := DefaultBeliefConfig()
	var cb cacheBelief
	cb.init()
	cb.capTokens.Store(1000)
	cb.adopt(5_000, 0.5, 0, 0.2, 12, 4)
	if stamp, scale, _, doubt, n, own := cb.lesson(); stamp != 5_000 || scale != 0.5 || doubt != 0.2 || n != 12 || own {
		t.Fatalf("after adopting: stamp %d, scale %v, doubt %v, %d answers, own %v", stamp, scale, doubt, n, own)
	}
	if got := cb.doubtTrust(&cfg); got != 0.2 {
		t.Fatalf("adopted doubt worth %v, want 0.2", got)
	}
	cb.adopt(4_000, 2, 0, 0.9, 50, 4) // older: ignored
	if stamp, scale, _, doubt, _, _ := cb.lesson(); stamp != 5_000 || scale != 0.5 || doubt != 0.2 {
		t.Fatalf("an older lesson was adopted: stamp %d, scale %v, doubt %v", stamp, scale, doubt)
	}
	// This node's clock is behind the peer that taught it (by less than
	// lessonStampLead): its next lesson is still later than the adopted one,
	// and learned on top of it.
	cb.learnDoubt(0, 0, &cfg, 4_500)
	if stamp, _, _, doubt, n, own := cb.lesson(); stamp != 5_001 || n != 13 || !(doubt < 0.2) || !own {
		t.Fatalf("a lesson after adopting: stamp %d, doubt %v, %d answers, own %v; want 5001, below 0.2, 13, own", stamp, doubt, n, own)
	}
	// Behind by more than lessonStampLead, it is not stamped further ahead:
	// the stamp stays (a tie), and the lesson is still learned.
	cb.learnDoubt(0, 0, &cfg, 1_000)
	if stamp, _, _, _, n, own := cb.lesson(); stamp != 5_001 || n != 14 || !own {
		t.Fatalf("a lesson with the clock 4 s behind: stamp %d, %d answers, own %v; want 5001 (kept), 14, own", stamp, n, own)
	}
	cb.learnDoubt(0, 0, &cfg, 9_000)
	if stamp := cb.stamp.Load(); stamp != 9_000 {
		t.Fatalf("a lesson at a later clock is stamped %d, want 9000", stamp)
	}
	// A capacity answer that agrees with the estimate teaches nothing and
	// stamps nothing.
	if cb.learn(1, true, 4, &cfg, 20_000) || cb.stamp.Load() != 9_000 {
		t.Fatalf("an agreeing answer moved the lesson to stamp %d", cb.stamp.Load())
	}
	// Out-of-range figures from a peer are clamped to what a belief holds.
	cb.adopt(10_000, 1e9, math.Inf(1), 7, 1, 4)
	if _, scale, _, doubt, _, _ := cb.lesson(); scale != 50 || doubt != 1 {
		t.Fatalf("out-of-range lesson adopted as scale %v, doubt %v", scale, doubt)
	}
}

// Nodes need not agree on whether a backend's capacity is known (each
// scrapes it): a lesson carries the scale only from a node that knows the
// capacity and the learned capacity only from one that does not, and a
// receiver keeps what the lesson does not carry, converting a learned
// capacity to its own scale when it knows the capacity.
func TestLessonsAcrossCapacityKnowledge(t *testing.T) {
	cfg := DefaultBeliefConfig()
	var knows, blind cacheBelief
	knows.init()
	blind.init()
	knows.capTokens.Store(1000) // 4,000 units at 4 units per token
	if !knows.learn(2000, false, 4, &cfg, 100) {
		t.Fatal("a lost match within the capacity did not teach")
	}
	if !blind.learn(3000, false, 4, &cfg, 50) {
		t.Fatal("a first lost match did not teach a backend of unknown capacity")
	}
	st, scale, learned, _, _, _ := knows.lesson()
	if !(scale > 0 && scale < 1) || learned != 0 {
		t.Fatalf("the knowing node's lesson: scale %v, learned %v; want a scale below 1 and no learned capacity", scale, learned)
	}
	_, bscale, blearned, _, _, _ := blind.lesson()
	if bscale != 0 || blearned != 2850 {
		t.Fatalf("the blind node's lesson: scale %v, learned %v; want no scale and 2850 units", bscale, blearned)
	}
	// The blind node adopts the knowing node's newer lesson: its own learned
	// capacity stays (the lesson does not carry one).
	if !blind.adopt(st, scale, learned, 0, 0, 4) || blind.learned != 2850 {
		t.Fatalf("the blind node's learned capacity became %v, want 2850 kept", blind.learned)
	}
	// The knowing node adopts a newer lesson from a blind node: the learned
	// 2,850 units become its scale (2850 / (1000 x 4)).
	if !knows.adopt(st+1, bscale, blearned, 0, 0, 4) || math.Abs(knows.scale-0.7125) > 1e-9 {
		t.Fatalf("the knowing node's scale became %v, want 0.7125", knows.scale)
	}
}

// The router adopts the mesh's newest lesson about a backend before it
// routes: the doubted-claim worth and capacity the peers' answers taught
// are what this node routes on.
func TestRouterAdoptsPeerLessons(t *testing.T) {
	a := newFakeBackend(t, "a")
	peers := &lessonPeers{fakePeers: fakePeers{share: 1}, lessons: map[tree.BackendID][5]float64{}}
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.DoubtBeyond, c.Belief.DoubtTrust, c.Belief.DoubtLearn = true, 1, 0.5, true
		c.Backends[0].KVCapacityTokens = 5000
		d.Peers = peers
	}, a)
	b := g.rt.backendByName("a")
	peers.set(b.id, [5]float64{float64(g.rt.now().UnixMilli()), 0.25, 0, 0.05, 40})
	if got := b.belief.doubtTrust(&g.rt.cfg.Belief); got != 0.5 {
		t.Fatalf("doubt worth %v before routing, want the configured 0.5", got)
	}
	g.call("POST", "/v1/chat/completions", chat("m1", "a prompt", "to route"))
	if got := b.belief.doubtTrust(&g.rt.cfg.Belief); got != 0.05 {
		t.Fatalf("doubt worth %v after routing, want the peers' 0.05", got)
	}
	if got := counterValue(g.rt.metrics.lessons[1], new(dto.Metric)); got != 1 {
		t.Fatalf("belief_lessons_total{source=peer} = %v, want 1", got)
	}
	if _, scale, _, _, _, _ := b.belief.lesson(); scale != 0.25 {
		t.Fatalf("capacity scale %v after routing, want the peers' 0.25", scale)
	}
	// An adopted lesson is not relayed with this node's own, but is listed
	// in full (the resend after a snapshot).
	g.rt.LocalLessons(false, func(id tree.BackendID, stamp int64, _, _, _ float64, _ uint64) {
		t.Errorf("the adopted lesson about %d (stamp %d) is listed as this node's", id, stamp)
	})
	var all int
	g.rt.LocalLessons(true, func(id tree.BackendID, _ int64, scale, _, doubt float64, _ uint64) {
		if all++; id != b.id || scale != 0.25 || doubt != 0.05 {
			t.Errorf("lesson listed in full: backend %d, scale %v, doubt %v", id, scale, doubt)
		}
	})
	if all != 1 {
		t.Fatalf("%d lessons listed in full, want the adopted one", all)
	}
	// An older lesson than the one held is not adopted.
	peers.set(b.id, [5]float64{1, 1, 0, 0.9, 1})
	g.call("POST", "/v1/chat/completions", chat("m1", "another prompt", "to route"))
	if got := b.belief.doubtTrust(&g.rt.cfg.Belief); got != 0.05 {
		t.Fatalf("doubt worth %v after an older peer lesson, want 0.05 kept", got)
	}
	if got := counterValue(g.rt.metrics.lessons[1], new(dto.Metric)); got != 1 {
		t.Fatalf("belief_lessons_total{source=peer} = %v after an older lesson, want 1", got)
	}
}

// gatedPeers is a lessonPeers that says whether this node may author
// lessons yet (LessonGate).
type gatedPeers struct {
	lessonPeers
	settled atomic.Bool
}

func (g *gatedPeers) LessonsSettled() bool { return g.settled.Load() }

// A node that has not heard the mesh's lessons yet (a node starting or
// restarting) learns from its answers without making a lesson of it: it
// lists none, and a peer's lesson, even one older than its clock, replaces
// what it learned. Once settled it authors lessons again, later than the
// one it adopted. Without the gate its first answer's lesson would be
// stamped now and outrank the mesh's estimate.
func TestLessonsWaitForTheMesh(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}`, len(body)/4)
	})
	peers := &gatedPeers{lessonPeers: lessonPeers{fakePeers: fakePeers{share: 1}, lessons: map[tree.BackendID][5]float64{}}}
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled = true
		c.Backends[0].KVCapacityTokens = 5000
		d.Now = func() time.Time { return time.UnixMilli(clock.Add(5)) }
		d.Peers = peers
	}, a)
	b := g.rt.backendByName("a")
	sys := longText("lesson gate system prompt", 3000)
	scale := func() float64 { _, s, _, _, _, _ := b.belief.lesson(); return s }
	// Each follow-up matches the conversation's claim, which the backend
	// answers it no longer holds: the capacity estimate shrinks.
	g.call("POST", "/v1/chat/completions", chat("m1", sys, "question one"))
	g.call("POST", "/v1/chat/completions", chat("m1", longText("a filler", 500), "q")) // written after the claim
	g.call("POST", "/v1/chat/completions", chat("m1", sys, "question one", "answer", "question two"))
	if got := scale(); !(got < 1) {
		t.Fatalf("capacity scale %v after an answer that lost a believed match, want below 1", got)
	}
	if got := counterValue(g.rt.metrics.lessons[0], new(dto.Metric)); got != 1 {
		t.Fatalf("belief_lessons_total{source=answer} = %v, want 1 (learned, even unstamped)", got)
	}
	g.rt.LocalLessons(true, func(id tree.BackendID, stamp int64, _, _, _ float64, _ uint64) {
		t.Errorf("unsettled: lesson about %d listed (stamp %d); learning before the mesh is heard is not a lesson", id, stamp)
	})
	// The mesh's lesson, stamped long before this node's clock, replaces it.
	peers.set(b.id, [5]float64{1, 0.8, 0, 0, 0})
	g.call("POST", "/v1/chat/completions", chat("m1", longText("an unrelated prompt", 100), "q"))
	if got := scale(); got != 0.8 {
		t.Fatalf("capacity scale %v after the peers' lesson (stamp 1), want their 0.8", got)
	}
	// Still unsettled, it relays nothing, not even the adopted lesson (it
	// may have learned on it since, unstamped).
	g.rt.LocalLessons(true, func(id tree.BackendID, stamp int64, _, _, _ float64, _ uint64) {
		t.Errorf("unsettled: adopted lesson about %d (stamp %d) listed", id, stamp)
	})
	// Settled: the next answer's lesson is learned on top of the adopted
	// one and stamped later than it, as this node's own.
	peers.settled.Store(true)
	g.call("POST", "/v1/chat/completions", chat("m1", sys, "question one", "answer", "question two", "answer", "question three"))
	var listed int
	g.rt.LocalLessons(false, func(id tree.BackendID, stamp int64, sc, _, _ float64, _ uint64) {
		if listed++; id != b.id || stamp <= 1 || !(sc < 0.8) {
			t.Errorf("settled: lesson about %d, stamp %d, scale %v; want a's, stamped after 1, below 0.8", id, stamp, sc)
		}
	})
	if listed != 1 {
		t.Fatalf("settled: %d lessons of this node's, want 1", listed)
	}
}

// Lesson stamps stay within lessonStampLead of the clock however fast
// lessons are learned: 3,000 a second about one backend, mesh-wide (two
// nodes, each adopting the other's newest lesson, as the mesh passes the
// highest stamp on), for a simulated minute. Before, each lesson was
// stamped one past the last: three ms of stamps per ms of clock, past the
// peers' lessonMaxAhead (a minute) within 30 s, after which they dropped
// the backend's lessons as from the future.
func TestLessonStampsStayNearTheClock(t *testing.T) {
	cfg := DefaultBeliefConfig()
	var nodes [2]cacheBelief
	for i := range nodes {
		nodes[i].init()
	}
	const start = 1_790_000_000_000
	var last [2]int64
	for ms := int64(0); ms < 60_000; ms++ {
		now := start + ms
		for i := range 3 {
			me, peer := i%2, 1-i%2
			nodes[me].learnDoubt(0.5, 0, &cfg, now)
			stamp, scale, learned, doubt, n, _ := nodes[me].lesson()
			nodes[peer].adopt(stamp, scale, learned, doubt, n, 4)
			if stamp-now > lessonStampLead {
				t.Fatalf("at %d ms: stamp %d ms ahead of the clock, want at most %d", ms, stamp-now, lessonStampLead)
			}
			for j := range nodes {
				if s := nodes[j].stamp.Load(); s < last[j] {
					t.Fatalf("at %d ms: node %d's stamp went back from %d to %d", ms, j, last[j], s)
				} else {
					last[j] = s
				}
			}
		}
	}
	if lead := last[0] - (start + 60_000 - 1); lead < lessonStampLead-1 {
		t.Fatalf("stamps ended %d ms ahead: the bound was never reached, the test proves nothing", lead)
	}
}
