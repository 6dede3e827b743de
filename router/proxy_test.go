package router

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// preferPolicy chooses the candidate named first in order that is present:
// it makes the first choice of proxy tests deterministic.
type preferPolicy struct{ order []string }

func (p preferPolicy) Name() string { return "prefer" }

func (p preferPolicy) Choose(_ *Request, cands []Candidate, _ []float64) Decision {
	for _, name := range p.order {
		for i := range cands {
			if cands[i].Name == name {
				return Decision{Index: i, Reason: ReasonPrefix, Learn: true}
			}
		}
	}
	return Decision{Index: 0, Reason: ReasonPrefix, Learn: true}
}

func prefer(names ...string) func(*Config, *Deps) {
	return func(_ *Config, d *Deps) { d.Policy = preferPolicy{names} }
}

const streamBody = `{"model":"m1","stream":true,"messages":[{"role":"user","content":"count from one to ten slowly, one number per event, then stop counting please"}]}`

// SSE events reach the client one by one, as the backend sends them: the
// client reads the first event before the backend writes the second.
func TestStreamingFlushesEachEvent(t *testing.T) {
	a := newFakeBackend(t, "a")
	release := make(chan struct{})
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: {\"n\":2,\"usage\":{\"prompt_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\ndata: [DONE]\n\n")
	})
	g := newRig(t, nil, a)
	resp := g.do("POST", "/v1/chat/completions", streamBody)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "data: {\"n\":1}\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the first event did not reach the client before the backend sent the second: the proxy buffers")
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest %q", rest)
	}
	waitFor(t, "usage counted", func() bool {
		return g.counter("kvmesh_router_backend_cached_tokens_total", "backend", "a") == 3
	})
	if g.counter("kvmesh_router_claims_learned_total", "kind", "confirmed") != 1 {
		t.Error("a completed stream should confirm its claims")
	}
}

// A client that goes away cancels the backend request.
func TestClientCancelPropagates(t *testing.T) {
	a := newFakeBackend(t, "a")
	arrived := make(chan struct{})
	canceled := make(chan struct{})
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {}\n\n")
		w.(http.Flusher).Flush()
		close(arrived)
		<-r.Context().Done()
		close(canceled)
	})
	g := newRig(t, nil, a)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-arrived
	cancel()
	resp.Body.Close()
	select {
	case <-canceled:
	case <-time.After(30 * time.Second):
		t.Fatal("backend request was not canceled after the client went away")
	}
	waitFor(t, "client_canceled counted", func() bool {
		return g.counter("kvmesh_router_errors_total", "kind", "client_canceled") == 1
	})
	waitFor(t, "in-flight back to 0", func() bool { return g.rt.backendByName("a").inFlight.Load() == 0 })
	if g.counter("kvmesh_router_claims_learned_total", "kind", "confirmed") != 0 {
		t.Error("a canceled request must not confirm its claims")
	}
}

// closeConn makes a backend drop the connection without answering.
func closeConn(w http.ResponseWriter, _ *http.Request, _ []byte) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestRetryOnConnectionFailureBeforeFirstByte(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	a.setHook(closeConn)
	g := newRig(t, prefer("a", "b"), a, b)
	prompt := `{"model":"m1","prompt":"` + longText("retry", 300) + `"}`
	status, route, body := g.call("POST", "/v1/completions", prompt)
	if status != 200 || !strings.Contains(body, `"backend":"b"`) {
		t.Fatalf("status %d body %s", status, body)
	}
	if routeField(route, "backend") != "b" || routeField(route, "reason") != "retry" {
		t.Errorf("route %q, want backend=b reason=retry", route)
	}
	if a.generations() != 1 || b.generations() != 1 {
		t.Errorf("a saw %d, b saw %d requests", a.generations(), b.generations())
	}
	if g.counter("kvmesh_router_retries_total") != 1 || g.counter("kvmesh_router_errors_total", "kind", "backend_connect") != 1 {
		t.Error("retry and connect error not counted")
	}
	// b served the prompt: it holds it (a keeps its provisional claim until
	// it expires; the failure ejects it soon anyway).
	ch := chainFor(t, g, EndpointCompletions, prompt, "")
	if h := g.holders(EndpointCompletions, prompt, ""); ch.Blocks() == 0 || h["b"] != ch.Blocks() {
		t.Errorf("holders %v, want b at %d", h, ch.Blocks())
	}
}

func TestRetryOn5xxAndPassLast5xxThrough(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	fail := func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"busy"}`)
	}
	a.setHook(fail)
	g := newRig(t, prefer("a", "b"), a, b)
	status, route, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`)
	if status != 200 || routeField(route, "backend") != "b" {
		t.Fatalf("status %d route %q", status, route)
	}
	// Both fail: the last backend's own 5xx reaches the client.
	b.setHook(fail)
	status, route, body := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"y"}`)
	if status != http.StatusServiceUnavailable || body != `{"error":"busy"}` || routeField(route, "reason") != "retry" {
		t.Fatalf("status %d route %q body %s", status, route, body)
	}
	if got := a.generations() + b.generations(); got != 4 {
		t.Errorf("backends saw %d requests, want 4", got)
	}
}

// The invariant: once the first byte reached the client, a failing backend
// is never retried. The client sees a broken answer instead.
func TestNeverRetryAfterFirstByte(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	a.setHook(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = buf.Flush()
			conn.Close()
		}
	})
	g := newRig(t, prefer("a", "b"), a, b)
	resp := g.do("POST", "/v1/chat/completions", streamBody)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(got), "data: {\"n\":1}") {
		t.Fatalf("client got %q", got)
	}
	if err == nil {
		t.Error("the client should see the answer break off, not a clean end")
	}
	if n := b.generations(); n != 0 {
		t.Fatalf("b received %d requests: a request was retried after its first byte reached the client", n)
	}
	if g.counter("kvmesh_router_retries_total") != 0 {
		t.Error("retry counted")
	}
	waitFor(t, "stream_broken counted", func() bool {
		return g.counter("kvmesh_router_errors_total", "kind", "stream_broken") == 1 &&
			g.counter("kvmesh_router_requests_total", "endpoint", "chat", "code", "5xx") == 1
	})
}

func TestBackendHeaderTimeout504NotRetried(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	var canceled atomic.Bool
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
			canceled.Store(true)
		case <-time.After(5 * time.Second):
		}
	})
	g := newRig(t, func(c *Config, d *Deps) {
		c.BackendHeaderTimeout = 100 * time.Millisecond
		prefer("a", "b")(c, d)
	}, a, b)
	status, route, body := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`)
	if status != http.StatusGatewayTimeout || !strings.Contains(body, TypeTimeout) {
		t.Fatalf("status %d: %s", status, body)
	}
	if routeField(route, "backend") != "a" {
		t.Errorf("route %q", route)
	}
	if b.generations() != 0 {
		t.Error("a timed-out request was retried")
	}
	waitFor(t, "backend request canceled", canceled.Load)
}

// Hop-by-hop headers, and those the Connection header names, are not
// forwarded; end-to-end headers are.
func TestHopByHopHeaders(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("X-Backend", "1")
		w.Header().Set("Endpoint-Load-Metrics", "TEXT named_metrics.num_requests_waiting=1")
		_, _ = io.WriteString(w, `{}`)
	})
	g := newRig(t, nil, a)
	resp := g.do("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`,
		"Connection", "X-Secret", "X-Secret", "1", "Proxy-Authorization", "p", "Te", "trailers", "X-Forwarded-For", "10.0.0.1", "X-Keep", "k")
	resp.Body.Close()
	h := a.requests()[0].Header
	for _, k := range []string{"X-Secret", "Proxy-Authorization", "Te"} {
		if h.Get(k) != "" {
			t.Errorf("%s forwarded", k)
		}
	}
	if h.Get("X-Keep") != "k" || h.Get("X-Forwarded-For") != "10.0.0.1, 127.0.0.1" {
		t.Errorf("end-to-end headers: %v", h)
	}
	if resp.Header.Get("X-Backend") != "1" {
		t.Error("response header dropped")
	}
	if resp.Header.Get("Endpoint-Load-Metrics") != "" {
		t.Error("the load report the router asked for leaked to a client that did not ask")
	}
}
