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
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			len(body)/4, cachedTokens.Load())
	})
	g := newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.DoubtBeyond, c.Belief.DoubtTrust, c.Belief.DoubtLearn = true, 1, 0.5, true
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
	// A peer's newer lesson (worth 0.1 from 40 answers) that arrives while
	// a request is in flight, after it was routed, is what its answer
	// learns on top of.
	midFlight.Store(true)
	g.call("POST", "/v1/chat/completions", follow)
	if got, want := b.belief.doubtTrust(&g.rt.cfg.Belief), 0.1+(0.25-0.1)*doubtEWMA; math.Abs(got-want) > 0.005 {
		t.Fatalf("after a peer's lesson and an answer: worth %v, want %v (learned on top of the peer's 0.1)", got, want)
	}
}
