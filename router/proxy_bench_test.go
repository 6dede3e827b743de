package router

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// cannedTransport answers every request with the same small completion,
// without a network: it isolates the router's own cost per request.
type cannedTransport struct {
	body   []byte
	header http.Header
}

func (c *cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	h := make(http.Header, len(c.header))
	for k, v := range c.header {
		h[k] = v
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, ContentLength: int64(len(c.body)),
		Body: io.NopCloser(bytes.NewReader(c.body)), Request: r}, nil
}

// discardWriter is a ResponseWriter that keeps nothing but reuses its
// header map, so a benchmark counts the router's allocations rather than
// the recorder's.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkServeHTTPAllocs is one chat request through ServeHTTP with a
// canned transport: reading, rendering, keying, lookup, choice, the
// outgoing request, the response headers and the body copy.
func BenchmarkServeHTTPAllocs(b *testing.B) {
	answer := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":4000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":3000}}}`)
	tr := &cannedTransport{body: answer, header: http.Header{
		"Content-Type":          {"application/json"},
		"Date":                  {"Mon, 02 Jan 2006 15:04:05 GMT"},
		"Server":                {"uvicorn"},
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
	rt, err := New(cfg, Deps{Index: ix, Transport: tr})
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
		"User-Agent": {"bench"}, "Accept": {"*/*"}}
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
	serve() // learn the prompt: later requests match it
	b.ReportAllocs()
	for b.Loop() {
		serve()
	}
}
