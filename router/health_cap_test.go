package router

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// failAll answers every generation request 500 with an engine-style error.
func failAll(w http.ResponseWriter, _ *http.Request, _ []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "7")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = io.WriteString(w, `{"error":{"message":"engine failed on this prompt","type":"InternalServerError","code":500}}`)
}

// ejectRig is four backends that all answer hook, each ejected at its first
// failure, every request tried on all four, no probes.
func ejectRig(t *testing.T, hook func(http.ResponseWriter, *http.Request, []byte), share float64) (*testRig, []*fakeBackend) {
	t.Helper()
	bs := []*fakeBackend{newFakeBackend(t, "a"), newFakeBackend(t, "b"), newFakeBackend(t, "c"), newFakeBackend(t, "d")}
	for _, b := range bs {
		b.setHook(hook)
	}
	g := newRig(t, func(c *Config, d *Deps) {
		c.EjectAfter, c.Retries, c.ProbeInterval, c.EjectionTime = 1, 3, 0, time.Hour
		c.MaxEjectedShare = share
		prefer("a", "b", "c", "d")(c, d)
	}, bs...)
	return g, bs
}

func ejectedCount(g *testRig) int {
	n := 0
	for _, s := range g.rt.Backends() {
		if !s.Healthy {
			n++
		}
	}
	return n
}

// A prompt that makes every engine fail ejects at most max_ejected_share
// of the fleet: the rest keeps serving the other clients.
func TestAnswersEjectAtMostTheShare(t *testing.T) {
	g, _ := ejectRig(t, failAll, 0.5)
	for i := 0; i < 4; i++ {
		if status, _, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"poison"}`); status != http.StatusInternalServerError {
			t.Fatalf("request %d: status %d, want the engines' 500", i, status)
		}
	}
	if n := ejectedCount(g); n != 2 {
		t.Fatalf("%d of 4 backends ejected by answers, want 2 (max_ejected_share 0.5)", n)
	}
	if g.counter("kvmesh_router_ejections_capped_total") == 0 {
		t.Error("ejections held back by the cap not counted")
	}
	// Without the cap the same answers eject all four.
	g, _ = ejectRig(t, failAll, 1)
	for i := 0; i < 2; i++ {
		g.call("POST", "/v1/completions", `{"model":"m1","prompt":"poison"}`)
	}
	if n := ejectedCount(g); n != 4 {
		t.Fatalf("max_ejected_share 1: %d of 4 ejected, want 4", n)
	}
}

// A backend that refuses connections is down whatever the clients send: it
// is ejected past the cap.
func TestRefusedConnectionsEjectPastTheShare(t *testing.T) {
	g, _ := ejectRig(t, closeConn, 0.5)
	status, _, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`)
	if status != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", status)
	}
	if n := ejectedCount(g); n != 4 {
		t.Fatalf("%d of 4 backends that refuse connections ejected, want 4", n)
	}
	if g.counter("kvmesh_router_ejections_capped_total") != 0 {
		t.Error("a refused connection was held back by the cap")
	}
}

// When the attempts after a 5xx answer find no backend that answers, the
// client gets that answer (the engine's message), not the router's bare
// 502; an answer too long to keep is not cut short into a broken document.
func TestBackendErrorAnswerOutlivesFailedRetries(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	a.setHook(failAll)
	b.setHook(closeConn)
	g := newRig(t, func(c *Config, d *Deps) {
		c.EjectAfter = 100
		prefer("a", "b")(c, d)
	}, a, b)
	status, route, body := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`)
	if status != http.StatusInternalServerError || !strings.Contains(body, "engine failed on this prompt") {
		t.Fatalf("status %d body %s, want a's 500 with its message", status, body)
	}
	if routeField(route, "backend") != "a" {
		t.Errorf("route %q, want the backend whose answer it is (a)", route)
	}
	// With the backend's headers (Retry-After, a Content-Encoding).
	resp := g.do("POST", "/v1/completions", `{"model":"m1","prompt":"x2"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Retry-After") != "7" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("kept answer: %d, headers %v", resp.StatusCode, resp.Header)
	}
	if a.generations() != 2 || b.generations() != 2 {
		t.Errorf("a saw %d, b %d requests, want two each", a.generations(), b.generations())
	}

	long := strings.Repeat("x", maxKeptErrorBody+1)
	a.setHook(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, long)
	})
	status, _, body = g.call("POST", "/v1/completions", `{"model":"m1","prompt":"y"}`)
	if status != http.StatusBadGateway || strings.Contains(body, "xxxx") {
		t.Fatalf("answer over %d bytes: status %d (body %d bytes), want the router's 502", maxKeptErrorBody, status, len(body))
	}
}
