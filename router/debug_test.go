package router

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func adminCall(t *testing.T, g *testRig, method, path, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	g.rt.AdminHandler().ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, b
}

// explainRoute asks POST /debug/route how body would be routed and
// returns the explanation with its first candidate.
func explainRoute(t *testing.T, g *testRig, body string) (RouteExplanation, CandidateExplanation) {
	t.Helper()
	_, out := adminCall(t, g, "POST", "/debug/route", body)
	var x RouteExplanation
	if err := json.Unmarshal(out, &x); err != nil {
		t.Fatal(err)
	}
	if len(x.Candidates) == 0 {
		t.Fatalf("no candidate in %s", out)
	}
	return x, x.Candidates[0]
}

// wantWholeClaim fails unless the explanation trusts the candidate's whole
// claim, as c0 (the same candidate explained right after the claim was
// learned) did, and routes for its prefix: an edge option that is off, or
// gated off, leaves the claim alone.
func wantWholeClaim(t *testing.T, x RouteExplanation, c, c0 CandidateExplanation) {
	t.Helper()
	if c.MatchedUnits != c0.MatchedUnits || x.Reason != "prefix" {
		t.Fatalf("off: trusted %d units (reason %s), want the whole claim's %d", c.MatchedUnits, x.Reason, c0.MatchedUnits)
	}
}

// POST /debug/route shows the decision the router would make, with every
// candidate's matched depth, load and score, without forwarding and
// without changing state.
func TestDebugRoute(t *testing.T) {
	backends := fourBackends(t)
	g := newRig(t, nil, backends...)
	sys := longText("system", 2000)
	_, r1, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, "hello"), "X-Tenant-ID", "t1")
	holder := routeField(r1, "backend")
	g.rt.backendByName(holder).inFlight.Add(1)
	defer g.rt.backendByName(holder).inFlight.Add(-1)

	next := chat("m1", sys, "hello", "hi", "more")
	gens := 0
	for _, b := range backends {
		gens += b.generations()
	}
	learned := g.counter("kvmesh_router_claims_learned_total")
	status, body := adminCall(t, g, "POST", "/debug/route", next, "X-Tenant-ID", "t1")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var x RouteExplanation
	if err := json.Unmarshal(body, &x); err != nil {
		t.Fatal(err)
	}
	if x.Chosen != holder || x.Reason != "prefix" || !x.Learn || x.Policy != "kvmesh" || x.Tenant != "t1" || x.Model != "m1" {
		t.Fatalf("explanation %+v", x)
	}
	if len(x.Candidates) != 4 || x.Blocks == 0 || x.Units <= x.Blocks || len(x.LearnDepths) == 0 || x.Deepest == 0 {
		t.Fatalf("explanation shape %+v", x)
	}
	if want := "backend=" + holder; !strings.HasPrefix(x.RouteHeader, want) {
		t.Errorf("route header %q", x.RouteHeader)
	}
	var holderScore float64
	for _, c := range x.Candidates {
		if c.Backend == holder {
			holderScore = c.Score
			if !c.Chosen || c.MatchedBlocks != x.Deepest || c.MatchedUnits == 0 || c.Load.InFlight != 1 {
				t.Errorf("holder %+v", c)
			}
		}
	}
	for _, c := range x.Candidates {
		if c.Backend != holder && (c.Chosen || c.MatchedBlocks != 0 || c.Score <= holderScore) {
			t.Errorf("other candidate %+v (holder's cost %v)", c, holderScore)
		}
	}
	after := 0
	for _, b := range backends {
		after += b.generations()
	}
	if after != gens || g.counter("kvmesh_router_claims_learned_total") != learned {
		t.Error("/debug/route forwarded the request or learned claims")
	}
	// Another tenant's view of the same body: nothing matched.
	_, body = adminCall(t, g, "POST", "/debug/route", next, "X-Tenant-ID", "t2")
	_ = json.Unmarshal(body, &x)
	if x.Deepest != 0 || x.Reason != "miss" {
		t.Errorf("tenant t2 sees t1's claims: %+v", x)
	}
	// Errors are OpenAI-style.
	if status, body := adminCall(t, g, "POST", "/debug/route", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`); status != 404 || !strings.Contains(string(body), "model_not_found") {
		t.Errorf("unknown model: %d %s", status, body)
	}
	if status, _ := adminCall(t, g, "POST", "/debug/route?endpoint=/v1/completions", `{"model":"m1"}`); status != 400 {
		t.Errorf("bad body: %d", status)
	}
	if status, _ := adminCall(t, g, "POST", "/debug/route?endpoint=/v1/completions", `{"model":"m1","prompt":"ok"}`); status != 200 {
		t.Errorf("completions endpoint: %d", status)
	}
}

func TestAdminBackendsHealthReady(t *testing.T) {
	a, b := newFakeBackend(t, "a", "m1"), newFakeBackend(t, "b", "m2")
	g := newRig(t, func(c *Config, _ *Deps) { c.EjectAfter = 1 }, a, b)
	status, body := adminCall(t, g, "GET", "/admin/backends", "")
	var list []BackendStatus
	if status != 200 || json.Unmarshal(body, &list) != nil || len(list) != 2 {
		t.Fatalf("%d %s", status, body)
	}
	if list[0].Name != "a" || list[0].URL != a.URL() || !list[0].Healthy || list[0].Models[0] != "m1" || list[0].Generation != 0 || list[0].Weight != 1 {
		t.Fatalf("backend a %+v", list[0])
	}
	if status, _ := adminCall(t, g, "GET", "/healthz", ""); status != 200 {
		t.Error("healthz", status)
	}
	if status, _ := adminCall(t, g, "GET", "/readyz", ""); status != 200 {
		t.Error("readyz", status)
	}
	// Down (refusing connections): answers alone would eject only half.
	g.rt.markFailure(g.rt.backendByName("a"), errBackendConnect, false, "x")
	g.rt.markFailure(g.rt.backendByName("b"), errBackendConnect, false, "x")
	if status, _ := adminCall(t, g, "GET", "/readyz", ""); status != http.StatusServiceUnavailable {
		t.Error("readyz with every backend ejected:", status)
	}
	if status, _ := adminCall(t, g, "GET", "/healthz", ""); status != 200 {
		t.Error("healthz must not depend on backends")
	}
}

// /debug/route explains a completions body sent without ?endpoint= as a
// completions request (it was a 400 "missing required parameter:
// messages"); a chat body stays chat.
func TestDebugRouteGuessesCompletions(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	admin := g.rt.AdminHandler()
	for body, want := range map[string]string{
		`{"model":"m1","prompt":"Once upon a time"}`:                    "/v1/completions",
		`{"model":"m1","messages":[{"role":"user","content":"hello"}]}`: "/v1/chat/completions",
	} {
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/debug/route", strings.NewReader(body)))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"endpoint": "`+want+`"`) {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body.String())
		}
	}
}
