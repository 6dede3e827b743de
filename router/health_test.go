package router

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// countingLearner records invalidations and forwards everything to a
// LocalLearner.
type countingLearner struct {
	*LocalLearner
	mu          sync.Mutex
	invalidated []string
}

func (l *countingLearner) Invalidate(name string, removed bool) {
	l.mu.Lock()
	l.invalidated = append(l.invalidated, name)
	l.mu.Unlock()
	l.LocalLearner.Invalidate(name, removed)
}

func (l *countingLearner) names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.invalidated)
}

func (l *countingLearner) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.invalidated)
}

func withLearner(l **countingLearner) func(*Config, *Deps) {
	return func(_ *Config, d *Deps) {
		*l = &countingLearner{LocalLearner: NewLocalLearner(d.Index, "test")}
		d.Learner = *l
	}
}

// Consecutive failures eject a backend; it gets no requests until a probe
// re-admits it.
func TestPassiveEjectionAndProbeReadmission(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	a.setHook(closeConn)
	g := newRig(t, func(c *Config, d *Deps) {
		c.EjectAfter = 2
		c.EjectionTime = 50 * time.Millisecond
		c.ProbeInterval = 10 * time.Millisecond
		c.ColdAfter = time.Hour // this test is about ejection, not cold returns
		prefer("a", "b")(c, d)
	}, a, b)
	for i := 0; i < 2; i++ {
		if status, route, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`); status != 200 || routeField(route, "backend") != "b" {
			t.Fatalf("request %d: %d %q", i, status, route)
		}
	}
	if g.rt.backendByName("a").healthy.Load() {
		t.Fatal("a not ejected after 2 consecutive failures")
	}
	st := g.rt.Backends()[0]
	if st.Healthy || st.EjectedForMs == 0 || st.ConsecutiveFailures != 2 || !strings.Contains(st.LastError, "backend_connect") {
		t.Fatalf("status of a: %+v", st)
	}
	before := a.generations()
	if status, route, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"y"}`); status != 200 || routeField(route, "backend") != "b" || routeField(route, "reason") == "retry" {
		t.Fatalf("with a ejected: %d %q", status, route)
	}
	if a.generations() != before {
		t.Fatal("an ejected backend received a request")
	}
	if g.counter("kvmesh_router_backend_ejections_total", "backend", "a") != 1 {
		t.Error("ejection not counted")
	}
	// a recovers; probes (which always answered 200) re-admit it after the
	// ejection time.
	a.setHook(nil)
	if err := g.rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "re-admission", func() bool { return g.rt.backendByName("a").healthy.Load() })
	if status, route, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"z"}`); status != 200 || routeField(route, "backend") != "a" {
		t.Fatalf("after re-admission: %d %q", status, route)
	}
	if gen, _ := g.ix.Generation(g.rt.backendByName("a").id); gen != 0 {
		t.Errorf("a blip must not invalidate claims: generation %d", gen)
	}
}

// A backend down for longer than ColdAfter comes back with a cold cache:
// its claims are invalidated (through the Learner, so a mesh would spread
// it) and its generation shows in /admin/backends.
func TestColdReturnInvalidatesClaims(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	var l *countingLearner
	g := newRig(t, func(c *Config, d *Deps) {
		c.EjectAfter = 2
		c.EjectionTime = 20 * time.Millisecond
		c.ProbeInterval = 10 * time.Millisecond
		c.ColdAfter = 80 * time.Millisecond
		withLearner(&l)(c, d)
		prefer("a", "b")(c, d)
	}, a, b)
	body := `{"model":"m1","prompt":"` + longText("doc", 600) + `"}`
	if _, route, _ := g.call("POST", "/v1/completions", body); routeField(route, "backend") != "a" {
		t.Fatal(route)
	}
	if h := g.holders(EndpointCompletions, body, ""); h["a"] == 0 {
		t.Fatalf("a should hold the prompt: %v", h)
	}
	a.health.Store(http.StatusServiceUnavailable) // down: probes fail
	if err := g.rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ejection", func() bool { return !g.rt.backendByName("a").healthy.Load() })
	time.Sleep(100 * time.Millisecond) // down longer than ColdAfter
	if l.count() != 0 {
		t.Fatal("invalidated while still down")
	}
	a.health.Store(0)
	waitFor(t, "re-admission", func() bool { return g.rt.backendByName("a").healthy.Load() })
	if got := l.names(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("invalidations %v, want [a]", got)
	}
	if h := g.holders(EndpointCompletions, body, ""); h["a"] != 0 {
		t.Fatalf("a's old claims still match after its cold return: %v", h)
	}
	st := g.rt.Backends()[0]
	if st.Generation != 1 || st.ColdReturns != 1 || !st.Healthy {
		t.Fatalf("status after cold return: %+v", st)
	}
	if g.counter("kvmesh_router_backend_invalidations_total", "backend", "a") != 1 {
		t.Error("invalidation not counted")
	}
}

// The scraped prefix-cache counters going backwards reveal a restart too
// fast for probes to notice.
func TestCounterResetInvalidates(t *testing.T) {
	a := newFakeBackend(t, "a")
	var l *countingLearner
	g := newRig(t, func(c *Config, d *Deps) {
		c.ScrapeInterval = 10 * time.Millisecond
		c.ProbeInterval = 0
		withLearner(&l)(c, d)
	}, a)
	page := func(q float64) *string {
		s := "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{model_name=\"m1\"} " +
			strconv.FormatFloat(q, 'f', -1, 64) + "\nvllm:prefix_cache_hits_total{model_name=\"m1\"} 10\nvllm:num_requests_waiting 0\n" +
			"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1\n"
		return &s
	}
	b := g.rt.backendByName("a")
	unfilled := func() float64 {
		b.belief.refresh(g.rt.now().UnixMilli(), g.rt.meshWritten(b), 0, g.rt.unitsPerToken(), 1, 0)
		return g.rt.beliefJSON(b, g.rt.now()).Unfilled
	}
	a.metrics.Store(page(5000))
	if err := g.rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first scrape", func() bool { return g.rt.Backends()[0].PrefixCacheQueries == 5000 })
	a.metrics.Store(page(6000))
	waitFor(t, "second scrape", func() bool { return g.rt.Backends()[0].PrefixCacheQueries == 6000 })
	if l.count() != 0 {
		t.Fatal("a growing counter invalidated claims")
	}
	b.written.Add(1 << 20) // far more than its 1,600 tokens of cache: full
	if u := unfilled(); u != 0 {
		t.Fatalf("a cache written past its capacity is unfilled %v", u)
	}
	a.metrics.Store(page(30))
	waitFor(t, "restart detected", func() bool { return l.count() == 1 })
	if u := unfilled(); u != 1 {
		t.Fatalf("a restarted backend's cache is unfilled %v, want 1 (empty)", u)
	}
	if gen, _ := g.ix.Generation(g.rt.backendByName("a").id); gen != 1 {
		t.Fatalf("generation %d after the restart", gen)
	}
}

func TestLocalLearnerTimestampsNeverGoBack(t *testing.T) {
	ix, err := tree.New(tree.Config{BlockTokens: 16, Capacity: 1024, MaxBackends: 4, EvictFraction: 0.1, RefreshFraction: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLocalLearner(ix, "n")
	clock := time.UnixMilli(1_700_000_000_000)
	l.Now = func() time.Time { return clock }
	var last tree.Timestamp
	for i := 0; i < 100; i++ {
		if i == 50 {
			clock = clock.Add(-time.Second) // the wall clock steps back
		}
		_, ts := l.stamp()
		if ts <= last {
			t.Fatalf("timestamp %d not after %d", ts, last)
		}
		last = ts
	}
	id, _ := ix.EnsureBackend("b")
	var ch tree.Chain
	ix.Keyer().Bytes(&ch, tree.NewSeed("m", "", ""), []byte(strings.Repeat("x", 200)), nil)
	l.Learn(&ch, id, time.Minute)
	var res tree.Result
	ix.Lookup(&ch, clock.UnixMilli(), &res)
	if res.Depth(id) != int32(ch.Blocks()) {
		t.Fatalf("learned depth %d of %d", res.Depth(id), ch.Blocks())
	}
	l.Invalidate("b", false)
	ix.Lookup(&ch, clock.UnixMilli(), &res)
	if res.Depth(id) != 0 {
		t.Fatal("claims match after Invalidate")
	}
}

// A backend down when the router starts is out of rotation once Start
// returns (its first probe failed: it is not trusted for EjectAfter
// probes), so the node is not ready; a request for a model only it could
// serve gets a 503 saying its models are not known yet, not a 404. Once it
// answers, its first successful probe admits it at once (not after
// EjectionTime) and its models are asked at the probe's pace.
func TestBackendDownAtStart(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.down.Store(true)
	g := newRig(t, func(c *Config, d *Deps) {
		c.Backends[0].Models = nil // discovered
		c.EjectAfter = 3
		c.EjectionTime = time.Hour
		c.ProbeInterval = 10 * time.Millisecond
		c.DiscoveryInterval = time.Hour
	}, a)
	if err := g.rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if g.rt.Ready() {
		t.Fatal("ready with its only backend down")
	}
	const chat = `{"model":"m1","messages":[{"role":"user","content":"hello"}]}`
	code, _, body := g.call("POST", "/v1/chat/completions", chat)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "models_unknown") {
		t.Fatalf("a request while the only backend is down: %d %s", code, body)
	}
	a.down.Store(false)
	waitFor(t, "the backend admitted and its models known", func() bool {
		code, _, _ := g.call("POST", "/v1/chat/completions", chat)
		return g.rt.Ready() && code == http.StatusOK
	})
	if code, _, body := g.call("POST", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`); code != http.StatusNotFound {
		t.Fatalf("a model no backend serves once every backend's models are known: %d %s", code, body)
	}
}
