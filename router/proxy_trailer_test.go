package router

import (
	"io"
	"net/http"
	"testing"
)

// A backend's trailers reach the client after the body, as the answer's
// own: a chunked answer's declared trailer and an undeclared one, but not a
// hop-by-hop field nor the ORCA report the router asked for (which it
// reads, as it reads the header's).
func TestTrailersForwarded(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Trailer", "X-Cost")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"choices":[]}`)
		w.(http.Flusher).Flush() // chunked: trailers can follow
		w.Header().Set("X-Cost", "42")
		w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
		w.Header().Set(http.TrailerPrefix+"Endpoint-Load-Metrics", "TEXT named_metrics.num_requests_waiting=7")
	})
	g := newRig(t, nil, a)
	resp := g.do("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != `{"choices":[]}` {
		t.Fatalf("answer %d %q %v", resp.StatusCode, body, err)
	}
	if resp.Trailer.Get("X-Cost") != "42" || resp.Trailer.Get("X-Late") != "yes" {
		t.Fatalf("trailers lost: %v", resp.Trailer)
	}
	if resp.Trailer.Get("Endpoint-Load-Metrics") != "" {
		t.Fatalf("the load report the router asked for leaked as a trailer: %v", resp.Trailer)
	}
	if w := g.rt.backendByName("a").loadView(g.rt.now(), &g.rt.cfg, nil); w.Has&HasWaiting == 0 || w.Waiting != 7 {
		t.Fatalf("the trailer's load report was not read: %+v", w)
	}
}
