package router

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

func kappaOf(cb *cacheBelief) float64 { return math.Float64frombits(cb.kappa.Load()) }

// The bound moves with what is written: a claim stamped before the last
// capacity's worth of writes is past the edge, one after it is not; the
// distance since a time is what was written after it.
func TestCacheBeliefBound(t *testing.T) {
	var cb cacheBelief
	cb.init()
	cb.capTokens.Store(1000) // 1000 tokens x 4 units per token = 4000 units
	const upt = 4
	w := 0.0
	for ms := int64(1); ms <= 100; ms++ { // 100 units written per ms
		w += 100
		cb.refresh(ms, w, 0, upt, 1, 0)
	}
	if got := kappaOf(&cb); got != 4000 {
		t.Fatalf("capacity %v units, want 4000", got)
	}
	since := tree.Timestamp(cb.since.Load()).Millis()
	// 10,000 written by ms 100: the edge (4,000 ago) is about ms 60.
	if since < 55 || since > 61 {
		t.Fatalf("bound at ms %d, want about 60", since)
	}
	if d := cb.distance(90); d < 900 || d > 1100 {
		t.Fatalf("distance since ms 90: %v, want about 1000", d)
	}
	cfg := DefaultBeliefConfig()
	cfg.EdgeTrust = 0.5 // the default doubts nothing
	if tr := cb.trust(95, &cfg); tr != 1 {
		t.Fatalf("a fresh claim is trusted %v, want 1", tr)
	}
	if tr := cb.trust(62, &cfg); !(tr < 1 && tr >= cfg.EdgeTrust) {
		t.Fatalf("a claim near the edge is trusted %v, want in [%v, 1)", tr, cfg.EdgeTrust)
	}
	// Nothing known about the capacity: no bound, full trust.
	var none cacheBelief
	none.init()
	none.refresh(1, 1e9, 0, upt, 1, 0)
	if none.since.Load() != 0 || none.trust(0, &cfg) != 1 {
		t.Fatal("a backend of unknown capacity has a bound")
	}
	// The written count never goes back (a late peer snapshot).
	cb.refresh(101, 5, 0, upt, 1, 0)
	if got := math.Float64frombits(cb.nowW.Load()); got != 10000 {
		t.Fatalf("written went back to %v", got)
	}
	// A second bound further back (belief.doubt_near): claims stamped
	// before it have had more than 2 capacities written after them.
	cb.refresh(102, w, 0, upt, 1, 2)
	near := tree.Timestamp(cb.nearSince.Load()).Millis()
	if near < 15 || near > 22 || near >= tree.Timestamp(cb.since.Load()).Millis() {
		t.Fatalf("near bound at ms %d, want about 20 (8,000 units before the end), before the edge's", near)
	}
}

// A cache is unfilled by the share of its capacity nothing has been
// written to yet, and stays filled once written past it; unknown capacity
// counts as filled.
func TestCacheBeliefUnfilled(t *testing.T) {
	var cb cacheBelief
	cb.init()
	cb.capTokens.Store(1000) // 4000 units at 4 units per token
	const upt = 4
	for _, c := range []struct {
		ms   int64
		w    float64
		want float64
	}{{1, 0, 1}, {2, 1000, 0.75}, {3, 3000, 0.25}, {4, 4000, 0}, {5, 9000, 0}} {
		cb.refresh(c.ms, c.w, 0, upt, 1, 0)
		if got := cb.unfilled(); math.Abs(got-c.want) > 1e-9 {
			t.Fatalf("after %v units written: unfilled %v, want %v", c.w, got, c.want)
		}
	}
	// An engine that restarted starts empty: it is counted from there.
	cb.restarted(9000)
	for _, c := range []struct {
		ms   int64
		w    float64
		want float64
	}{{6, 9000, 1}, {7, 10000, 0.75}, {8, 13000, 0}} {
		cb.refresh(c.ms, c.w, 0, upt, 1, 0)
		if got := cb.unfilled(); math.Abs(got-c.want) > 1e-9 {
			t.Fatalf("%v units written after a restart at 9000: unfilled %v, want %v", c.w, got, c.want)
		}
	}
	var none cacheBelief
	none.init()
	none.refresh(1, 0, 0, upt, 1, 0)
	if got := none.unfilled(); got != 0 {
		t.Fatalf("a backend of unknown capacity is unfilled %v, want 0", got)
	}
}

// Answers move the capacity: a believed match that was gone lowers it
// towards its distance; a doubted one that was still there raises it; a
// backend of unknown capacity gets one from its first refuted match.
func TestCacheBeliefLearns(t *testing.T) {
	cfg := DefaultBeliefConfig()
	var cb cacheBelief
	cb.init()
	cb.capTokens.Store(1000)
	for range 60 {
		cb.learn(2000, false, 4, &cfg, 0) // matches 2,000 units back were gone
	}
	if k := kappaOf(&cb); k > 2000 || k < 1800 {
		t.Fatalf("after refuted matches at 2000: capacity %v, want just under 2000", k)
	}
	for range 60 {
		cb.learn(6000, true, 4, &cfg, 0) // and ones 6,000 back were held
	}
	if k := kappaOf(&cb); k < 6000 || k > 6400 {
		t.Fatalf("after held matches at 6000: capacity %v, want just over 6000", k)
	}
	before := kappaOf(&cb)
	cb.learn(3000, true, 4, &cfg, 0) // consistent: nothing to learn
	if kappaOf(&cb) != before {
		t.Fatal("a consistent answer moved the capacity")
	}
	var unknown cacheBelief
	unknown.init()
	unknown.learn(5000, true, 4, &cfg, 0)
	if kappaOf(&unknown) != 0 {
		t.Fatal("a held match set a capacity where none was known")
	}
	unknown.learn(5000, false, 4, &cfg, 0)
	if k := kappaOf(&unknown); k != 4750 {
		t.Fatalf("first refuted match at 5000: capacity %v, want 4750", k)
	}
}

// Through the router: a conversation's claim is believed until the
// backend has been sent more than its capacity since, then ignored, as
// /debug/route and /admin/backends show.
func TestBeliefIgnoresClaimsPastTheCacheEdge(t *testing.T) {
	a := newFakeBackend(t, "a")
	// No usage in the answers: nothing to learn from, the bound alone acts.
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	})
	// A clock that moves 5 ms a reading, so claims and samples get distinct
	// milliseconds however fast the test runs.
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Add(5)) }
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.DoubtBeyond, c.Belief.DoubtTrust = true, 1, 0.5
		c.Backends[0].KVCapacityTokens = 5000 // 20,000 units at 4 units per token
		d.Now = now
	}, a)
	sys := longText("the edge test system prompt", 3000)
	conv := chat("m1", sys, "question one")
	if s, _, _ := g.call("POST", "/v1/chat/completions", conv); s != 200 {
		t.Fatal(s)
	}
	follow := chat("m1", sys, "question one", "answer", "question two")
	matched := func() (int, float64) {
		code, body := adminCall(t, g, "POST", "/debug/route", follow)
		if code != 200 {
			t.Fatalf("/debug/route: %d %s", code, body)
		}
		var x RouteExplanation
		if err := json.Unmarshal(body, &x); err != nil {
			t.Fatal(err)
		}
		return x.Candidates[0].MatchedBlocks, x.Candidates[0].Discount
	}
	explain := func() RouteExplanation {
		_, body := adminCall(t, g, "POST", "/debug/route", follow)
		var x RouteExplanation
		if err := json.Unmarshal(body, &x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	if m, disc := matched(); m == 0 || disc != 0 {
		t.Fatalf("right after: matched %d blocks, discount %v; want a full match", m, disc)
	}
	if c := explain().Candidates[0]; !(c.Beyond >= 0 && c.Beyond < 0.7) || c.DoubtedBeyond != 0 {
		t.Fatalf("right after: the match is %v capacities past its writing (want under edge_start, 0.7), doubted %v (want 0)", c.Beyond, c.DoubtedBeyond)
	}
	// Other conversations write a few thousand units each: past 20,000 the
	// first is out of the cache.
	for i := 0; g.rt.meshWritten(g.rt.backendByName("a")) < 26000; i++ {
		if i == 100 {
			t.Fatal("nothing is counted as written")
		}
		body := chat("m1", longText(fmt.Sprint("other ", i), 2500), "q")
		if s, _, _ := g.call("POST", "/v1/chat/completions", body); s != 200 {
			t.Fatal(s)
		}
	}
	if m, _ := matched(); m != 0 {
		t.Fatalf("after %0.f units written: the old claim still matches %d blocks", g.rt.meshWritten(g.rt.backendByName("a")), m)
	}
	// The claim is doubted, not forgotten: /debug/route shows its depth,
	// and a route on it says so (reason doubt, matched = the claim's depth).
	if x := explain(); x.Candidates[0].DoubtedBlocks == 0 || x.Reason != "doubt" || !strings.Contains(x.RouteHeader, "reason=doubt") ||
		strings.Contains(x.RouteHeader, "matched=0/") {
		t.Fatalf("past the edge: doubted %d blocks, reason %s, header %q; want a doubt route on the old claim", x.Candidates[0].DoubtedBlocks, x.Reason, x.RouteHeader)
	} else if c := x.Candidates[0]; !(c.DoubtedBeyond > 1) || c.Beyond != 0 {
		t.Fatalf("past the edge: the doubted claim is %v capacities past (want more than doubt_beyond, 1), the trusted %v (want 0: none)", c.DoubtedBeyond, c.Beyond)
	}
	code, body := adminCall(t, g, "GET", "/admin/backends", "")
	var list []BackendStatus
	if code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("/admin/backends: %d", code)
	}
	if b := list[0].Belief; b.CapacityTokens != 5000 || b.CapacityUnits != 20000 || b.HorizonMs == nil || b.WrittenUnits < 20000 {
		t.Fatalf("belief in /admin/backends: %+v", b)
	}
	// In tokens, at the router's units per token (the same for both).
	upt := g.rt.unitsPerToken()
	if b := list[0].Belief; math.Abs(b.EffectiveTokens-b.CapacityUnits/upt) > 1e-6 || math.Abs(b.WrittenTokens-b.WrittenUnits/upt) > 1e-6 || b.WrittenTokens <= 0 {
		t.Fatalf("belief in tokens: capacity %v, written %v; want %v and %v (units per token %v)", b.EffectiveTokens, b.WrittenTokens, b.CapacityUnits/upt, b.WrittenUnits/upt, upt)
	}
	// The same capacity, and the doubt worth, as gauges.
	if got, want := g.counter("kvmesh_router_backend_belief_capacity_tokens", "backend", "a"), list[0].Belief.EffectiveTokens; math.Abs(got-want) > 1e-6 || got <= 0 {
		t.Fatalf("kvmesh_router_backend_belief_capacity_tokens = %v, want %v", got, want)
	}
	if got, want := g.counter("kvmesh_router_backend_belief_doubt_worth_ratio", "backend", "a"), list[0].Belief.DoubtTrust; got != want || got <= 0 {
		t.Fatalf("kvmesh_router_backend_belief_doubt_worth_ratio = %v, want %v", got, want)
	}
	// And the worth by distance past the edge (belief.doubt_curve, on by
	// default), one series per range.
	curve := list[0].Belief.DoubtCurve
	if len(curve) != doubtRanges {
		t.Fatalf("doubt curve %v, want %d ranges", curve, doubtRanges)
	}
	for i, le := range []string{"1.25", "1.5", "2", "3", "+Inf"} {
		if got := g.counter("kvmesh_router_backend_belief_doubt_curve_ratio", "backend", "a", "beyond_le", le); got != curve[i] || got <= 0 {
			t.Fatalf("kvmesh_router_backend_belief_doubt_curve_ratio{beyond_le=%q} = %v, want %v", le, got, curve[i])
		}
	}
}

// The answers' cached_tokens count as confirming or refuting prefix
// routes (routing precision, per backend).
func TestBeliefCountsPrecision(t *testing.T) {
	a := newFakeBackend(t, "a")
	cached := 0
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		answerCached(w, body, int64(cached))
	})
	g := newRig(t, func(c *Config, _ *Deps) { c.Belief.Enabled = true }, a)
	sys := longText("precision system prompt", 3000)
	g.call("POST", "/v1/chat/completions", chat("m1", sys, "q1"))
	cached = 700 // the backend held the system prompt: a confirmed prefix route
	g.call("POST", "/v1/chat/completions", chat("m1", sys, "q1", "a", "q2"))
	cached = 0 // it lost it: refuted
	g.call("POST", "/v1/chat/completions", chat("m1", sys, "q1", "a", "q2", "a", "q3"))
	if c, r := g.counter("kvmesh_router_backend_prefix_routes_total", "backend", "a", "outcome", "confirmed"),
		g.counter("kvmesh_router_backend_prefix_routes_total", "backend", "a", "outcome", "refuted"); c != 1 || r != 1 {
		t.Fatalf("prefix routes confirmed %v refuted %v, want 1 and 1", c, r)
	}
	// The answers also feed the fleet's reuse (the spread term's r) and its
	// gauge: 700 cached tokens of the three prompts.
	share := g.rt.reuse.share()
	if !(share > 0 && share < 0.5) {
		t.Fatalf("reuse share %v after one of three answers was partly cached", share)
	}
	if got := g.counter("kvmesh_router_prompt_cached_ratio"); got != share {
		t.Fatalf("kvmesh_router_prompt_cached_ratio %v, want %v", got, share)
	}
}

// An answer that reports less cached than the dispatch expected means the
// backend wrote more: its written count (which ages claims) takes the
// difference. And only a match held whole says the cache kept it: an
// answer that had the shared head but not the rest teaches a smaller
// capacity.
func TestBeliefLearnsFromPartialAnswers(t *testing.T) {
	a := newFakeBackend(t, "a")
	var share atomic.Value // float64: the share of the believed match the backend answers as cached
	share.Store(0.0)
	var matchedTokens atomic.Int64
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		answerCached(w, body, int64(share.Load().(float64)*float64(matchedTokens.Load())))
	})
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled = true
		c.Backends[0].KVCapacityTokens = 100_000 // far more than the test writes: every claim is inside the edge
		d.Now = func() time.Time { return time.UnixMilli(clock.Add(5)) }
	}, a)
	b := g.rt.backendByName("a")
	sys := longText("partial answers system prompt", 3000)
	g.call("POST", "/v1/chat/completions", chat("m1", sys, "q1"))
	for i := range 3 { // some writes after the claim, so that it has a distance
		g.call("POST", "/v1/chat/completions", chat("m1", longText(fmt.Sprint("filler ", i), 2000), "q"))
	}
	// The follow-up's believed match, in the backend's tokens (len/4).
	follow := chat("m1", sys, "q1", "a", "q2")
	_, body := adminCall(t, g, "POST", "/debug/route", follow)
	var x RouteExplanation
	if err := json.Unmarshal(body, &x); err != nil || x.Candidates[0].MatchedUnits == 0 {
		t.Fatalf("/debug/route: %v %s", err, body)
	}
	matchedTokens.Store(int64(float64(x.Candidates[0].MatchedUnits) * float64(len(follow)/4) / float64(x.Units)))
	capacity := func() float64 { return math.Float64frombits(b.belief.kappa.Load()) }
	before, w0 := capacity(), b.written.Load()
	if before <= 0 {
		t.Fatal("no capacity from the configuration")
	}
	share.Store(0.6) // the head was there, the rest was not
	g.call("POST", "/v1/chat/completions", follow)
	// Written: the whole prompt less the 60% of the match that was cached,
	// not less the whole believed match.
	if got, booked := b.written.Load()-w0, int64(x.Units-x.Candidates[0].MatchedUnits); got < booked+int64(0.3*float64(x.Candidates[0].MatchedUnits)) {
		t.Fatalf("written after a 60%% hit: %d units; the dispatch booked %d and the answer showed %d more", got, booked, x.Candidates[0].MatchedUnits*4/10)
	}
	if after := capacity(); !(after < before) {
		t.Fatalf("capacity %v after a match held in part, was %v: want it smaller", after, before)
	}
	// It still counts as a confirmed prefix route (more than half was there).
	if c := g.counter("kvmesh_router_backend_prefix_routes_total", "backend", "a", "outcome", "confirmed"); c != 1 {
		t.Fatalf("confirmed prefix routes %v, want 1", c)
	}
}

// With doubt_learn, a backend's doubted claims are worth what the answers
// showed of them: failures lower the trust towards its floor, successes
// raise it; without, the configured worth stands; doubt_trust 0 ignores
// doubted claims whatever was learned.
func TestCacheBeliefLearnsDoubtTrust(t *testing.T) {
	cfg := DefaultBeliefConfig()
	cfg.DoubtLearn = true
	var cb cacheBelief
	cb.init()
	if got := cb.doubtTrust(&cfg); got != cfg.DoubtTrust {
		t.Fatalf("before any answer: %v, want the configured %v", got, cfg.DoubtTrust)
	}
	// The first answers weigh as a mean with the starting worth counted
	// as doubtPrior answers: after 1 held and 9 gone it is (2x0.5+1)/12,
	// about 0.17, where an average weighted 1/32 from the start would
	// still be about 0.39.
	cb.learnDoubt(1, 0, &cfg, 0)
	for range 9 {
		cb.learnDoubt(0, 0, &cfg, 0)
	}
	if got, want := cb.doubtTrust(&cfg), (doubtPrior*cfg.DoubtTrust+1)/(doubtPrior+10); math.Abs(got-want) > 1e-9 {
		t.Fatalf("after 1 held of 10: %v, want the mean with the prior %v", got, want)
	}
	for range 200 {
		cb.learnDoubt(0, 0, &cfg, 0)
	}
	if got := cb.doubtTrust(&cfg); got != minDoubtTrust {
		t.Fatalf("after 200 doubted claims gone: %v, want the floor %v", got, minDoubtTrust)
	}
	for range 32 {
		cb.learnDoubt(1, 0, &cfg, 0)
	}
	if got := cb.doubtTrust(&cfg); !(got > 0.5 && got < 1) {
		t.Fatalf("after 32 held: %v, want above 0.5", got)
	}
	// An answer teaches the share of the doubted blocks it found, not
	// whether most were there: a quarter of them, again and again, is
	// worth a quarter.
	for range 300 {
		cb.learnDoubt(0.25, 0, &cfg, 0)
	}
	if got := cb.doubtTrust(&cfg); math.Abs(got-0.25) > 1e-3 {
		t.Fatalf("after answers that found a quarter of the doubted blocks: %v, want 0.25", got)
	}
	fixed := cfg
	fixed.DoubtLearn = false
	if got := cb.doubtTrust(&fixed); got != cfg.DoubtTrust {
		t.Fatalf("doubt_learn off: %v, want %v", got, cfg.DoubtTrust)
	}
	off := cfg
	off.DoubtTrust = 0
	if got := cb.doubtTrust(&off); got != 0 {
		t.Fatalf("doubt_trust 0: %v, want 0", got)
	}
}

// With DoubtCurve each range of distance past the edge learns a worth of
// its own: answers just past the edge that found the blocks held raise
// that range, answers far past it that found nothing lower the far one,
// and a range no answer reached prices at the backend's one worth (which
// learns from every answer). Off, every distance prices at that one worth.
func TestCacheBeliefDoubtCurve(t *testing.T) {
	cfg := DefaultBeliefConfig()
	cfg.DoubtLearn, cfg.DoubtCurve = true, true
	var cb cacheBelief
	cb.init()
	for range 40 {
		cb.learnDoubt(1, 1.1, &cfg, 0)
	}
	for range 40 {
		cb.learnDoubt(0, 5, &cfg, 0)
	}
	near, far, untaught := cb.worthAt(1.1, &cfg), cb.worthAt(5, &cfg), cb.worthAt(1.4, &cfg)
	if !(near > 0.9) || !(far < 0.1) {
		t.Fatalf("worth just past the edge %v (want above 0.9, every answer held), far past %v (want below 0.1)", near, far)
	}
	if one := cb.doubtTrust(&cfg); untaught != one || !(one > far && one < near) {
		t.Fatalf("an untaught range is worth %v, want the backend's one worth %v, between the two", untaught, one)
	}
	if c := cb.curveOf(&cfg); len(c) != doubtRanges || c[0] != near || c[len(c)-1] != far {
		t.Fatalf("curve %v, want %d ranges from %v to %v", c, doubtRanges, near, far)
	}
	cfg.DoubtCurve = false
	if got := cb.worthAt(1.1, &cfg); got != cb.doubtTrust(&cfg) || cb.curveOf(&cfg) != nil {
		t.Fatalf("curve off: worth %v, want the one worth %v and no curve", got, cb.doubtTrust(&cfg))
	}
}

// doubtShare: the share of a doubted claim's own tokens the answer had.
func TestDoubtShare(t *testing.T) {
	for _, c := range []struct{ cached, lo, hi, want float64 }{
		{0, 100, 300, 0},      // nothing cached
		{100, 100, 300, 0},    // only the trusted match
		{150, 100, 300, 0.25}, // a quarter of the doubted tokens
		{300, 100, 300, 1},    // all of them
		{900, 100, 300, 1},    // more than the claim said
		{500, 300, 300, 0},    // no doubted tokens: nothing to learn
	} {
		if got := doubtShare(c.cached, c.lo, c.hi); got != c.want {
			t.Errorf("doubtShare(%v, %v, %v) = %v, want %v", c.cached, c.lo, c.hi, got, c.want)
		}
	}
}

// Bad belief settings are refused with the setting's name; the defaults
// pass, and doubt_near must lie beyond doubt_beyond (or be 0, off).
func TestBeliefConfigValidate(t *testing.T) {
	if errs := DefaultBeliefConfig().validate(); len(errs) != 0 {
		t.Fatalf("defaults refused: %v", errs)
	}
	for _, c := range []struct {
		name string
		set  func(*BeliefConfig)
	}{
		{"doubt_near", func(c *BeliefConfig) { c.DoubtBeyond, c.DoubtNear = 1, 0.8 }},
		{"doubt_near", func(c *BeliefConfig) { c.DoubtNear = math.NaN() }},
		{"doubt_near", func(c *BeliefConfig) { c.DoubtNear = math.Inf(1) }},
		{"edge_start", func(c *BeliefConfig) { c.EdgeStart = 0 }},
		{"edge_trust", func(c *BeliefConfig) { c.EdgeTrust = 1.5 }},
		{"doubt_trust", func(c *BeliefConfig) { c.DoubtTrust = -0.1 }},
		{"depth_edge_max_reuse", func(c *BeliefConfig) { c.DepthEdgeMaxReuse = 1.5 }},
		{"pinned_edge_max_reuse", func(c *BeliefConfig) { c.PinnedEdgeMaxReuse = -0.1 }},
		{"pinned_edge_max_reuse", func(c *BeliefConfig) { c.PinnedEdgeMaxReuse = math.NaN() }},
	} {
		cfg := DefaultBeliefConfig()
		c.set(&cfg)
		errs := cfg.validate()
		if len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), "belief."+c.name) {
			t.Errorf("%s: errors %v, want one naming belief.%s", c.name, errs, c.name)
		}
	}
	cfg := DefaultBeliefConfig()
	cfg.DoubtBeyond, cfg.DoubtNear = 1, 0
	if errs := cfg.validate(); len(errs) != 0 {
		t.Fatalf("doubt_near 0 (off) refused: %v", errs)
	}
}
