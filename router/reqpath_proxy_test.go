package router

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A 5xx answer to be retried is drained only briefly: a backend that sends
// 503 headers and then stalls its body must not hold the retry (the header
// timer is stopped by then). The 20-second bound only marks a hang; the
// retry normally follows retryDrainTimeout.
func TestRetryAfterStalled5xxBody(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the servers close
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":`) // chunked: no length, flushed, never ended
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	g := newRig(t, func(c *Config, d *Deps) {
		c.Retries = 1
		prefer("a", "b")(c, d)
	}, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m1","prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("no answer: the retry hung on the stalled 503 body: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), `"backend":"b"`) {
		t.Fatalf("status %d, %v: %s", resp.StatusCode, err, body)
	}
	if route := resp.Header.Get(RouteHeader); routeField(route, "backend") != "b" || routeField(route, "reason") != "retry" {
		t.Errorf("route %q, want backend=b reason=retry", route)
	}
	if a.generations() != 1 || b.generations() != 1 {
		t.Errorf("a saw %d, b saw %d requests", a.generations(), b.generations())
	}
}
