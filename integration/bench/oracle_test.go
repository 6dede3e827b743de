package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/router"
)

func fastSimConfig() sim.Config {
	c := sim.DefaultConfig()
	c.TimeScale = 2000
	c.CacheBlocks = 4096
	return c
}

// oracleRequest renders body as the router would and registers it.
func oracleRequest(t *testing.T, o *Oracle, body []byte) (*router.Request, func()) {
	t.Helper()
	p := new(router.Prompt)
	if err := router.Render(router.EndpointChat, body, p); err != nil {
		t.Fatal(err)
	}
	return &router.Request{Model: "kvmesh-sim", Prompt: p}, o.register(router.EndpointChat, &oracleReq{body: body})
}

func TestOraclePicksTheBackendThatHoldsThePrefix(t *testing.T) {
	insts := simInstances(t, "o", 3)
	system := words("sys", 400)
	// Warm instance 2 with the system prompt (and a first question).
	o, cands, backends := warmedOracle(t, insts, 2, sim.ChatPath, chatBody(system, "first question", 2))
	req, unregister := oracleRequest(t, o, chatBody(system, "second question", 2))
	scores := make([]float64, len(cands))
	d := o.Choose(req, cands, scores)
	if d.Index != 2 {
		t.Errorf("oracle chose %s (scores %v), want b2, the only backend holding the system prompt", cands[d.Index].Name, scores)
	}
	if !(scores[2] < scores[0] && scores[0] == scores[1]) {
		t.Errorf("scores %v: want the holder cheapest and the two cold backends equal", scores)
	}
	unregister()

	// Without a registered body the oracle sees no cache anywhere and says so.
	req, _ = oracleRequest(t, NewOracle(router.DefaultKVMeshConfig(), backends), chatBody(system, "third", 2))
	o2 := NewOracle(router.DefaultKVMeshConfig(), backends)
	o2.Choose(req, cands, scores)
	if o2.Misses() != 1 {
		t.Errorf("misses = %d, want 1 for an unregistered body", o2.Misses())
	}
}

// fakeOracleBackend reports a fixed cache match and load.
type fakeOracleBackend struct {
	cached, prompt int
	load           sim.Load
}

func (f *fakeOracleBackend) CachedPrefix([]byte, string) (int, int, error) {
	return f.cached, f.prompt, nil
}
func (f *fakeOracleBackend) Load() sim.Load { return f.load }

func TestOracleWeighsQueuedPrefillAgainstCache(t *testing.T) {
	holder := &fakeOracleBackend{cached: 3000, prompt: 4000}
	idle := &fakeOracleBackend{cached: 0, prompt: 4000}
	cfg := router.DefaultKVMeshConfig()
	cfg.CacheWeight = 0 // prefill priced for its time alone: the arithmetic below
	o := NewOracle(cfg, map[string]OracleBackend{"b0": idle, "b1": holder})
	cands := []router.Candidate{{Name: "b0", Weight: 1}, {Name: "b1", Weight: 1}}
	scores := make([]float64, 2)
	r := &oracleReq{body: chatBody("s", "u", 1)}
	p := new(router.Prompt)
	if err := router.Render(router.EndpointChat, r.body, p); err != nil {
		t.Fatal(err)
	}
	req := &router.Request{Prompt: p}
	unregister := o.register(router.EndpointChat, r)
	defer unregister()
	if d := o.Choose(req, cands, scores); d.Index != 1 {
		t.Fatalf("chose b%d with scores %v, want the holder when nothing is queued", d.Index, scores)
	}
	// The choice booked the request's 1,000 uncached tokens on the holder.
	if q := o.backends["b1"].queued.Load(); q != 1000 {
		t.Errorf("queued at the holder = %d, want the 1,000 uncached tokens", q)
	}
	o.settle(r)
	if q := o.backends["b1"].queued.Load(); q != 0 {
		t.Errorf("queued after the first byte = %d, want 0", q)
	}
	// 5,000 tokens of prefill queued at the holder outweigh 3,000 saved.
	o.backends["b1"].queued.Store(5000)
	r2 := &oracleReq{body: r.body}
	defer o.register(router.EndpointChat, r2)()
	if d := o.Choose(req, cands, scores); d.Index != 0 {
		t.Errorf("chose b%d with scores %v, want the idle backend when the holder has 5,000 tokens queued", d.Index, scores)
	}
	if q := o.backends["b0"].queued.Load(); q != 4000 {
		t.Errorf("queued at the idle backend = %d, want the whole 4,000-token prompt", q)
	}
	// A retry moves the booking.
	o.Choose(&router.Request{Prompt: p, Attempt: 1}, cands[1:], scores[:1])
	if q0, q1 := o.backends["b0"].queued.Load(), o.backends["b1"].queued.Load(); q0 != 0 || q1 != 5000+1000 {
		t.Errorf("after a retry on b1: queued %d and %d, want 0 and 6000", q0, q1)
	}
}

// The oracle prices the engines' live KV usage; with ScrapedLoad
// ("oracle+scraped") the router's scraped view in the candidates instead.
func TestOracleScrapedLoad(t *testing.T) {
	full := &fakeOracleBackend{prompt: 4000, load: sim.Load{KVCacheUsage: 0.99}} // live: about to preempt
	free := &fakeOracleBackend{prompt: 4000}
	cfg := router.DefaultKVMeshConfig()
	body := chatBody("s", "u", 1)
	p := new(router.Prompt)
	if err := router.Render(router.EndpointChat, body, p); err != nil {
		t.Fatal(err)
	}
	// The scrape, a moment old, says the opposite.
	cands := []router.Candidate{
		{Name: "b0", Weight: 1, Load: router.LoadView{SignalWeight: 1, KVUsage: 0, Has: router.HasKVCacheUsage}},
		{Name: "b1", Weight: 1, Load: router.LoadView{SignalWeight: 1, KVUsage: 0.99, Has: router.HasKVCacheUsage}},
	}
	for _, tc := range []struct {
		scraped bool
		want    int
	}{{false, 1}, {true, 0}} {
		o := NewOracle(cfg, map[string]OracleBackend{"b0": full, "b1": free})
		o.ScrapedLoad = tc.scraped
		scores := make([]float64, 2)
		unregister := o.register(router.EndpointChat, &oracleReq{body: body})
		if d := o.Choose(&router.Request{Prompt: p}, cands, scores); d.Index != tc.want {
			t.Errorf("ScrapedLoad %v: chose b%d with scores %v, want b%d", tc.scraped, d.Index, scores, tc.want)
		}
		unregister()
	}
}

// Through a real router and fleet: the oracle arm, and kvmesh+truth on one
// node and on two, send a request to the backend whose engine holds its
// prefix, whatever the claims say (the prefix was put there behind the
// routers' backs). Each node of a truth arm asks its own Oracle.
func TestOracleArmThroughTheRouter(t *testing.T) {
	for _, spec := range []string{PolicyOracle, "kvmesh+truth", "kvmesh+truth:2"} {
		t.Run(spec, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.TimeScale = 2000
			cfg.Fleet = SimFleet(3, fastSimConfig())
			cfg.LagSampleEvery = 0
			arm, err := ParseArm(spec)
			if err != nil {
				t.Fatal(err)
			}
			d, fleet, done := deployArm(t, &cfg, cfg.Fleet, arm)
			defer done()
			if len(d.oracles) != arm.Nodes {
				t.Fatalf("%d oracles for %d nodes", len(d.oracles), arm.Nodes)
			}
			system := words("doc", 600)
			resp, err := http.Post(fleet.URLs()[1]+sim.ChatPath, "application/json", strings.NewReader(string(chatBody(system, "warm", 1))))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()

			c := newHTTPClient(2)
			defer c.CloseIdleConnections()
			for i, front := range d.fronts {
				var s Sample
				body := chatBody(system, fmt.Sprintf("now ask %d", i), 2)
				send(context.Background(), c, front+sim.ChatPath, func(b []byte) []byte { return append(b, body...) }, nil, &s)
				if !s.OK() || s.Backend != "b1" {
					t.Errorf("node %d routed to %q (%v), want b1", i, s.Backend, &s)
				}
			}
			for i, o := range d.oracles {
				if o.Misses() != 0 {
					t.Errorf("node %d: oracle misses %d: bodies are not reaching it", i, o.Misses())
				}
				for name, b := range o.backends {
					if q := b.queued.Load(); q != 0 {
						t.Errorf("node %d: %s still has %d tokens queued after the answer", i, name, q)
					}
				}
			}
		})
	}
}

// simInstances starts n simulated engines named prefix0, prefix1, ...,
// closed at the end of the test.
func simInstances(t *testing.T, prefix string, n int) []*sim.Instance {
	t.Helper()
	var insts []*sim.Instance
	for i := range n {
		c := fastSimConfig()
		c.Name = fmt.Sprint(prefix, i)
		in, err := sim.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		insts = append(insts, in)
	}
	return insts
}

// warmedOracle sends body to insts[warm] at path (its cache then holds the
// prompt) and returns an oracle over insts, a candidate for each, and the
// backends (for another oracle over them).
func warmedOracle(t *testing.T, insts []*sim.Instance, warm int, path string, body []byte) (*Oracle, []router.Candidate, map[string]OracleBackend) {
	t.Helper()
	rec := httptest.NewRecorder()
	insts[warm].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body))))
	if rec.Code != http.StatusOK {
		t.Fatalf("warming: %d %s", rec.Code, rec.Body)
	}
	backends := map[string]OracleBackend{}
	cands := make([]router.Candidate, len(insts))
	for i, in := range insts {
		backends[BackendName(i)] = in
		cands[i] = router.Candidate{Name: BackendName(i), Slot: i, Weight: 1}
	}
	return NewOracle(router.DefaultKVMeshConfig(), backends), cands, backends
}

// "oracle+hold" holds a long prompt while every engine has prefill queued,
// as kvmesh's late binding would, and books nothing for it until it is
// decided; without Hold, without the router's leave or with a queue free,
// it decides at once.
func TestOracleHold(t *testing.T) {
	a := &fakeOracleBackend{prompt: 2000} // between 0.5 and 3 average prompts (1,024 tokens at first)
	b := &fakeOracleBackend{prompt: 2000}
	o := NewOracle(router.DefaultKVMeshConfig(), map[string]OracleBackend{"b0": a, "b1": b})
	o.Hold = true
	cands := []router.Candidate{{Name: "b0", Weight: 1}, {Name: "b1", Weight: 1}}
	scores := make([]float64, 2)
	req, unregister := oracleRequest(t, o, chatBody("s", "u", 1))
	defer unregister()
	req.HoldOK, req.Reuse = true, 0.1 // little reuse: late binding on
	o.backends["b0"].queued.Store(5000)
	o.backends["b1"].queued.Store(6000)
	d := o.Choose(req, cands, scores)
	if !d.Hold || d.Index != 0 {
		t.Fatalf("every engine busy: %+v, want a hold with b0 the best", d)
	}
	if q0, q1 := o.backends["b0"].queued.Load(), o.backends["b1"].queued.Load(); q0 != 5000 || q1 != 6000 {
		t.Fatalf("a hold booked: queued %d and %d", q0, q1)
	}
	// The held prompt counts in the average prompt once, when it came.
	avg := func() float64 { return math.Float64frombits(o.avgPrompt.Load()) }
	if want := 1024 + (2000-1024)/64.0; avg() != want {
		t.Fatalf("average prompt %v after a hold, want %v", avg(), want)
	}
	held := *req
	held.Held = 1
	if o.Choose(&held, cands, scores); avg() != 1024+(2000-1024)/64.0 {
		t.Fatalf("average prompt %v after a held request was decided again, want it unchanged", avg())
	}
	for name, mod := range map[string]func(*router.Request){
		"the router cannot hold":     func(r *router.Request) { r.HoldOK = false },
		"most of each prompt cached": func(r *router.Request) { r.Reuse = 0.6 },
	} {
		r := *req
		mod(&r)
		if d := o.Choose(&r, cands, scores); d.Hold {
			t.Errorf("%s: held", name)
		}
		o.backends["b0"].queued.Store(5000) // the decision booked its 2,000 tokens there
	}
	o.Hold = false
	if d := o.Choose(req, cands, scores); d.Hold {
		t.Error("the plain oracle held")
	}
	o.Hold = true
	o.backends["b0"].queued.Store(0) // b0's queue drained: a held request decided again goes there
	req, unregister2 := oracleRequest(t, o, chatBody("s", "u", 1))
	defer unregister2()
	req.HoldOK, req.Reuse, req.Held = true, 0.1, 1
	if d := o.Choose(req, cands, scores); d.Hold || d.Index != 0 || o.backends["b0"].queued.Load() != 2000 {
		t.Errorf("a queue free: %+v, queued %d; want b0 with the 2,000 tokens booked", d, o.backends["b0"].queued.Load())
	}
}
