package router

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedRig is a router with tracing into an in-memory recorder, whose
// fake backends continue the trace they receive in a span of their own
// ("backend"), as an instrumented engine would.
func tracedRig(t *testing.T, backends ...*fakeBackend) (*testRig, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, b := range backends {
		b.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
			ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			_, span := tp.Tracer("engine").Start(ctx, "backend", trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("engine", b.name)))
			defer span.End()
			if b.health.Load() == 500 { // a failing backend, for the retry test
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`))
		})
	}
	g := newRig(t, func(c *Config, d *Deps) {
		d.TracerProvider = tp
		c.ProbeInterval = 0
	}, backends...)
	return g, rec
}

func spanNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A trace of one request: the client's span, the router's server span
// under it with the decision, the attempt's client span under that, and
// the backend's span under the attempt, all in the client's trace.
func TestTraceJoinsRouterAndBackendSpans(t *testing.T) {
	b1 := newFakeBackend(t, "b1")
	g, rec := tracedRig(t, b1)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	status, route, body := g.call("POST", "/v1/chat/completions", chat("m1", "a system prompt", "hello"),
		"traceparent", "00-"+traceID+"-"+parentID+"-01", "tracestate", "vendor=client")
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	waitFor(t, "the router's span to end", func() bool { return len(spanNamed(rec.Ended(), "POST /v1/chat/completions")) == 1 })
	spans := rec.Ended()
	server := spanNamed(spans, "POST /v1/chat/completions")[0]
	attempts := spanNamed(spans, "kvmesh.attempt")
	backends := spanNamed(spans, "backend")
	if len(attempts) != 1 || len(backends) != 1 {
		t.Fatalf("%d attempt spans and %d backend spans, want 1 and 1", len(attempts), len(backends))
	}
	attempt, backend := attempts[0], backends[0]
	for _, s := range []sdktrace.ReadOnlySpan{server, attempt, backend} {
		if got := s.SpanContext().TraceID().String(); got != traceID {
			t.Errorf("span %s is in trace %s, want the client's %s", s.Name(), got, traceID)
		}
	}
	if got := server.Parent().SpanID().String(); got != parentID || !server.Parent().IsRemote() {
		t.Errorf("the router's span has parent %s, want the client's span %s", got, parentID)
	}
	if attempt.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Error("the attempt's span is not a child of the router's span")
	}
	if backend.Parent().SpanID() != attempt.SpanContext().SpanID() {
		t.Error("the backend's span is not a child of the attempt's span: the traceparent sent is not the attempt's")
	}
	if server.SpanKind() != trace.SpanKindServer || attempt.SpanKind() != trace.SpanKindClient {
		t.Errorf("span kinds %v and %v", server.SpanKind(), attempt.SpanKind())
	}
	// The decision, on both of the router's spans.
	for _, s := range []sdktrace.ReadOnlySpan{server, attempt} {
		if v := attr(s, "kvmesh.backend").AsString(); v != routeField(route, "backend") {
			t.Errorf("%s: kvmesh.backend %q, x-kvmesh-route %q", s.Name(), v, route)
		}
		if v := attr(s, "kvmesh.policy").AsString(); v != PolicyKVMesh {
			t.Errorf("%s: kvmesh.policy %q", s.Name(), v)
		}
		if v := attr(s, "kvmesh.reason").AsString(); v != routeField(route, "reason") {
			t.Errorf("%s: kvmesh.reason %q, route %q", s.Name(), v, route)
		}
		if m, tot := attr(s, "kvmesh.matched_units"), attr(s, "kvmesh.prompt_units"); m.Type() != attribute.INT64 || tot.AsInt64() <= 0 {
			t.Errorf("%s: matched %v of %v units", s.Name(), m.Emit(), tot.Emit())
		}
	}
	if v := attr(server, "gen_ai.request.model").AsString(); v != "m1" {
		t.Errorf("gen_ai.request.model %q", v)
	}
	if v := attr(server, "http.response.status_code").AsInt64(); v != 200 {
		t.Errorf("http.response.status_code %d", v)
	}
	// The backend got the attempt's trace context, not the client's.
	h := b1.requests()[0].Header
	if tp := h.Get("Traceparent"); !strings.Contains(tp, traceID) || strings.Contains(tp, parentID) {
		t.Errorf("the backend got traceparent %q", tp)
	}
	if ts := h.Get("Tracestate"); ts != "vendor=client" {
		t.Errorf("the backend got tracestate %q, want the client's", ts)
	}
}

// A malformed traceparent is ignored: the request is served in a fresh
// trace, whose context the backend receives.
func TestTraceIgnoresMalformedTraceparent(t *testing.T) {
	b1 := newFakeBackend(t, "b1")
	g, rec := tracedRig(t, b1)
	bad := []string{
		"", "garbage", "00-xyz-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // forbidden version
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		strings.Repeat("0", 10000),
	}
	for i, tp := range bad {
		status, _, body := g.call("POST", "/v1/chat/completions", chat("m1", "prompt", "hi"), "traceparent", tp, "tracestate", "a=b")
		if status != 200 {
			t.Fatalf("traceparent %q: %d %s", clip(tp), status, body)
		}
		waitFor(t, "the router's span", func() bool { return len(spanNamed(rec.Ended(), "POST /v1/chat/completions")) == i+1 })
		server := spanNamed(rec.Ended(), "POST /v1/chat/completions")[i]
		if server.Parent().IsValid() {
			t.Errorf("traceparent %q: the span continued %v", clip(tp), server.Parent())
		}
		sent := b1.requests()[i].Header
		if got := sent.Get("Traceparent"); !strings.Contains(got, server.SpanContext().TraceID().String()) {
			t.Errorf("traceparent %q: the backend got %q, not the new trace %s", clip(tp), got, server.SpanContext().TraceID())
		}
		if ts := sent.Get("Tracestate"); ts != "" {
			t.Errorf("traceparent %q: the backend got tracestate %q with a new trace", clip(tp), ts)
		}
	}
}

// A retry is a second attempt span; the failed one is marked an error.
func TestTraceRetryIsASecondAttempt(t *testing.T) {
	b1, b2 := newFakeBackend(t, "b1"), newFakeBackend(t, "b2")
	b1.health.Store(500)
	b2.health.Store(500)
	g, rec := tracedRig(t, b1, b2)
	body := chat("m1", "prompt", "hi")
	status, route, _ := g.call("POST", "/v1/chat/completions", body)
	if status != 500 {
		t.Fatalf("status %d, want the last backend's 500", status)
	}
	_ = route
	waitFor(t, "the router's span", func() bool { return len(spanNamed(rec.Ended(), "POST /v1/chat/completions")) == 1 })
	attempts := spanNamed(rec.Ended(), "kvmesh.attempt")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	for i, a := range attempts {
		if a.Status().Code != codes.Error {
			t.Errorf("attempt %d: status %v, want an error", i, a.Status())
		}
		if n := attr(a, "kvmesh.attempt").AsInt64(); n != int64(i) {
			t.Errorf("attempt span %d says attempt %d", i, n)
		}
	}
	if attr(attempts[0], "kvmesh.backend").AsString() == attr(attempts[1], "kvmesh.backend").AsString() {
		t.Error("both attempts at one backend")
	}
	server := spanNamed(rec.Ended(), "POST /v1/chat/completions")[0]
	if server.Status().Code != codes.Error || attr(server, "kvmesh.reason").AsString() != ReasonRetry.String() {
		t.Errorf("router span: status %v, reason %q", server.Status(), attr(server, "kvmesh.reason").AsString())
	}
}

// Without a TracerProvider, a client's trace context reaches the backend
// untouched.
func TestNoTracingPassesTraceparentThrough(t *testing.T) {
	b1 := newFakeBackend(t, "b1")
	g := newRig(t, nil, b1)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if status, _, body := g.call("POST", "/v1/chat/completions", chat("m1", "p", "hi"), "traceparent", tp); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if got := b1.requests()[0].Header.Get("Traceparent"); got != tp {
		t.Errorf("the backend got traceparent %q, want %q", got, tp)
	}
}

// The request metrics' model label: a model a backend serves by its
// name, anything else as "other".
func TestRequestMetricsByModel(t *testing.T) {
	b1 := newFakeBackend(t, "b1", "m1", "m2")
	g := newRig(t, nil, b1)
	for _, m := range []string{"m1", "m1", "m2", "nope", strings.Repeat("x", 100)} {
		g.call("POST", "/v1/chat/completions", chat(m, "p", "hi"))
	}
	g.call("GET", "/v1/models", "")
	for _, c := range []struct {
		model, code string
		want        float64
	}{{"m1", "2xx", 2}, {"m2", "2xx", 1}, {"other", "4xx", 2}, {"other", "2xx", 1}} {
		if got := g.counter("kvmesh_router_requests_total", "model", c.model, "code", c.code); got != c.want {
			t.Errorf("requests_total{model=%q,code=%q} = %v, want %v", c.model, c.code, got, c.want)
		}
	}
	if got := g.counter("kvmesh_router_time_to_first_byte_seconds", "model", "m1"); got != 2 {
		t.Errorf("time_to_first_byte_seconds{model=m1} counted %v", got)
	}
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "model" && lp.GetValue() != "m1" && lp.GetValue() != "m2" && lp.GetValue() != "other" {
					t.Errorf("%s has model %q", mf.GetName(), lp.GetValue())
				}
			}
		}
	}
}

// When the models served change, a model no longer served loses its
// series and a new one gets its own.
func TestModelLabelsFollowTheModelsServed(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	t1 := &modelTable{ids: []string{"a", "b"}}
	a := m.models.forModel(t1, "a")
	a.requests(epChat, 2).Inc()
	m.models.forModel(t1, "b").requests(epChat, 2).Inc()
	if m.models.forModel(t1, "c") != m.models.other {
		t.Error("an unserved model has its own label")
	}
	t2 := &modelTable{ids: []string{"a", "c"}}
	if m.models.forModel(t2, "a") != a {
		t.Error("a model still served lost its children")
	}
	if m.models.forModel(t2, "b") != m.models.other || m.models.forModel(t2, "c") == m.models.other {
		t.Error("the labels do not follow the models served")
	}
	if n := testCount(m.requests, "b"); n != 0 {
		t.Errorf("model b, no longer served, keeps %d series", n)
	}
	if n := testCount(m.requests, "a"); n != 1 {
		t.Errorf("model a has %d series, want 1", n)
	}
}

func testCount(vec *prometheus.CounterVec, model string) int {
	ch := make(chan prometheus.Metric, 64)
	vec.Collect(ch)
	close(ch)
	n := 0
	for metric := range ch {
		if strings.Contains(metric.Desc().String(), "requests_total") {
			pb := &dto.Metric{}
			_ = metric.Write(pb)
			for _, lp := range pb.GetLabel() {
				if lp.GetName() == "model" && lp.GetValue() == model {
					n++
				}
			}
		}
	}
	return n
}
