package router

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry tracing. With Deps.TracerProvider set, every request gets
// a server span (continuing the client's W3C traceparent when it sent a
// valid one, else starting a trace), carrying the routing decision, and
// every attempt at a backend a client span under it, whose traceparent
// the backend receives, so the backend's own spans join the trace. Without
// it the router adds nothing to the request path (a client's traceparent
// still reaches the backend unchanged, as every end-to-end header does).

// tracerName is the instrumentation scope of the router's spans.
const tracerName = "github.com/kvmesh/kvmesh/router"

// Span attribute keys: OpenTelemetry's semantic conventions where one
// fits, kvmesh.* for the decision.
const (
	attrMethod     = attribute.Key("http.request.method")
	attrPath       = attribute.Key("url.path")
	attrStatus     = attribute.Key("http.response.status_code")
	attrServerAddr = attribute.Key("server.address")
	attrModel      = attribute.Key("gen_ai.request.model")
	attrPolicy     = attribute.Key("kvmesh.policy")
	attrBackend    = attribute.Key("kvmesh.backend")
	attrReason     = attribute.Key("kvmesh.reason")
	attrMatched    = attribute.Key("kvmesh.matched_units")
	attrTotal      = attribute.Key("kvmesh.prompt_units")
	attrAttempt    = attribute.Key("kvmesh.attempt")
	attrStage      = attribute.Key("kvmesh.admission.stage")
	attrOutcome    = attribute.Key("kvmesh.admission.outcome")
	attrWaited     = attribute.Key("kvmesh.admission.wait_seconds")
)

// otelTracing is the router's tracer and the W3C trace context
// propagator (traceparent, tracestate).
type otelTracing struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
}

// newOTel returns the tracing for tp, or nil (tracing off) when tp is nil.
func newOTel(tp trace.TracerProvider) *otelTracing {
	if tp == nil {
		return nil
	}
	return &otelTracing{tracer: tp.Tracer(tracerName)}
}

// startRequestSpan starts r's server span, a child of the client's trace
// context when r carries a valid one (a malformed traceparent is ignored:
// the span starts a new trace), and returns r with the span in its
// context.
func (rt *Router) startRequestSpan(r *http.Request) *http.Request {
	o := rt.otel
	ctx := o.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, _ = o.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrMethod.String(r.Method), attrPath.String(clip(r.URL.Path))))
	return r.WithContext(ctx)
}

// endRequestSpan ends r's server span: named after the route for the
// paths the router answers itself (the method alone for forwarded and
// unknown paths, whose names clients choose), with the status sent.
func (rt *Router) endRequestSpan(r *http.Request, label endpointLabel, status int) {
	span := trace.SpanFromContext(r.Context())
	switch {
	case label == epModels && r.URL.Path != "/v1/models":
		span.SetName(r.Method + " /v1/models/{id}")
	case label != epOther:
		span.SetName(r.Method + " " + r.URL.Path)
	}
	switch {
	case status == statusAborted:
		span.SetAttributes(attrStatus.Int(http.StatusOK))
		span.SetStatus(codes.Error, "the backend's answer broke off after its first byte")
	case status >= 500:
		span.SetAttributes(attrStatus.Int(status))
		span.SetStatus(codes.Error, http.StatusText(status))
	default:
		span.SetAttributes(attrStatus.Int(status))
	}
	span.End()
}

// tracedAttempt is attempt inside a client span, a child of the request's
// span, whose trace context the backend receives as its traceparent; the
// decision is recorded on both spans (the request's keeps the last
// attempt's).
func (rt *Router) tracedAttempt(w http.ResponseWriter, r *http.Request, st *reqState, b *backend, d Decision, matched int, last bool, start time.Time, ep Endpoint, attempt int) attemptResult {
	o := rt.otel
	total := 0
	if st.routed {
		total = st.chain.Units
	}
	decision := []attribute.KeyValue{attrPolicy.String(rt.policy.Name()), attrBackend.String(b.name),
		attrReason.String(d.Reason.String()), attrMatched.Int(matched), attrTotal.Int(total), attrAttempt.Int(attempt)}
	parent := trace.SpanFromContext(r.Context())
	parent.SetAttributes(decision...)
	if st.model != "" {
		parent.SetAttributes(attrModel.String(clip(st.model)))
	}
	ctx, span := o.tracer.Start(r.Context(), "kvmesh.attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(decision...), trace.WithAttributes(attrMethod.String(r.Method), attrServerAddr.String(b.url.Host)))
	defer span.End()
	h := st.outHeader
	delete(h, "Tracestate") // the client's, if any, belongs to its traceparent, which is replaced
	o.prop.Inject(ctx, propagation.HeaderCarrier(h))
	res := rt.attempt(w, r, st, b, d, matched, last, start, ep)
	switch res.out {
	case outDone:
		span.SetAttributes(attrStatus.Int(res.status))
		if res.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(res.status))
		}
	case outRetry:
		span.SetStatus(codes.Error, res.err.Error())
	case outTimeout:
		span.SetAttributes(attrStatus.Int(http.StatusGatewayTimeout))
		span.SetStatus(codes.Error, errHeaderTimeout.Error())
	case outClientGone:
		span.SetStatus(codes.Error, "the client went away")
	case outBroken:
		span.SetStatus(codes.Error, "the backend's answer broke off after its first byte")
	}
	return res
}

// traceAdmission records a wait in the admission queue on r's span.
func (rt *Router) traceAdmission(r *http.Request, stage admStage, outcome string, waited time.Duration) {
	trace.SpanFromContext(r.Context()).AddEvent("admission.wait", trace.WithAttributes(
		attrStage.String(admStageNames[stage]), attrOutcome.String(outcome), attrWaited.Float64(waited.Seconds())))
}
