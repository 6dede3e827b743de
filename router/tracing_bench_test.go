package router

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkServeHTTPTraced is BenchmarkServeHTTPAllocs's request with
// tracing on (every request sampled, spans handed to an in-memory
// exporter's batcher): what a traced request costs the router. Without a
// TracerProvider the request path is BenchmarkServeHTTPAllocs's own.
func BenchmarkServeHTTPTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tp.Shutdown(context.Background())
	benchServeHTTP(b, func(_ *Config, d *Deps) { d.TracerProvider = tp })
}
