package router

import (
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
)

// uptRig is a router with the belief on in front of one backend whose
// answers report what usage says (prompt and cached tokens of the body's
// length in bytes: report(len) gives them).
func uptRig(t *testing.T, report func(bodyLen int) (prompt, cached int64)) *testRig {
	t.Helper()
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, _ *http.Request, body []byte) {
		p, c := report(len(body))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}}}`, p, c)
	})
	return newRig(t, func(c *Config, _ *Deps) {
		c.Belief.Enabled = true
		c.Backends[0].KVCapacityTokens = 100_000
	}, a)
}

// One answer claiming a 100 KB prompt was one token moves the router-wide
// units-per-token estimate (and with it every backend's capacity in units)
// by at most its band's share, not ~780-fold.
func TestUnitsPerTokenIgnoresImplausibleAnswer(t *testing.T) {
	g := uptRig(t, func(int) (int64, int64) { return 1, 0 })
	before := g.rt.unitsPerToken()
	if s, _, _ := g.call("POST", "/v1/chat/completions", chat("m1", longText("huge", 100_000), "q")); s != 200 {
		t.Fatal(s)
	}
	after := g.rt.unitsPerToken()
	if limit := before * (1 + (unitsPerTokenBand-1)*unitsPerTokenEWMA); !(after > before && after <= limit+1e-9) {
		t.Fatalf("units per token %v -> %v after one answer of prompt_tokens 1; want it to move up by at most the band (to %v)", before, after, limit)
	}
	// A run of such answers still cannot run away in a few answers.
	for i := range 4 {
		g.call("POST", "/v1/chat/completions", chat("m1", longText(fmt.Sprint("huge ", i), 100_000), "q"))
	}
	if after := g.rt.unitsPerToken(); after > 2*before {
		t.Fatalf("units per token %v after five answers of prompt_tokens 1 (was %v)", after, before)
	}
}

// An answer reporting more cached tokens than its prompt had is not a
// usage report: the estimate does not move at all.
func TestUnitsPerTokenIgnoresCachedBeyondPrompt(t *testing.T) {
	g := uptRig(t, func(int) (int64, int64) { return 10, 11 })
	before := g.rt.unitsPerToken()
	if s, _, _ := g.call("POST", "/v1/chat/completions", chat("m1", longText("over", 20_000), "q")); s != 200 {
		t.Fatal(s)
	}
	if after := g.rt.unitsPerToken(); after != before {
		t.Fatalf("units per token %v -> %v after an answer with cached_tokens > prompt_tokens", before, after)
	}
	if n := g.counter("kvmesh_router_backend_prefix_routes_total"); n != 0 {
		t.Fatalf("the answer counted %v prefix routes", n)
	}
}

// Honest answers still move the estimate to what they show: from the
// configured 4 to a backend's 2 bytes per token (every sample is inside
// the band), and samples at 1 (a precise-mode prompt keyed by the
// engine's own tokens, next to byte-mode ones) enter unclamped.
func TestUnitsPerTokenStillLearns(t *testing.T) {
	var perToken atomic.Int64
	perToken.Store(2)
	g := uptRig(t, func(n int) (int64, int64) { return int64(n) / perToken.Load(), 0 })
	for i := range 150 {
		g.call("POST", "/v1/chat/completions", chat("m1", longText(fmt.Sprint("honest ", i), 2000), "q"))
	}
	// The body is a little longer than the rendered prompt: about 2.
	if upt := g.rt.unitsPerToken(); !(upt > 1.5 && upt < 2.5) {
		t.Fatalf("units per token %v after 150 answers at 2 bytes per token", upt)
	}
	if got := uptSample(1, 4); got != 1 {
		t.Errorf("a sample of 1 next to an estimate of 4 enters as %v", got)
	}
	if got := uptSample(3000, 4); got != 16 {
		t.Errorf("a sample of 3000 next to an estimate of 4 enters as %v, want 16", got)
	}
	if got := uptSample(0.001, 4); got != 1 {
		t.Errorf("a sample of 0.001 next to an estimate of 4 enters as %v, want 1", got)
	}
	if got := uptSample(3, math.Inf(1)); got != 3 {
		t.Errorf("no band around a broken estimate: %v", got)
	}
}
