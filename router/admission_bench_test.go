package router

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// benchServeHTTP runs BenchmarkServeHTTPAllocs's request (one chat request
// through ServeHTTP over a canned transport) under cfg's admission and
// tracing settings, as changed by mod.
func benchServeHTTP(b *testing.B, mod func(*Config, *Deps)) {
	answer := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":4000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":3000}}}`)
	tr := &cannedTransport{body: answer, header: http.Header{
		"Content-Type":          {"application/json"},
		"Endpoint-Load-Metrics": {"TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=0.0"},
	}}
	cfg := DefaultConfig()
	for i := 0; i < 4; i++ {
		cfg.Backends = append(cfg.Backends, BackendConfig{Name: fmt.Sprint("gpu-", i), URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+i), Models: []string{"m1"}})
	}
	tc := tree.DefaultConfig()
	tc.Capacity = 1 << 16
	ix, err := tree.New(tc)
	if err != nil {
		b.Fatal(err)
	}
	deps := Deps{Index: ix, Transport: tr}
	if mod != nil {
		mod(&cfg, &deps)
	}
	rt, err := New(cfg, deps)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	body := chat("m1", longText("a system prompt shared by every request of the benchmark", 4000), "what is the answer?")
	req, err := http.NewRequest("POST", "http://router/v1/chat/completions", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header = http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer x"},
		"User-Agent": {"bench"}, "Accept": {"*/*"}, "X-Tenant-Id": {"tenant-1"}}
	rd := strings.NewReader(body)
	w := &discardWriter{h: make(http.Header)}
	serve := func() {
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		req.ContentLength = int64(len(body))
		clear(w.h)
		rt.ServeHTTP(w, req)
		if w.status != 200 {
			b.Fatalf("status %d", w.status)
		}
	}
	serve()
	b.ReportAllocs()
	for b.Loop() {
		serve()
	}
}

// BenchmarkAdmissionServeHTTP is the whole request path without caps (the
// default) and with both caps set but never reached: the difference is
// admission's cost on the hot path.
func BenchmarkAdmissionServeHTTP(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchServeHTTP(b, nil) })
	b.Run("caps", func(b *testing.B) {
		benchServeHTTP(b, func(c *Config, _ *Deps) {
			c.Admission.MaxInFlight = 1024
			c.Admission.MaxInFlightPerBackend = 256
		})
	})
}

// BenchmarkAdmissionNodeSlot is taking and giving back a node slot from
// every core at once, with room (the common case under a cap).
func BenchmarkAdmissionNodeSlot(b *testing.B) {
	cfg := DefaultAdmissionConfig()
	cfg.MaxInFlight = 1 << 20
	a, err := newAdmission(cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if a.nodeWaiting.Load() != 0 || !a.node.tryTake(a.nodeCap) {
				b.Fatal("no room")
			}
			a.leaveNode()
		}
	})
}
