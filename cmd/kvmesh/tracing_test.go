package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpCollector is an OTLP/HTTP traces receiver on loopback.
type otlpCollector struct {
	srv   *httptest.Server
	mu    sync.Mutex
	paths []string
	spans []*tracepb.Span
	attrs map[string]string // the resource's string attributes
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	c := &otlpCollector{attrs: map[string]string{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.paths = append(c.paths, r.URL.Path)
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				c.attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				c.spans = append(c.spans, ss.GetSpans()...)
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// With --otlp-endpoint, a request's spans reach the collector when the
// node stops (the last batch is flushed), in the client's trace, and the
// backend receives the attempt's span as its parent.
func TestServeExportsTraces(t *testing.T) {
	col := newOTLPCollector(t)
	var mu sync.Mutex
	var got string
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		case "/v1/chat/completions":
			mu.Lock()
			got = r.Header.Get("Traceparent")
			mu.Unlock()
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`)
		default:
			w.WriteHeader(200)
		}
	}))
	t.Cleanup(be.Close)
	s, cancel, done := startServe(t, "--backends", "b1="+be.URL, "--otlp-endpoint", col.srv.URL)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("POST", "http://"+s.API+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.paths) == 0 || col.paths[0] != "/v1/traces" {
		t.Fatalf("the collector got exports at %v, want /v1/traces", col.paths)
	}
	if col.attrs["service.name"] != "kvmesh" || col.attrs["service.instance.id"] != "t1" {
		t.Errorf("resource %v", col.attrs)
	}
	var server, attempt *tracepb.Span
	for _, sp := range col.spans {
		switch sp.GetName() {
		case "POST /v1/chat/completions":
			server = sp
		case "kvmesh.attempt":
			attempt = sp
		}
	}
	if server == nil || attempt == nil {
		t.Fatalf("spans %v", col.spans)
	}
	if hex.EncodeToString(server.GetTraceId()) != traceID || hex.EncodeToString(attempt.GetTraceId()) != traceID {
		t.Error("the spans are not in the client's trace")
	}
	if string(attempt.GetParentSpanId()) != string(server.GetSpanId()) {
		t.Error("the attempt is not a child of the request's span")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "00-" + traceID + "-" + hex.EncodeToString(attempt.GetSpanId()) + "-01"; got != want {
		t.Errorf("the backend got traceparent %q, want %q", got, want)
	}
}

func TestTracingConfigValidation(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--otlp-endpoint", "collector:4318"}, "tracing.otlp_endpoint"},
		{[]string{"--otlp-endpoint", "http://"}, "has no host"},
		{[]string{"--trace-sample-ratio", "1.5"}, "tracing.sample_ratio"},
		{[]string{"--trace-sample-ratio", "NaN"}, "tracing.sample_ratio"},
	} {
		_, err := loadServeConfig(append([]string{"--backends", "http://127.0.0.1:1"}, c.args...), env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
	cfg, err := loadServeConfig([]string{"--backends", "http://127.0.0.1:1", "--otlp-endpoint", "https://c.example:4318/custom"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.Tracing.tracesURL(); u != "https://c.example:4318/custom" {
		t.Errorf("traces URL %q keeps no path of its own", u)
	}
}
