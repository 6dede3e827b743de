package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/tree"
)

// seen is one request a fake backend received.
type seen struct {
	Method, Path, Query string
	Header              http.Header
	Body                []byte
}

// fakeBackend is an OpenAI-compatible test server on 127.0.0.1. By default
// it answers generation requests with a small completion carrying usage
// (cached_tokens 7) and an ORCA report when asked for one; hook replaces
// that behaviour.
type fakeBackend struct {
	t      testing.TB
	name   string
	srv    *httptest.Server
	models []string

	mu   sync.Mutex
	reqs []seen
	hook func(w http.ResponseWriter, r *http.Request, body []byte)

	health  atomic.Int32 // status of GET /health (0 = 200)
	down    atomic.Bool  // every path answers 503 (a backend still starting)
	orca    atomic.Pointer[string]
	metrics atomic.Pointer[string]
	gens    atomic.Int64 // generation requests served
}

func newFakeBackend(t testing.TB, name string, models ...string) *fakeBackend {
	t.Helper()
	if len(models) == 0 {
		models = []string{"m1"}
	}
	f := &fakeBackend{t: t, name: name, models: models}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeBackend) URL() string { return f.srv.URL }

func (f *fakeBackend) setHook(h func(w http.ResponseWriter, r *http.Request, body []byte)) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

func (f *fakeBackend) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

func (f *fakeBackend) generations() int { return int(f.gens.Load()) }

func (f *fakeBackend) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if f.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/health":
		if s := f.health.Load(); s != 0 {
			w.WriteHeader(int(s))
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	case "/metrics":
		if m := f.metrics.Load(); m != nil {
			_, _ = io.WriteString(w, *m)
			return
		}
		http.NotFound(w, r)
		return
	case "/v1/models":
		if r.Method == http.MethodGet {
			var data []map[string]any
			for _, m := range f.models {
				data = append(data, map[string]any{"id": m, "object": "model", "owned_by": f.name, "max_model_len": 4096})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
			return
		}
	}
	f.gens.Add(1)
	f.mu.Lock()
	f.reqs = append(f.reqs, seen{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		hook(w, r, body)
		return
	}
	if r.Header.Get("Endpoint-Load-Metrics-Format") != "" {
		if o := f.orca.Load(); o != nil {
			w.Header().Set("Endpoint-Load-Metrics", *o)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"x","object":"chat.completion","backend":%q,"path":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41,"prompt_tokens_details":{"cached_tokens":7}}}`, f.name, r.URL.Path)
}

// testRig is a router in front of fake backends.
type testRig struct {
	t        testing.TB
	rt       *Router
	ix       *tree.Index
	reg      *prometheus.Registry
	backends []*fakeBackend
	srv      *httptest.Server
}

// newRig builds a router with DefaultConfig (static models from the fake
// backends, probes and scrapes only when started) adjusted by mod.
func newRig(t testing.TB, mod func(*Config, *Deps), backends ...*fakeBackend) *testRig {
	t.Helper()
	cfg := DefaultConfig()
	for _, b := range backends {
		cfg.Backends = append(cfg.Backends, BackendConfig{Name: b.name, URL: b.URL(), Models: b.models})
	}
	cfg.SGLang.TreeCapacity = 1 << 14
	// The fake backends report the same usage whatever they were sent (no
	// cache behind it): the belief would learn from it that nothing is
	// ever kept. Its own tests turn it on with backends that model a cache.
	cfg.Belief.Enabled = false
	// Removals finalize as soon as the backend is idle (its own test sets a
	// grace): tests that remove backends wait for it.
	cfg.Discovery.RemoveGrace = 0
	tc := tree.DefaultConfig()
	tc.Capacity = 1 << 16 // the default's 64 MiB table is slow to allocate in every test
	ix, err := tree.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	deps := Deps{Index: ix, Registerer: reg}
	if mod != nil {
		mod(&cfg, &deps)
	}
	rt, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	rig := &testRig{t: t, rt: rt, ix: ix, reg: reg, backends: backends}
	rig.srv = httptest.NewServer(rt)
	t.Cleanup(rig.srv.Close)
	return rig
}

// do sends a request through the router's HTTP server.
func (g *testRig) do(method, path, body string, hdr ...string) *http.Response {
	g.t.Helper()
	req, err := http.NewRequest(method, g.srv.URL+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

// call sends a request and returns status, route header and body.
func (g *testRig) call(method, path, body string, hdr ...string) (int, string, string) {
	g.t.Helper()
	resp := g.do(method, path, body, hdr...)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(RouteHeader), string(b)
}

func (g *testRig) counter(name string, labels ...string) float64 {
	g.t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		g.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		total := 0.0
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			}
		}
		return total
	}
	return 0
}

// routeField extracts one field of an x-kvmesh-route value.
func routeField(h, name string) string {
	for _, f := range strings.Split(h, "; ") {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// chat builds a chat body from alternating user/assistant contents after a
// system prompt.
func chat(model, system string, turns ...string) string {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{"system", system}}
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, c})
	}
	b, _ := json.Marshal(map[string]any{"model": model, "messages": msgs})
	return string(b)
}

// longText returns deterministic text of about n bytes, distinct per seed.
func longText(seed string, n int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < n; i++ {
		fmt.Fprintf(&sb, "%s sentence %d about caches and prefixes. ", seed, i)
	}
	return sb.String()
}

// It is a liveness bound, not a deadline: only broken code reaches it, and
// a loaded machine running -race may stall for seconds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// chainFor returns the chain the router derives for a body (a copy).
func chainFor(t testing.TB, g *testRig, ep Endpoint, body, tenant string) *tree.Chain {
	t.Helper()
	st := g.rt.getState()
	defer g.rt.putState(st)
	if aerr := g.rt.prepare(st, ep, []byte(body), tenant); aerr != nil {
		t.Fatal(aerr)
	}
	ch := st.chain
	ch.Keys = append([]tree.Key(nil), ch.Keys...)
	ch.Learn = append([]int32(nil), ch.Learn...)
	return &ch
}

// holders returns, per backend name, the depth in blocks its claims hold of
// the body's prompt.
func (g *testRig) holders(ep Endpoint, body, tenant string) map[string]int {
	g.t.Helper()
	ch := chainFor(g.t, g, ep, body, tenant)
	var res tree.Result
	g.ix.Lookup(ch, time.Now().UnixMilli(), &res)
	out := map[string]int{}
	for _, m := range res.Matches {
		e, _ := g.ix.Backend(m.Backend)
		out[e.Name] = int(m.Blocks)
	}
	return out
}

// answerCached writes a chat completion whose usage reports the body's
// length over four as its prompt tokens, cached of them cached: a backend
// answering what its prefix cache held.
func answerCached(w http.ResponseWriter, body []byte, cached int64) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}}}`, len(body)/4, cached)
}
