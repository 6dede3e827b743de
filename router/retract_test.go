package router

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// An attempt that fails before a 2xx answer ends the claims it learned at
// dispatch: a answers 503 and the retry on b serves the prompt, so only b
// holds the new turn. What a held before the attempt (the system prompt
// and the first question, from an earlier answer) stays a's.
func TestFailedAttemptRetractsItsProvisionalClaims(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	var failing atomic.Bool
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if failing.Load() {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		answerCached(w, body, 0)
	})
	g := newRig(t, func(c *Config, d *Deps) {
		c.Retries = 1
		prefer("a", "b")(c, d)
	}, a, b)
	system := longText("retract system prompt", 3000)
	first := chat("m1", system, "the first question, long enough to fill a block or two of its own")
	second := chat("m1", system, "the first question, long enough to fill a block or two of its own", "an answer", "a second question that a never computed")
	g.post(t, first, http.StatusOK)
	heldFirst := g.holders(EndpointChat, first, "")["a"]
	if heldFirst == 0 {
		t.Fatal("a holds nothing of the prompt it answered")
	}

	failing.Store(true)
	g.post(t, second, http.StatusOK)
	h := g.holders(EndpointChat, second, "")
	if h["b"] == 0 {
		t.Fatal("b, which answered the second prompt, holds none of it")
	}
	if h["a"] != heldFirst {
		t.Errorf("a holds %d blocks of the prompt it failed, want the %d it held before (the first turn's)", h["a"], heldFirst)
	}
	if got := g.holders(EndpointChat, first, "")["a"]; got != heldFirst {
		t.Errorf("a holds %d blocks of the first prompt after the retraction, want %d", got, heldFirst)
	}
	if n := g.counter("kvmesh_router_claims_retracted_total"); n != 1 {
		t.Errorf("claims_retracted_total %v, want 1", n)
	}
}

// An error answer passed to the client (nothing left to retry) retracts
// too: a 400 computed nothing.
func TestErrorAnswerRetractsItsProvisionalClaims(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"prompt too long","type":"invalid_request_error"}}`)
	})
	g := newRig(t, nil, a)
	body := chat("m1", longText("too long a prompt", 3000), "a question")
	g.post(t, body, http.StatusBadRequest)
	if h := g.holders(EndpointChat, body, ""); h["a"] != 0 {
		t.Errorf("a holds %d blocks of a prompt it refused", h["a"])
	}
}

// post sends a chat body and waits until the router has counted the
// request: past every learn and retraction, which may follow the answer.
func (g *testRig) post(t *testing.T, body string, want int) {
	t.Helper()
	before := g.counter("kvmesh_router_requests_total")
	resp := g.do("POST", "/v1/chat/completions", body)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d", resp.StatusCode, want)
	}
	waitFor(t, "the request counted", func() bool { return g.counter("kvmesh_router_requests_total") > before })
}
