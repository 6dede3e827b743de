package router

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// A client that goes away while the router drains a 5xx answer it meant
// to retry gets no retry: no other backend is booked, counted as retried
// or given a provisional claim for a prompt it is never sent.
func TestClientGoneDuring5xxDrainIsNotRetried(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":`) // flushed, never ended
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	var g *testRig
	g = newRig(t, func(c *Config, d *Deps) {
		c.Retries = 1
		prefer("a", "b")(c, d)
	}, a, b)
	body := `{"model":"m1","prompt":"` + longText("gone-drain", 600) + `"}`
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		// The router has a's 503 headers (counted before the drain starts).
		waitFor(t, "a's 503 seen", func() bool { return g.counter("kvmesh_router_errors_total", "kind", "backend_5xx") >= 1 })
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/completions", strings.NewReader(body))
	if resp, err := g.srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the canceled request got an answer: %d", resp.StatusCode)
	}
	waitFor(t, "the request ended", func() bool {
		return g.counter("kvmesh_router_requests_total", "code", "4xx") >= 1
	})
	if n := g.counter("kvmesh_router_retries_total"); n != 0 {
		t.Errorf("%v retries for a client that had left", n)
	}
	if h := g.holders(EndpointCompletions, body, ""); h["b"] != 0 {
		t.Errorf("b, never sent the prompt, holds %d blocks of it", h["b"])
	}
	if n := g.counter("kvmesh_router_errors_total", "kind", "client_canceled"); n != 1 {
		t.Errorf("client_canceled counted %v times, want 1", n)
	}
	for _, name := range []string{"a", "b"} {
		bk := g.rt.backendByName(name)
		if u, n := pendingOf(g, name); bk.inFlight.Load() != 0 || u != 0 || n != 0 {
			t.Errorf("%s: in flight %d, pending %d units in %d requests after the request ended", name, bk.inFlight.Load(), u, n)
		}
	}
}

// A client that closes its connection halfway through sending the body
// went away: it is counted as client_canceled with status 499, not as a
// malformed request (bad_request, 400).
func TestClientGoneMidBodyIsNotABadRequest(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, nil, a)
	conn, err := net.Dial("tcp", g.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	part := `{"model":"m1","prompt":"` + strings.Repeat("x", 100)
	_, err = io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(10*len(part))+"\r\n\r\n"+part)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	waitFor(t, "the request ended", func() bool {
		return g.counter("kvmesh_router_requests_total", "endpoint", "completions") >= 1
	})
	if n := g.counter("kvmesh_router_errors_total", "kind", "bad_request"); n != 0 {
		t.Errorf("a client gone mid-body counted as %v bad requests", n)
	}
	if n := g.counter("kvmesh_router_errors_total", "kind", "client_canceled"); n != 1 {
		t.Errorf("client_canceled counted %v times, want 1", n)
	}
	if a.generations() != 0 {
		t.Error("a partial body was forwarded")
	}
}
