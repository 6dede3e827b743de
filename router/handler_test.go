package router

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Every request shape reaches a backend byte for byte, with the route
// header explaining the decision.
func TestRequestShapesForwardedUnchanged(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, nil, a)
	cases := []struct{ name, path, body string }{
		{"chat string content", "/v1/chat/completions", `{"model":"m1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}],"stream":false}`},
		{"chat parts", "/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":[{"type":"text","text":"describe"},{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]}`},
		{"chat tool calls", "/v1/chat/completions", `{"model":"m1","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"call f"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}]}`},
		{"completions string", "/v1/completions", `{"model":"m1","prompt":"Once upon a time","max_tokens":5}`},
		{"completions array", "/v1/completions", `{"model":"m1","prompt":["Once upon", " a time"]}`},
		{"completions token ids", "/v1/completions", `{"model":"m1","prompt":[1,2,3,4,5]}`},
		{"responses string", "/v1/responses", `{"model":"m1","instructions":"be brief","input":"hello"}`},
		{"responses items", "/v1/responses", `{"model":"m1","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]}`},
		{"embeddings", "/v1/embeddings", `{"model":"m1","input":["a","b"]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(a.requests())
			status, route, body := g.call("POST", c.path+"?trace=1", c.body, "Authorization", "Bearer k", "Content-Type", "application/json")
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			reqs := a.requests()
			if len(reqs) != before+1 {
				t.Fatalf("backend saw %d requests, want %d", len(reqs), before+1)
			}
			got := reqs[len(reqs)-1]
			if !bytes.Equal(got.Body, []byte(c.body)) {
				t.Errorf("body changed:\n got %s\nwant %s", got.Body, c.body)
			}
			if got.Path != c.path || got.Query != "trace=1" || got.Method != "POST" {
				t.Errorf("backend saw %s %s?%s", got.Method, got.Path, got.Query)
			}
			if got.Header.Get("Authorization") != "Bearer k" {
				t.Errorf("Authorization not forwarded: %v", got.Header)
			}
			if got.Header.Get("X-Forwarded-For") != "127.0.0.1" {
				t.Errorf("X-Forwarded-For = %q", got.Header.Get("X-Forwarded-For"))
			}
			if got.Header.Get("Endpoint-Load-Metrics-Format") != "TEXT" {
				t.Errorf("ORCA format not requested: %v", got.Header)
			}
			if routeField(route, "backend") != "a" || routeField(route, "policy") != "kvmesh" || routeField(route, "reason") == "" {
				t.Errorf("route header %q", route)
			}
			if total := routeField(route, "matched"); !strings.Contains(total, "/") || strings.HasSuffix(total, "/0") {
				t.Errorf("route header matched=%q: want units/total with a non-empty prompt", total)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, func(c *Config, _ *Deps) { c.MaxBodyBytes = 4096 }, a)
	cases := []struct {
		name, method, path, body string
		status                   int
		typ                      string
	}{
		{"malformed json", "POST", "/v1/chat/completions", `{"model":"m1","messages":[`, 400, TypeInvalidRequest},
		{"not an object", "POST", "/v1/completions", `[1,2]`, 400, TypeInvalidRequest},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, TypeInvalidRequest},
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, TypeInvalidRequest},
		{"too large", "POST", "/v1/completions", `{"model":"m1","prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, TypeTooLarge},
		{"unknown path", "GET", "/nope", ``, 404, TypeNotFound},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, TypeInvalidRequest},
		{"unknown model by id", "GET", "/v1/models/nope", ``, 404, TypeInvalidRequest},
		{"forward unknown model", "POST", "/v1/audio/speech", `{"model":"nope","input":"x"}`, 404, TypeInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, _, body := g.call(c.method, c.path, c.body)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("error body is not JSON: %v: %s", err, body)
			}
			if e.Error.Type != c.typ || e.Error.Message == "" {
				t.Errorf("error %+v, want type %s", e.Error, c.typ)
			}
		})
	}
	if n := a.generations(); n != 0 {
		t.Errorf("bad requests reached the backend %d times", n)
	}
	if g.counter("kvmesh_router_errors_total", "kind", "too_large") != 1 ||
		g.counter("kvmesh_router_errors_total", "kind", "model_not_found") != 3 {
		t.Errorf("error counters: too_large %v, model_not_found %v", g.counter("kvmesh_router_errors_total", "kind", "too_large"),
			g.counter("kvmesh_router_errors_total", "kind", "model_not_found"))
	}
}

// Models are unioned over the backends in rotation; a model served only by
// an ejected backend disappears.
func TestModelsUnion(t *testing.T) {
	a := newFakeBackend(t, "a", "m1", "m2")
	b := newFakeBackend(t, "b", "m2", "m3")
	g := newRig(t, func(c *Config, _ *Deps) { c.EjectAfter = 1 }, a, b)
	ids := func() []string {
		status, _, body := g.call("GET", "/v1/models", "")
		if status != 200 {
			t.Fatalf("status %d", status)
		}
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil || list.Object != "list" {
			t.Fatalf("bad list %v: %s", err, body)
		}
		var out []string
		for _, d := range list.Data {
			if d.Object != "model" {
				t.Errorf("entry %+v", d)
			}
			out = append(out, d.ID)
		}
		return out
	}
	if got := strings.Join(ids(), ","); got != "m1,m2,m3" {
		t.Fatalf("models %s, want m1,m2,m3", got)
	}
	g.rt.markFailure(g.rt.backendByName("a"), errBackendConnect, false, "test")
	if got := strings.Join(ids(), ","); got != "m2,m3" {
		t.Fatalf("with a ejected: models %s, want m2,m3", got)
	}
	if status, _, body := g.call("GET", "/v1/models/m3", ""); status != 200 || !strings.Contains(body, `"m3"`) {
		t.Errorf("GET /v1/models/m3: %d %s", status, body)
	}
}

// Models can be discovered from the backends' GET /v1/models; requests for
// them route only to backends serving them.
func TestModelDiscoveryAndPerModelRouting(t *testing.T) {
	a := newFakeBackend(t, "a", "m1")
	b := newFakeBackend(t, "b", "m2")
	g := newRig(t, func(c *Config, _ *Deps) {
		for i := range c.Backends {
			c.Backends[i].Models = nil
		}
		c.ProbeInterval = 0
	}, a, b)
	if err := g.rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	status, _, body := g.call("GET", "/v1/models", "")
	if status != 200 || !strings.Contains(body, `"owned_by":"a"`) || !strings.Contains(body, `"max_model_len":4096`) {
		t.Fatalf("discovered models should keep the backends' objects: %d %s", status, body)
	}
	for i := 0; i < 6; i++ {
		model := []string{"m1", "m2"}[i%2]
		status, route, body := g.call("POST", "/v1/completions", `{"model":"`+model+`","prompt":"p`+strings.Repeat("x", i)+`"}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		if want := map[string]string{"m1": "a", "m2": "b"}[model]; routeField(route, "backend") != want {
			t.Errorf("model %s routed to %q", model, route)
		}
	}
}

// Other paths go to a backend serving the body's model, or any backend.
func TestForwardOtherPaths(t *testing.T) {
	a := newFakeBackend(t, "a", "m1")
	b := newFakeBackend(t, "b", "m2")
	g := newRig(t, nil, a, b)
	status, route, _ := g.call("POST", "/tokenize", `{"model":"m2","prompt":"hi"}`)
	if status != 200 || routeField(route, "backend") != "b" || routeField(route, "reason") != "forward" || routeField(route, "matched") != "0/0" {
		t.Fatalf("tokenize: %d %q", status, route)
	}
	status, route, _ = g.call("GET", "/version", "")
	if status != 200 || routeField(route, "backend") == "" {
		t.Fatalf("version: %d %q", status, route)
	}
	reqs := b.requests()
	if len(reqs) == 0 || reqs[0].Path != "/tokenize" || string(reqs[0].Body) != `{"model":"m2","prompt":"hi"}` {
		t.Fatalf("b saw %+v", reqs)
	}
}

// vLLM's runtime LoRA endpoints change one backend's state: refused, not
// forwarded to whichever backend is least loaded.
func TestForwardDenied(t *testing.T) {
	a := newFakeBackend(t, "a", "m1")
	g := newRig(t, nil, a)
	for _, p := range []string{"/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/v1/load_lora_adapter/"} {
		status, _, body := g.call("POST", p, `{"lora_name":"x","lora_path":"/tmp/x"}`)
		if status != http.StatusForbidden || !strings.Contains(body, "path_not_forwarded") {
			t.Fatalf("%s: %d %s", p, status, body)
		}
	}
	if n := len(a.requests()); n != 0 {
		t.Fatalf("the backend saw %d requests", n)
	}
	// Configurable: an empty list forwards them.
	b := newFakeBackend(t, "b", "m1")
	g = newRig(t, func(c *Config, _ *Deps) { c.ForwardDeny = nil }, b)
	if status, _, _ := g.call("POST", "/v1/load_lora_adapter", `{"lora_name":"x"}`); status != 200 {
		t.Fatalf("with forward_deny empty: %d", status)
	}
}

// Forwarded requests go by the least_loaded policy: away from the busy
// backend, taking turns among the idle ones.
func TestForwardLeastLoaded(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"), newFakeBackend(t, "b"), newFakeBackend(t, "c"))
	g.rt.backendByName("a").inFlight.Add(5)
	defer g.rt.backendByName("a").inFlight.Add(-5)
	got := map[string]int{}
	for i := 0; i < 4; i++ {
		status, route, _ := g.call("POST", "/tokenize", `{"model":"m1","prompt":"hi"}`)
		if status != 200 || routeField(route, "reason") != "forward" {
			t.Fatalf("tokenize: %d %q", status, route)
		}
		got[routeField(route, "backend")]++
	}
	if got["a"] != 0 || got["b"] != 2 || got["c"] != 2 {
		t.Fatalf("forwarded requests went to %v, want b and c in turn, never the busy a", got)
	}
}

func TestAllBackendsDown503(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, func(c *Config, _ *Deps) { c.EjectAfter = 1 }, a)
	g.rt.markFailure(g.rt.backendByName("a"), errBackendConnect, false, "test")
	status, _, body := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`)
	if status != http.StatusServiceUnavailable || !strings.Contains(body, TypeUnavailable) {
		t.Fatalf("status %d: %s", status, body)
	}
	if g.rt.Ready() {
		t.Error("Ready with every backend ejected")
	}
}

// Paths with dot segments, plain or percent-encoded, are refused before
// the forwarding allowlist: /v1/../sim/fault starts with the allowed /v1/
// but names an engine endpoint the allowlist hides.
func TestDotSegmentsRefused(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, nil, a)
	for _, p := range []string{"/v1/../sim/fault", "/v1/%2e%2e/sim/fault", "/v1/%2E./sim/fault", "/v1/./models",
		"/v1/..%2fsim/fault", "/v1/..%5Csim/fault", "/v1/%252e%252e/sim/fault", "/v1/models/..", "/v1/chat/completions/.."} {
		for _, method := range []string{"GET", "POST"} {
			status, _, body := g.call(method, p, `{"model":"m1"}`)
			if status != 400 || !strings.Contains(body, "invalid_path") {
				t.Errorf("%s %s: %d %s", method, p, status, body)
			}
		}
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("%d dot-segment requests reached the backend: %+v", n, a.requests())
	}
	// Dots inside a segment are fine.
	if status, _, body := g.call("GET", "/v1/files/batch..v2.jsonl", ""); status != 200 {
		t.Errorf("a file name with dots: %d %s", status, body)
	}
}
