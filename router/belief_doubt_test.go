package router

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// Through the router: an answer on a doubted claim teaches the share of the
// doubted blocks it found cached, measured between the trusted match and
// the doubted depth, with the starting worth counted as doubtPrior answers.
// The answer below has a quarter of the doubted tokens: from 0.5 the worth
// becomes (2x0.5 + 0.25)/3; with the bounds swapped it would learn 0, and
// with a held-or-not vote it would learn 0 too.
func TestDoubtLearnsShareFromAnswer(t *testing.T) {
	a := newFakeBackend(t, "a")
	var cachedTokens atomic.Int64
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	peers := &lessonPeers{fakePeers: fakePeers{share: 1}, lessons: map[tree.BackendID][5]float64{}}
	var midFlight atomic.Bool
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if midFlight.Load() {
			peers.set(0, [5]float64{float64(clock.Load() + 1000), 1, 0, 0.1, 40}) // a, the only backend, is id 0
		}
		answerCached(w, body, cachedTokens.Load())
	})
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.DoubtBeyond, c.Belief.DoubtTrust, c.Belief.DoubtLearn = true, 1, 0.5, true
		c.Belief.DoubtSpanCurve = true
		c.Backends[0].KVCapacityTokens = 5000
		d.Now = func() time.Time { return time.UnixMilli(clock.Add(5)) }
		d.Peers = peers
	}, a)
	sys := longText("doubt share system prompt", 3000)
	g.call("POST", "/v1/chat/completions", chat("m1", sys, "question one"))
	for i := 0; g.rt.meshWritten(g.rt.backendByName("a")) < 26000; i++ {
		if i == 100 {
			t.Fatal("nothing is counted as written")
		}
		g.call("POST", "/v1/chat/completions", chat("m1", longText(fmt.Sprint("filler ", i), 2500), "q"))
	}
	follow := chat("m1", sys, "question one", "answer", "question two")
	_, body := adminCall(t, g, "POST", "/debug/route", follow)
	var x RouteExplanation
	if err := json.Unmarshal(body, &x); err != nil {
		t.Fatal(err)
	}
	c := x.Candidates[0]
	if c.DoubtedBlocks <= c.MatchedBlocks || x.Reason != "doubt" {
		t.Fatalf("want a doubt route on the old claim: %+v", x)
	}
	upt := float64(x.Units) / float64(len(follow)/4) // units per token of this prompt, as the router measures it
	lo := float64(c.MatchedUnits) / upt
	hi := float64(min(c.DoubtedBlocks*x.UnitsPerBlock, x.Units)) / upt
	cachedTokens.Store(int64(math.Round(lo + 0.25*(hi-lo))))
	b := g.rt.backendByName("a")
	if got := b.belief.doubtTrust(&g.rt.cfg.Belief); got != 0.5 {
		t.Fatalf("before the answer: worth %v, want the configured 0.5", got)
	}
	g.call("POST", "/v1/chat/completions", follow)
	want := (doubtPrior*0.5 + 0.25) / (doubtPrior + 1)
	if got := b.belief.doubtTrust(&g.rt.cfg.Belief); math.Abs(got-want) > 0.01 {
		t.Fatalf("after an answer with a quarter of the doubted tokens: worth %v, want %v", got, want)
	}
	// The cell of its distance and the span's length learns the same
	// share, from this one answer, and no other cell does
	// (belief.doubt_span_curve).
	taught := 0
	for d := range doubtRanges {
		for i := range spanRanges {
			got, ok := g.rt.spans.worthOf(d, i)
			if !ok {
				continue
			}
			taught++
			if i != spanRange(hi-lo) || math.Abs(got-0.25) > 0.01 {
				t.Errorf("cell (%d, %d) taught %v; want only the %v-token span's range, 0.25", d, i, got, hi-lo)
			}
			if m := g.counter("kvmesh_router_belief_doubt_span_worth_ratio", "beyond_le", doubtRangeLabel(d, &g.rt.cfg.Belief), "span_le", spanRangeLabel(i)); m != got {
				t.Errorf("kvmesh_router_belief_doubt_span_worth_ratio for cell (%d, %d): %v, want %v", d, i, m, got)
			}
		}
	}
	if taught != 1 {
		t.Fatalf("%d cells of the span curve taught by one answer, want 1", taught)
	}
	// The answer is a lesson for the mesh: stamped at the router's clock,
	// listed with the worth it taught.
	var listed int
	g.rt.LocalLessons(false, func(id tree.BackendID, stamp int64, scale, learned, doubt float64, n uint64) {
		listed++
		if id != b.id || stamp <= 0 || stamp > clock.Load() || math.Abs(doubt-want) > 0.01 || n != 1 {
			t.Errorf("lesson about %d: stamp %d (clock %d), doubt %v, %d answers; want b's, worth %v from 1 answer",
				id, stamp, clock.Load(), doubt, n, want)
		}
	})
	if listed != 1 {
		t.Fatalf("%d lessons listed, want 1", listed)
	}
	// The next route prices the doubted blocks at the span curve's 0.25,
	// not at the distance range's (2x0.5 + 0.25)/3.
	_, body = adminCall(t, g, "POST", "/debug/route", follow)
	var again RouteExplanation
	if err := json.Unmarshal(body, &again); err != nil {
		t.Fatal(err)
	}
	if c := again.Candidates[0]; c.DoubtedBlocks <= c.MatchedBlocks || math.Abs(c.DoubtWorth-0.25) > 0.01 {
		t.Fatalf("after the answer: doubted %d blocks over %d priced at %v, want 0.25 (the span curve's)", c.DoubtedBlocks, c.MatchedBlocks, c.DoubtWorth)
	}
	// A peer's newer lesson (worth 0.1 from 40 answers) that arrives while
	// a request is in flight, after it was routed, is what its answer
	// learns on top of.
	midFlight.Store(true)
	g.call("POST", "/v1/chat/completions", follow)
	if got, want := b.belief.doubtTrust(&g.rt.cfg.Belief), 0.1+(0.25-0.1)*doubtEWMA; math.Abs(got-want) > 0.005 {
		t.Fatalf("after a peer's lesson and an answer: worth %v, want %v (learned on top of the peer's 0.1)", got, want)
	}
}

// doubtFloor: a checkpoint match counts from the next learn depth, a
// message end (or no match) from itself.
func TestDoubtFloor(t *testing.T) {
	ch := &tree.Chain{Keys: make([]tree.Key, 100), Learn: []int32{32, 50, 64, 90, 96, 100}}
	for _, c := range []struct {
		trusted int32
		cp      int
		want    int32
	}{
		{32, 32, 50}, // a checkpoint: up to the message end at 50
		{64, 32, 90},
		{96, 32, 100},
		{50, 32, 50}, // a message end: from itself
		{90, 32, 90},
		{0, 32, 0},   // no match
		{64, 0, 64},  // no checkpoints: every match is a message end or a last block
		{64, 16, 90}, // 64 is a multiple of 16 too
	} {
		if got := doubtFloor(ch, c.trusted, c.cp); got != c.want {
			t.Errorf("doubtFloor(trusted %d, cp %d) = %d, want %d", c.trusted, c.cp, got, c.want)
		}
	}
}

// Through the router: when the trusted match is a checkpoint inside a
// long system prompt and the backend holds a little more of that prompt,
// as any holder of the checkpoint would, the doubted claim learns nothing
// from it: its share counts from the system prompt's end. Counted from
// the checkpoint, the same answer would teach a share near a half.
func TestDoubtShareFromCheckpointCountsPastTheHead(t *testing.T) {
	a := newFakeBackend(t, "a")
	var cachedTokens atomic.Int64
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		answerCached(w, body, cachedTokens.Load())
	})
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.DoubtBeyond, c.Belief.DoubtTrust, c.Belief.DoubtLearn = true, 1, 0.5, true
		c.Belief.DoubtCurve, c.Belief.DoubtNear = false, 0
		c.Backends[0].KVCapacityTokens = 5000
		d.Now = func() time.Time { return time.UnixMilli(clock.Add(5)) }
	}, a)
	sys := longText("checkpoint head system prompt", 5000)
	q1 := longText("question one", 600)
	g.call("POST", "/v1/chat/completions", chat("m1", sys, q1))
	for i := 0; g.rt.meshWritten(g.rt.backendByName("a")) < 26000; i++ {
		if i == 100 {
			t.Fatal("nothing is counted as written")
		}
		g.call("POST", "/v1/chat/completions", chat("m1", longText(fmt.Sprint("filler ", i), 2500), "q"))
	}
	// Another prompt with the same first 4,300 bytes stamps the checkpoints
	// inside them afresh; the first one's deeper claims stay past the edge.
	g.call("POST", "/v1/chat/completions", chat("m1", sys[:4300]+longText("another tail", 700), "question three"))
	follow := chat("m1", sys, q1, "answer", "question two")
	_, body := adminCall(t, g, "POST", "/debug/route", follow)
	var x RouteExplanation
	if err := json.Unmarshal(body, &x); err != nil {
		t.Fatal(err)
	}
	c := x.Candidates[0]
	cp := g.rt.ix.Keyer().CheckpointBlocks()
	if cp == 0 || c.MatchedBlocks == 0 || c.MatchedBlocks%cp != 0 || c.DoubtedBlocks <= c.MatchedBlocks {
		t.Fatalf("want a trusted checkpoint match (every %d blocks) under a doubted claim: %+v", cp, c)
	}
	sysEnd := 0 // the follow-up's first learn depth past the match: the system prompt's end
	for _, d := range x.LearnDepths {
		if d > c.MatchedBlocks {
			sysEnd = d
			break
		}
	}
	if sysEnd == 0 || sysEnd >= c.DoubtedBlocks || sysEnd > c.MatchedBlocks+cp {
		t.Fatalf("want the system prompt's end between the match (%d) and the doubted claim (%d): learn depths %v", c.MatchedBlocks, c.DoubtedBlocks, x.LearnDepths)
	}
	upt := float64(x.Units) / float64(len(follow)/4)
	held := (c.MatchedBlocks + sysEnd) / 2 // a little of the head past the checkpoint
	cachedTokens.Store(int64(float64(held*x.UnitsPerBlock) / upt))
	fromMatch := float64(held-c.MatchedBlocks) / float64(c.DoubtedBlocks-c.MatchedBlocks)
	if fromMatch < 0.2 {
		t.Fatalf("setup: counted from the match the answer would teach only %v", fromMatch)
	}
	b := g.rt.backendByName("a")
	before := b.belief.doubtTrust(&g.rt.cfg.Belief)
	w := max(doubtEWMA, 1/float64(b.belief.doubtN.Load()+1+doubtPrior)) // the next answer's weight (doubtStep)
	g.call("POST", "/v1/chat/completions", follow)
	want := before + (0-before)*w
	if got := b.belief.doubtTrust(&g.rt.cfg.Belief); math.Abs(got-want) > 0.01 {
		t.Fatalf("after an answer holding only the shared head: worth %v (from %v), want %v (counted from the match: %v)",
			got, before, want, before+(fromMatch-before)*w)
	}
}

// DoubtPool: answers on one backend's doubted claims price the doubted
// claims of every backend at the same distance past the edge; without it,
// only that backend's. Other ranges keep the backend's one worth.
func TestDoubtPoolTeachesEveryBackend(t *testing.T) {
	for _, pool := range []bool{false, true} {
		g := newRig(t, func(c *Config, d *Deps) {
			c.Belief = DefaultBeliefConfig()
			c.Belief.DoubtPool = pool
		}, newFakeBackend(t, "a"), newFakeBackend(t, "b"))
		cfg := &g.rt.cfg.Belief
		a, b := g.rt.backendByName("a"), g.rt.backendByName("b")
		const near, far = 1.1, 5.0 // capacities past the edge: the first range and the last
		for range 10 {
			a.belief.learnDoubt(0, near, cfg, 0)
		}
		learned := a.belief.worthAt(near, cfg)
		if want := cfg.DoubtTrust * doubtPrior / (doubtPrior + 10); math.Abs(learned-want) > 1e-9 {
			t.Fatalf("pool %v: a's worth near the edge after 10 empty answers %v, want %v", pool, learned, want)
		}
		if got, want := a.belief.worthAt(far, cfg), a.belief.doubtTrust(cfg); got != want {
			t.Fatalf("pool %v: a's worth far past the edge %v, want its one worth %v (untaught range)", pool, got, want)
		}
		want := cfg.DoubtTrust // b has no answers of its own
		if pool {
			want = learned
		}
		if got := b.belief.worthAt(near, cfg); got != want {
			t.Fatalf("pool %v: b's worth near the edge %v, want %v", pool, got, want)
		}
		if got := b.belief.doubtTrust(cfg); got != cfg.DoubtTrust {
			t.Fatalf("pool %v: b's one worth %v moved; it is b's own (the mesh's lesson)", pool, got)
		}
	}
}

// belief.doubt_span_min_idle: the span curve prices doubted claims while
// enough recent decisions had a candidate with nothing queued; a fleet
// queued everywhere falls back to the worth by distance, and comes back
// once idle candidates return.
func TestSpanCurveIdleGate(t *testing.T) {
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.DoubtSpanCurve, c.Belief.DoubtSpanMinIdle = true, 0.5
	}, newFakeBackend(t, "a"))
	busy := []Candidate{{Load: LoadView{PendingPrefill: 100}}, {Load: LoadView{Waiting: 2, OwnAtSignal: 1}}}
	idle := []Candidate{{Load: LoadView{PendingPrefill: 100}}, {Load: LoadView{Waiting: 1, OwnAtSignal: 1}}}
	on := 0
	for range 64 {
		if g.rt.spansNow(idle, true) {
			on++
		}
	}
	if !g.rt.spansNow(idle, true) || on == 0 {
		t.Fatal("after 64 decisions with an idle candidate the span curve is not used")
	}
	for i := 0; g.rt.spansNow(busy, true); i++ {
		if i == 200 {
			t.Fatal("200 decisions with every candidate queued: the span curve is still used")
		}
	}
	for i := 0; !g.rt.spansNow(idle, true); i++ {
		if i == 200 {
			t.Fatal("200 decisions with an idle candidate again: the span curve is not used")
		}
	}
	g.rt.cfg.Belief.DoubtSpanMinIdle = 0
	if !g.rt.spansNow(busy, true) {
		t.Fatal("doubt_span_min_idle 0: the span curve is not always used")
	}
}

// /debug/route explanations and a request's retries move none of the
// router's decision averages: the share of decisions with an idle
// candidate, which gates the span curve, counts each routed request once.
func TestExplanationsDoNotMoveTheIdleShare(t *testing.T) {
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.DoubtSpanCurve, c.Belief.DoubtSpanMinIdle = true, 0.5
	}, newFakeBackend(t, "a"), newFakeBackend(t, "b"))
	st := g.rt.getState()
	defer g.rt.putState(st)
	st.routed, st.filtered = true, true
	idle := func() float64 { return math.Float64frombits(g.rt.idle.Load()) }
	before := idle()
	st.observed = true // as explain sets it
	for range 50 {
		if !g.rt.gather(st, "", time.Now()) {
			t.Fatal("no backend")
		}
	}
	if idle() != before {
		t.Fatalf("explanations moved the idle share from %v to %v", before, idle())
	}
	st.observed = false // a request's first decision
	g.rt.gather(st, "", time.Now())
	first := idle()
	if first == before {
		t.Fatal("a request's first decision did not count")
	}
	g.rt.gather(st, "", time.Now()) // its retry
	if idle() != first {
		t.Fatalf("a retry counted again: %v then %v", first, idle())
	}
}
