package router

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// benchRouter is a router over n backends (never contacted) whose index
// holds claims of many other prompts plus the benchmark prompt's system
// prompt on one backend.
func benchRouter(b *testing.B, n int, body []byte) *Router {
	return benchRouterWith(b, n, body, nil)
}

// benchRouterWith is benchRouter with the configuration adjusted by mod.
func benchRouterWith(b *testing.B, n int, body []byte, mod func(*Config)) *Router {
	b.Helper()
	cfg := DefaultConfig()
	for i := 0; i < n; i++ {
		cfg.Backends = append(cfg.Backends, BackendConfig{Name: fmt.Sprintf("gpu-%d", i), URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+i), Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}})
	}
	if mod != nil {
		mod(&cfg)
	}
	ix, err := tree.New(tree.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	rt, err := New(cfg, Deps{Index: ix})
	if err != nil {
		b.Fatal(err)
	}
	// Populate: 20,000 other prompts' claims spread over the backends.
	var ch tree.Chain
	for i := 0; i < 20000; i++ {
		text := []byte(longText(fmt.Sprint("other prompt ", i), 2048))
		ix.Keyer().Bytes(&ch, tree.NewSeed("meta-llama/Llama-3.1-8B-Instruct", "", ""), text, []int{len(text) / 2, len(text)})
		rt.learner.Learn(&ch, rt.backends()[i%n].id, time.Hour)
	}
	// The benchmark prompt's first half is held by backend 1.
	st := rt.getState()
	if aerr := rt.prepare(st, EndpointChat, body, "tenant-1"); aerr != nil {
		b.Fatal(aerr)
	}
	var half tree.Chain
	ix.Keyer().Bytes(&half, st.seed, st.prompt.Units[:len(st.prompt.Units)/2], nil)
	rt.learner.Learn(&half, rt.backends()[1].id, time.Hour)
	rt.putState(st)
	return rt
}

// BenchmarkRouteDecision16K is the whole routing decision for a 16 KiB chat
// body: JSON parsing, canonical rendering, block hashing, the index lookup
// and the kvmesh policy over 8 backends; with the claim belief (each
// backend's cache model: refresh, two lookups when it bounds claims) and
// without; and with the belief doubting the prompt's holder (more than its
// capacity written there since its claims: the second lookup and a doubt
// route), also priced on a taught span curve (belief.doubt_span_curve).
func BenchmarkRouteDecision16K(b *testing.B) {
	for _, belief := range []string{"true", "false", "doubted", "span_curve", "depth_edge"} {
		b.Run("belief="+belief, func(b *testing.B) {
			d := benchRouteDecision(b, func(c *Config) {
				c.Belief.Enabled = belief != "false"
				c.Belief.DepthEdge = belief == "depth_edge"
				c.Belief.DoubtSpanCurve = belief == "span_curve"
				c.Backends[1].KVCapacityTokens = 1 << 20 // a bound exists: the belief's full path
			}, func(rt *Router) {
				if belief == "depth_edge" {
					cutHoldersClaim(b, rt)
					return
				}
				if belief != "doubted" && belief != "span_curve" {
					return
				}
				for d := range doubtRanges { // every cell taught: the curve prices
					for _, tokens := range []float64{1000, 5000, 20000, 50000} {
						rt.spans.learn(d, tokens, 0.5)
					}
				}
				// A sample after the claims, then more than the capacity
				// written: the next refresh puts every claim on gpu-1 past
				// the edge.
				b1 := rt.backends()[1]
				time.Sleep(2 * time.Millisecond)
				b1.belief.refresh(rt.now().UnixMilli(), rt.meshWritten(b1), 0, rt.unitsPerToken(), rt.cfg.Belief.DoubtBeyond, rt.cfg.Belief.DoubtNear)
				time.Sleep(2 * time.Millisecond)
				b1.written.Add(1 << 30)
			})
			want := ReasonPrefix
			if belief == "doubted" || belief == "span_curve" {
				want = ReasonDoubt
			}
			if d.Reason != want {
				b.Fatalf("decision %+v: want reason %s (the benchmark prompt matches its claims on gpu-1)", d, want)
			}
		})
	}
}

// cutHoldersClaim writes to gpu-1 until its claim on the benchmark prompt
// (half of it, stamped at once) passes the edge by its own units while
// what was written after it does not: every decision cuts the claim
// (cutAtEdge) and searches its shallower learn depths for a fresher claim,
// finding none, the search's longest path.
func cutHoldersClaim(b *testing.B, rt *Router) {
	b1 := rt.backends()[1]
	cfg := &rt.cfg.Belief
	time.Sleep(2 * time.Millisecond)
	b1.belief.refresh(rt.now().UnixMilli(), rt.meshWritten(b1), 0, rt.unitsPerToken(), cfg.DoubtBeyond, cfg.DoubtNear)
	kappa := math.Float64frombits(b1.belief.kappa.Load())
	time.Sleep(2 * time.Millisecond)
	b1.written.Add(int64(kappa) - 4000) // the claim holds ~8,000 units
	st := rt.getState()
	defer rt.putState(st)
	now := rt.now()
	if aerr := rt.prepare(st, EndpointChat, chatBody(16<<10), "tenant-1"); aerr != nil {
		b.Fatal(aerr)
	}
	rt.lookup(st, now)
	rt.gather(st, st.model, now)
	for _, c := range st.cands {
		if c.ID == b1.id && (c.Matched == 0 || c.Near <= c.Matched) {
			b.Fatalf("set-up: gpu-1's claim is not cut: matched %d blocks, near %d", c.Matched, c.Near)
		}
	}
}

func benchRouteDecision(b *testing.B, mod func(*Config), after func(*Router)) Decision {
	body := chatBody(16 << 10)
	rt := benchRouterWith(b, 8, body, mod)
	after(rt)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var d Decision
	for b.Loop() {
		st := rt.getState()
		now := rt.now()
		if aerr := rt.prepare(st, EndpointChat, body, "tenant-1"); aerr != nil {
			b.Fatal(aerr)
		}
		rt.lookup(st, now)
		rt.gather(st, st.model, now)
		d = rt.decide(st, EndpointChat, now, 0, false)
		rt.putState(st)
	}
	return d
}

// BenchmarkProxyOverhead measures the latency the router adds: requests at
// a paced 1,000 per second go to a fake backend directly and through the
// router, interleaved, and the difference of the latency percentiles is
// reported (p50-added-us, p99-added-us) besides each path's own.
func BenchmarkProxyOverhead(b *testing.B) {
	answer := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":4000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":3000}}}`)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer backend.Close()
	cfg := DefaultConfig()
	cfg.Backends = []BackendConfig{{Name: "gpu-0", URL: backend.URL, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}}}
	tc := tree.DefaultConfig()
	tc.Capacity = 1 << 16
	ix, _ := tree.New(tc)
	rt, err := New(cfg, Deps{Index: ix})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	front := httptest.NewServer(rt)
	defer front.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	body := chatBody(16 << 10)
	send := func(url string) time.Duration {
		t0 := time.Now()
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	send(backend.URL)
	send(front.URL)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	// paced runs fn for each iteration at 1,000 iterations per second.
	paced := func(b *testing.B, fn func(i int)) {
		b.ReportAllocs()
		start := time.Now()
		for i := 0; b.Loop(); i++ {
			if wait := time.Until(start.Add(time.Duration(i) * time.Millisecond)); wait > 0 {
				time.Sleep(wait)
			}
			fn(i)
		}
	}
	report := func(b *testing.B, lat []time.Duration) {
		if len(lat) > 0 {
			b.ReportMetric(us(percentile(lat, 0.50)), "p50-us")
			b.ReportMetric(us(percentile(lat, 0.99)), "p99-us")
		}
	}
	b.Run("direct", func(b *testing.B) {
		var lat []time.Duration
		paced(b, func(int) { lat = append(lat, send(backend.URL)) })
		report(b, lat)
	})
	b.Run("via-router", func(b *testing.B) {
		var lat []time.Duration
		paced(b, func(int) { lat = append(lat, send(front.URL)) })
		report(b, lat)
	})
	// added alternates the two paths request by request, so both see the
	// same machine noise, and reports the difference of the percentiles.
	b.Run("added", func(b *testing.B) {
		var direct, routed []time.Duration
		paced(b, func(i int) {
			if i%2 == 0 {
				direct = append(direct, send(backend.URL))
			} else {
				routed = append(routed, send(front.URL))
			}
		})
		if len(direct) > 1 && len(routed) > 1 {
			b.ReportMetric(us(percentile(routed, 0.50)-percentile(direct, 0.50)), "p50-added-us")
			b.ReportMetric(us(percentile(routed, 0.99)-percentile(direct, 0.99)), "p99-added-us")
		}
	})
}

func percentile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// BenchmarkKVMeshChoose is the policy alone over 16 candidates.
func BenchmarkKVMeshChoose(b *testing.B) {
	names := make([]string, 16)
	for i := range names {
		names[i] = fmt.Sprint("gpu-", i)
	}
	pc := newPolicyCase(256, 3, names...).match(0, 100, 256, 0, 3, 3, 0, 256, 0, 0, 12, 0, 0, 0, 1, 0).inflight(1, 4, 2, 3, 0, 0, 1, 2, 5, 1, 1, 1, 0, 0, 2, 3)
	pc.req.Reuse = 0.8 // the spread term on (4 reads per unit written, beyond spread_min_reuse)
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	b.ReportAllocs()
	for b.Loop() {
		pc.choose(p)
	}
}
