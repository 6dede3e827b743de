package router

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// A failed attempt ends only the claims no longer-lived than its own
// provisional ones: a request for the same prompt that another attempt
// got answered meanwhile (here on the same backend; in a mesh on any node)
// confirmed them at ConfirmedTTL, and the backend holds the prompt. The
// failed attempt's tombstones would end them, mesh-wide, for that TTL.
func TestFailedAttemptKeepsAConcurrentAnswersClaims(t *testing.T) {
	a := newFakeBackend(t, "a")
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if calls.Add(1) == 1 { // the first request: held, then refused
			close(entered)
			<-release
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		answerCached(w, body, 0)
	})
	g := newRig(t, nil, a)
	body := chat("m1", longText("a prompt two requests share", 3000), "the question both of them ask")
	failed := make(chan int, 1)
	go func() {
		resp := g.do("POST", "/v1/chat/completions", body)
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		failed <- resp.StatusCode
	}()
	<-entered
	g.post(t, body, http.StatusOK) // the concurrent request, answered
	held := g.holders(EndpointChat, body, "")["a"]
	if held == 0 {
		t.Fatal("a holds nothing of the prompt it answered")
	}
	before := g.counter("kvmesh_router_requests_total")
	close(release)
	if s := <-failed; s != http.StatusServiceUnavailable {
		t.Fatalf("the held request got %d, want 503", s)
	}
	waitFor(t, "the failed request counted", func() bool { return g.counter("kvmesh_router_requests_total") > before })
	if got := g.holders(EndpointChat, body, "")["a"]; got != held {
		t.Errorf("a holds %d blocks of the prompt it answered after another attempt at it failed, want %d", got, held)
	}
}
