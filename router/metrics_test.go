package router

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The metrics an operator reads: decisions by reason, requests by endpoint
// and status class, durations, claims learned, the backend's own cached
// tokens, all on the registry passed in.
func TestMetricsCountRequests(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, nil, a)
	body := `{"model":"m1","prompt":"` + longText("metrics", 400) + `"}`
	for i := 0; i < 3; i++ {
		if status, _, _ := g.call("POST", "/v1/completions", body); status != 200 {
			t.Fatal(status)
		}
	}
	g.call("POST", "/v1/completions", `{"model":"m1"`)
	g.call("GET", "/v1/models", "")
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kvmesh_router_decisions_total", []string{"policy", "kvmesh", "reason", "miss"}, 1},
		{"kvmesh_router_decisions_total", []string{"policy", "kvmesh", "reason", "prefix"}, 2},
		{"kvmesh_router_requests_total", []string{"endpoint", "completions", "code", "2xx"}, 3},
		{"kvmesh_router_requests_total", []string{"endpoint", "completions", "code", "4xx"}, 1},
		{"kvmesh_router_requests_total", []string{"endpoint", "models", "code", "2xx"}, 1},
		{"kvmesh_router_request_duration_seconds", []string{"endpoint", "completions"}, 4},
		{"kvmesh_router_time_to_first_byte_seconds", []string{"endpoint", "completions"}, 3},
		{"kvmesh_router_decision_duration_seconds", nil, 3},
		{"kvmesh_router_matched_prefix_ratio", nil, 3},
		{"kvmesh_router_claims_learned_total", []string{"kind", "provisional"}, 3},
		{"kvmesh_router_claims_learned_total", []string{"kind", "confirmed"}, 3},
		{"kvmesh_router_claims_learned_total", []string{"kind", "first_byte"}, 3},
		{"kvmesh_router_backend_cached_tokens_total", []string{"backend", "a"}, 21},
		{"kvmesh_router_backend_prompt_tokens_total", []string{"backend", "a"}, 120},
		{"kvmesh_router_errors_total", []string{"kind", "bad_request"}, 1},
		{"kvmesh_router_backend_healthy", []string{"backend", "a"}, 1},
		{"kvmesh_router_backend_in_flight_requests", []string{"backend", "a"}, 0},
	}
	for _, c := range checks {
		if got := g.counter(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	mfs, _ := g.reg.Gather()
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "kvmesh_router_") {
			t.Errorf("metric %s outside kvmesh_router_", mf.GetName())
		}
	}
}

// Steady load, including streams and clients that go away, leaves no
// goroutines behind and no requests counted in flight.
func TestNoGoroutineGrowth(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 3; i++ {
				_, _ = w.Write([]byte("data: {}\n\n"))
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(time.Millisecond):
				}
			}
			return
		}
		_, _ = w.Write([]byte(`{}`))
	})
	g := newRig(t, nil, a)
	run := func(n int) {
		for i := 0; i < n; i++ {
			switch i % 3 {
			case 0:
				g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`)
			case 1:
				g.call("POST", "/v1/chat/completions", streamBody)
			case 2:
				ctx, cancel := context.WithCancel(t.Context())
				req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody))
				if resp, err := g.srv.Client().Do(req); err == nil {
					cancel()
					resp.Body.Close()
				}
				cancel()
			}
		}
	}
	run(60)
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	run(300)
	waitFor(t, "goroutines to settle", func() bool { return runtime.NumGoroutine() <= before+4 })
	waitFor(t, "in-flight back to 0", func() bool { return g.rt.backendByName("a").inFlight.Load() == 0 })
}
