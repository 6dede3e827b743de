package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracingConfig is OpenTelemetry tracing: a span per request with the
// routing decision and one per attempt at a backend, exported over OTLP
// (HTTP/protobuf). Off unless OTLPEndpoint is set.
type TracingConfig struct {
	// OTLPEndpoint is the collector's OTLP/HTTP endpoint, e.g.
	// http://otel-collector:4318 (traces go to its /v1/traces unless the
	// URL has a path of its own; https verifies the collector's
	// certificate). Empty, the default: no tracing, and the request path
	// pays nothing for it. The exporter honours OTEL_EXPORTER_OTLP_HEADERS
	// and the other OTEL_EXPORTER_OTLP_* variables for what is not set here.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of new traces recorded; a request that comes
	// with a traceparent follows its sampled flag. 1, every request: an LLM
	// request takes seconds of a GPU, so a few spans per request cost the
	// router little; lower it past a few thousand requests per second per
	// node.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the resource's service.name ("kvmesh"); the node
	// name is its service.instance.id.
	ServiceName string `yaml:"service_name"`
}

func defaultTracing() TracingConfig {
	return TracingConfig{SampleRatio: 1, ServiceName: "kvmesh"}
}

func (t *TracingConfig) validate() error {
	var errs []error
	if t.OTLPEndpoint != "" {
		u, err := url.Parse(t.OTLPEndpoint)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("tracing.otlp_endpoint %q: %v", t.OTLPEndpoint, err))
		case u.Scheme != "http" && u.Scheme != "https":
			errs = append(errs, fmt.Errorf("tracing.otlp_endpoint %q: want an http:// or https:// URL, e.g. http://otel-collector:4318", t.OTLPEndpoint))
		case u.Host == "":
			errs = append(errs, fmt.Errorf("tracing.otlp_endpoint %q has no host", t.OTLPEndpoint))
		}
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio must be in [0, 1], got %v", t.SampleRatio))
	}
	if t.ServiceName == "" {
		errs = append(errs, errors.New("tracing.service_name must not be empty"))
	}
	return errors.Join(errs...)
}

// tracesURL is the endpoint with the OTLP traces path when it names none.
func (t *TracingConfig) tracesURL() string {
	u, _ := url.Parse(t.OTLPEndpoint)
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String()
}

// startTracing builds the tracer provider the router gets (nil when
// tracing is off) and the function that flushes and stops it. Export
// failures are logged as warnings, at most one a minute.
func startTracing(cfg *ServeConfig, log zerolog.Logger) (trace.TracerProvider, func(), error) {
	t := &cfg.Tracing
	if t.OTLPEndpoint == "" {
		return nil, func() {}, nil
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(t.tracesURL()))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", t.ServiceName),
		attribute.String("service.instance.id", cfg.Node.Name),
		attribute.String("service.version", version)))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SampleRatio))))
	var lastWarn atomic.Int64
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		now, last := time.Now().UnixNano(), lastWarn.Load()
		if last != 0 && now-last < int64(time.Minute) || !lastWarn.CompareAndSwap(last, now) {
			return
		}
		log.Warn().Err(err).Str("otlp_endpoint", t.OTLPEndpoint).Msg("tracing: exporting spans failed (logged at most once a minute)")
	}))
	log.Info().Str("otlp_endpoint", t.tracesURL()).Float64("sample_ratio", t.SampleRatio).Msg("tracing on")
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("tracing: flushing the last spans")
		}
	}
	return tp, stop, nil
}
