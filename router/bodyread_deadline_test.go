package router

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The body's read deadline (BodyReadTimeout) bounds the body, never the
// answer: a stream that lasts far longer than it reaches the client whole,
// whether the router read the body itself or a handler in front of it
// (middleware, the benchmark's oracle) read it first. net/http watches an
// idle client with a read on its connection once the body is in; a
// deadline the router left on that connection made the read fail and
// cancelled the request: 200s with no answer, or a stream cut off.
func TestBodyDeadlineNeverCutsTheAnswer(t *testing.T) {
	const events = 8
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range events { // 8 events 60 ms apart: ten times the deadline
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			_ = rc.Flush()
			time.Sleep(60 * time.Millisecond)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(be.Close)
	g := newRig(t, func(cfg *Config, _ *Deps) {
		cfg.Backends = []BackendConfig{{Name: "a", URL: be.URL, Models: []string{"m1"}}}
		cfg.BodyReadTimeout = 50 * time.Millisecond
		cfg.BodyMinRate = 1 << 30
	})
	// The same router behind a handler that reads the body first.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		g.rt.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	stream := `{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for name, url := range map[string]string{"router": g.srv.URL, "behind a body reader": front.URL} {
		for round := range 2 { // the second on a reused connection
			resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(stream))
			if err != nil {
				t.Fatalf("%s, round %d: %v", name, round, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), "t7") || !strings.Contains(string(b), "[DONE]") {
				t.Fatalf("%s, round %d: %d, err %v, answer %q; want the whole stream", name, round, resp.StatusCode, err, b)
			}
		}
	}
}
