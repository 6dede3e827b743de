package router

import "github.com/prometheus/client_golang/prometheus"

// How a precise request got its keys (kvmesh_router_precise_keys_total).
const (
	srcTokenized = iota // the engine tokenized it now
	srcCached           // the same prompt was tokenized before
	srcPrefix           // the conversation's previous turn was (the rest is refreshed in the background)
	srcIDs              // the prompt came as token ids
	numKeySources
)

var keySourceNames = [numKeySources]string{"tokenized", "cached", "prefix", "ids"}

// Why a request of a precise model was keyed by bytes
// (kvmesh_router_precise_fallbacks_total).
const (
	fbTimeout     = iota // the engine did not answer within TokenizeTimeout
	fbError              // it answered with an error or garbage, or no tokenizer was up
	fbBusy               // MaxTokenizeInFlight tokenizations were running
	fbUnsupported        // an endpoint or prompt shape /tokenize does not take (responses, embeddings, prompt batches)
	fbTenant             // a tenant without cache_salt: precise keys would be shared with other tenants, as the engine's cache is
	numFallbacks
)

var fallbackNames = [numFallbacks]string{"timeout", "error", "busy", "unsupported", "tenant"}

// preciseMetrics are registered with every router (zero without precise
// mode), so dashboards and the README's list do not depend on the mode.
type preciseMetrics struct {
	keys      [numKeySources]prometheus.Counter
	fallbacks [numFallbacks]prometheus.Counter
	duration  prometheus.Histogram
}

func newPreciseMetrics(reg prometheus.Registerer, cacheTokens func() float64) (*preciseMetrics, error) {
	keys := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvmesh_router_precise_keys_total",
		Help: "Requests keyed by the engine's tokens (precise mode), by where the tokens came from: tokenized (the engine's /tokenize, waited for), cached (the same prompt before), prefix (the conversation's previous turn), ids (the prompt was token ids)."},
		[]string{"source"})
	fbs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvmesh_router_precise_fallbacks_total",
		Help: "Requests of precise-mode models keyed by bytes instead (they match approximate claims only), by reason: timeout, error, busy, unsupported, tenant."},
		[]string{"reason"})
	m := &preciseMetrics{duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvmesh_router_tokenize_duration_seconds",
		Help:    "Remote tokenizations (POST /tokenize), waited for or in the background, from request to parsed answer.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1}})}
	for i, n := range keySourceNames {
		m.keys[i] = keys.WithLabelValues(n)
	}
	for i, n := range fallbackNames {
		m.fallbacks[i] = fbs.WithLabelValues(n)
	}
	cache := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvmesh_router_tokenize_cache_tokens",
		Help: "Tokens held by the cache of recent prompts' engine tokens (precise mode)."}, cacheTokens)
	if err := registerAll(reg, keys, fbs, m.duration, cache); err != nil {
		return nil, err
	}
	return m, nil
}

// registerAll registers cs with reg (nil: none).
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
