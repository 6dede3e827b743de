package router

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// endpointLabel indexes the per-endpoint metric children.
type endpointLabel uint8

const (
	epChat endpointLabel = iota
	epCompletions
	epResponses
	epEmbeddings
	epModels
	epOther
	numEndpointLabels
)

var endpointLabelNames = [numEndpointLabels]string{"chat", "completions", "responses", "embeddings", "models", "other"}

func labelOf(ep Endpoint) endpointLabel {
	switch ep {
	case EndpointChat:
		return epChat
	case EndpointCompletions:
		return epCompletions
	case EndpointResponses:
		return epResponses
	case EndpointEmbeddings:
		return epEmbeddings
	}
	return epOther
}

// errKind names a class of error for kvmesh_router_errors_total.
type errKind uint8

const (
	errBadRequest     errKind = iota // malformed body, wrong field types
	errTooLarge                      // body over MaxBodyBytes
	errModelNotFound                 // no backend serves the model
	errPathNotFound                  // path neither routed nor forwarded
	errNoBackend                     // no healthy backend for the model
	errBackendConnect                // connection to a backend failed
	errBackendTimeout                // no response headers in time
	errBackend5xx                    // a backend answered 5xx
	errClientCanceled                // the client went away before the answer was complete
	errStreamBroken                  // the backend's body failed after the first byte was sent
	errSignalParse                   // an ORCA header or a metrics page did not parse
	errProbe                         // a health probe failed
	errDiscovery                     // GET /v1/models on a backend failed
	errScrape                        // GET /metrics on a backend failed
	errTokenize                      // the tokenizer rejected a prompt (keyed by bytes instead)
	errLimit                         // a configured limit refused the request (model or salt length, messages, JSON values)
	errKindSlowBody                  // the body arrived slower than the minimum rate (408)
	errForbiddenPath                 // a path under Config.ForwardDeny (403)
	numErrKinds
)

var errKindNames = [numErrKinds]string{"bad_request", "too_large", "model_not_found", "path_not_found",
	"no_backend", "backend_connect", "backend_timeout", "backend_5xx", "client_canceled", "stream_broken",
	"signal_parse", "probe", "discovery", "scrape", "tokenize", "limit", "slow_body", "path_denied"}

// metrics holds the router's Prometheus metrics with their label children
// resolved up front, so the request path never looks a label up.
type metrics struct {
	decisions       *prometheus.CounterVec
	decisionByWhy   [numReasons]prometheus.Counter // for the configured policy
	matchedRatio    prometheus.Histogram
	requests        *prometheus.CounterVec   // by endpoint, code and model: children per model in models
	duration        *prometheus.HistogramVec // by endpoint and model
	ttfb            *prometheus.HistogramVec // by endpoint and model
	models          modelLabels              // the models served and their children (metrics_model.go)
	decisionTime    prometheus.Histogram
	learned         [3]prometheus.Counter  // provisional, confirmed, first_byte
	retracted       prometheus.Counter     // provisional claims ended after a failed attempt
	lessons         [2]prometheus.Counter  // answer, peer
	lostPrefixes    *prometheus.CounterVec // by origin: own, peer
	cachedTokens    *prometheus.CounterVec
	promptTokens    *prometheus.CounterVec
	prefixRoutes    *prometheus.CounterVec // by backend, outcome
	retries         prometheus.Counter
	ejections       *prometheus.CounterVec
	ejectionsCapped prometheus.Counter
	invalidations   *prometheus.CounterVec
	errors          [numErrKinds]prometheus.Counter
	backendsGauges  *backendCollector
	// tenantShareExceeded counts requests that learned no new claims
	// because their tenant had used its share of the index.
	tenantShareExceeded prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, policy string, rt *Router) (*metrics, error) {
	const ns, sub = "kvmesh", "router"
	m := &metrics{}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "decisions_total", Help: "Routing decisions by policy and reason."}, []string{"policy", "reason"})
	for r := Reason(1); r < numReasons; r++ {
		m.decisionByWhy[r] = m.decisions.WithLabelValues(policy, r.String())
	}
	m.matchedRatio = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
		Name: "matched_prefix_ratio", Help: "Share of the prompt matched by the chosen backend's claims (0 = miss, 1 = whole prompt).",
		Buckets: []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1}})
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "requests_total", Help: "Requests by endpoint, status class (2xx, 4xx, ...) and model (one a backend serves, else \"other\")."}, []string{"endpoint", "code", "model"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
		Name: "request_duration_seconds", Help: "Time from request arrival to the last byte of the answer, by endpoint and model.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"endpoint", "model"})
	ttfb := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
		Name: "time_to_first_byte_seconds", Help: "Time from request arrival to the first body byte sent to the client (the first token of a stream), by endpoint and model.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"endpoint", "model"})
	m.requests, m.duration, m.ttfb = requests, duration, ttfb
	m.models.init(m)
	m.decisionTime = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
		Name: "decision_duration_seconds", Help: "Time to parse, render, hash, look up and choose a backend for one request.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, 16)})
	learned := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "claims_learned_total", Help: "Prompts whose claims were learned: provisionally at dispatch, confirmed at a 2xx answer's first byte (first_byte), and again when it completed (confirmed)."}, []string{"kind"})
	m.learned[0] = learned.WithLabelValues("provisional")
	m.learned[1] = learned.WithLabelValues("confirmed")
	m.learned[2] = learned.WithLabelValues("first_byte")
	m.retracted = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "claims_retracted_total", Help: "Attempts whose provisional claims were ended because the backend failed before a 2xx answer (a connection failure, a 5xx retried elsewhere, an error answer): it never computed the prompt."})
	lessons := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "belief_lessons_total", Help: "Lessons about a backend's cache (its capacity estimate, the worth of a doubted claim): learned from this node's answers (answer), or adopted from a peer's newer lesson over the mesh's load channel (peer)."}, []string{"source"})
	m.lessons[0] = lessons.WithLabelValues("answer")
	m.lessons[1] = lessons.WithLabelValues("peer")
	m.lostPrefixes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "belief_lost_prefixes_total", Help: "Prompts marked lost at a backend for belief.lost_ttl (its conversation's next request doubts the backend's match), by origin: own (this node's answer showed a believed match lost: under belief.confirm_share of it cached), peer (a mesh peer's mark, received on the load channel)."}, []string{"origin"})
	m.lostPrefixes.WithLabelValues("own")
	m.lostPrefixes.WithLabelValues("peer")
	m.cachedTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "backend_cached_tokens_total", Help: "Prompt tokens the backend reported as served from its prefix cache (usage.prompt_tokens_details.cached_tokens)."}, []string{"backend"})
	m.promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "backend_prompt_tokens_total", Help: "Prompt tokens the backend reported (usage.prompt_tokens) on answers that also reported cached tokens."}, []string{"backend"})
	m.prefixRoutes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "backend_prefix_routes_total",
		Help: "Requests routed to the backend for a prefix it was believed to hold (reason prefix), by what its answer's cached_tokens said: confirmed (at least belief.confirm_share of the matched tokens were cached) or refuted. confirmed / (confirmed + refuted) is the routing precision. Routes made on a claim past the edge of the backend's cache (reason doubt) count as doubt-confirmed or doubt-refuted."},
		[]string{"backend", "outcome"})
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "retries_total", Help: "Requests re-sent to another backend before any byte reached the client."})
	m.ejections = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "backend_ejections_total", Help: "Times a backend was taken out of rotation after consecutive failures."}, []string{"backend"})
	m.ejectionsCapped = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "ejections_capped_total", Help: "Runs of a backend's failed answers that reached eject_after_failures while max_ejected_share of the backends were ejected already, so it stayed in rotation (counted once per run; one that refuses connections or fails its probe is ejected past the cap)."})
	m.invalidations = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "backend_invalidations_total", Help: "Times a backend's claims were invalidated because it came back cold."}, []string{"backend"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "errors_total", Help: "Errors by kind."}, []string{"kind"})
	for k := errKind(0); k < numErrKinds; k++ {
		m.errors[k] = errs.WithLabelValues(errKindNames[k])
	}
	m.tenantShareExceeded = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "tenant_share_exceeded_total", Help: "Requests routed without learning new claims because their tenant had filled its share of the index (tenant_index_share)."})
	m.backendsGauges = &backendCollector{rt: rt}
	if reg == nil {
		return m, nil
	}
	reuse := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "prompt_cached_ratio",
		Help: "Share of prompt tokens the backends answered they had cached, a moving average over this node's last ~128 answers (-1 before any): the r of the kvmesh policy's spread term."},
		func() float64 { return rt.reuse.share() })
	routable := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "backends_routable",
		Help: "Backends in rotation on this node: listed (not being removed), healthy (not ejected) and not drained, what /readyz needs one of (503 at 0). backend_healthy (1 while drained) and discovery_backends{state=\"serving\"} (ejected ones included) each miss a way out of rotation; this is 0 whenever nothing can be routed."},
		func() float64 { return float64(rt.routableBackends()) })
	for _, c := range append([]prometheus.Collector{m.decisions, m.matchedRatio, requests, duration, ttfb, m.decisionTime,
		learned, m.retracted, lessons, m.lostPrefixes, m.cachedTokens, m.promptTokens, m.prefixRoutes, m.retries, m.ejections, m.ejectionsCapped, m.invalidations, errs, m.backendsGauges,
		m.tenantShareExceeded, reuse, routable}, m.models.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// routableBackends counts the backends in rotation, as Ready checks them:
// the listed ones (not being removed) that are healthy and not drained.
func (rt *Router) routableBackends() int {
	n := 0
	for _, b := range rt.set.Load().listed {
		if b.inRotation() {
			n++
		}
	}
	return n
}

// request counts a request to ep for model (nil: "other") answered status
// after d.
func (m *metrics) request(ep endpointLabel, model *modelMetrics, status int, d time.Duration) {
	c := status / 100
	if c < 1 || c > 5 {
		c = 5
	}
	if model == nil {
		model = m.models.other
	}
	model.requests(ep, c).Inc()
	model.durations(ep).Observe(d.Seconds())
}

// backendCollector reports per-backend state at scrape time from the
// backends' own atomics, so requests pay nothing for these gauges.
type backendCollector struct{ rt *Router }

var (
	descInFlight = prometheus.NewDesc("kvmesh_router_backend_in_flight_requests",
		"Requests this router has outstanding at the backend.", []string{"backend"}, nil)
	descPending = prometheus.NewDesc("kvmesh_router_backend_pending_prefill_units",
		"Prefill this router has queued at the backend: the estimated uncached prompt units (bytes in byte mode, tokens in token mode) of its requests there still waiting for a first answer byte.", []string{"backend"}, nil)
	descPeerPending = prometheus.NewDesc("kvmesh_router_backend_peer_pending_prefill_units",
		"Prefill the other nodes of the mesh have queued at the backend, as their load channel last reported it (weighted by freshness; 0 without a mesh).", []string{"backend"}, nil)
	descWaiting = prometheus.NewDesc("kvmesh_router_backend_waiting_requests",
		"Waiting requests from the backend's freshest load signal (ORCA or scrape).", []string{"backend"}, nil)
	descRunning = prometheus.NewDesc("kvmesh_router_backend_running_requests",
		"Running requests from the backend's freshest load signal.", []string{"backend"}, nil)
	descKVUsage = prometheus.NewDesc("kvmesh_router_backend_kv_cache_usage_ratio",
		"KV-cache usage (0..1) from the backend's freshest load signal.", []string{"backend"}, nil)
	descSignalAge = prometheus.NewDesc("kvmesh_router_backend_signal_age_seconds",
		"Age of the backend's freshest load signal (+Inf when none was ever received).", []string{"backend"}, nil)
	descHealthy = prometheus.NewDesc("kvmesh_router_backend_healthy",
		"1 when the backend is in rotation, 0 when ejected.", []string{"backend"}, nil)
	descGeneration = prometheus.NewDesc("kvmesh_router_backend_generation",
		"The backend's claim generation (bumped each time it came back cold).", []string{"backend"}, nil)
	descBeliefCapacity = prometheus.NewDesc("kvmesh_router_backend_belief_capacity_tokens",
		"The KV capacity the cache model believes the backend has now, in tokens: the configured or scraped one as the answers corrected it (0: unknown, every claim believed). Against the configured capacity it shows how much of the cache the backend's LRU really keeps prefixes in.", []string{"backend"}, nil)
	descBeliefDoubt = prometheus.NewDesc("kvmesh_router_backend_belief_doubt_worth_ratio",
		"What a claim past the edge of the backend's cache is worth (0..1): belief.doubt_trust, or the share of such claims' blocks its answers found cached lately (belief.doubt_learn).", []string{"backend"}, nil)
	descBeliefDoubtCurve = prometheus.NewDesc("kvmesh_router_backend_belief_doubt_curve_ratio",
		"With belief.doubt_curve: what a claim past the edge of the backend's cache is worth (0..1) by how far past it is: the claims with at most beyond_le capacities written after them (and more than the range below), as this node's answers taught (with belief.doubt_pool, the answers from every backend: one curve, the same at every backend in each range an answer has taught).", []string{"backend", "beyond_le"}, nil)
	descRetention = prometheus.NewDesc("kvmesh_router_backend_eviction_retention_seconds",
		"On an eviction-link backend, how long its engine kept the newest released prefix its KV events said it evicted: the time the eviction was read less when the answer that last linked that prefix ended (evictedge.go). Not reported before the first such eviction.", []string{"backend"}, nil)
	descOrderSegments = prometheus.NewDesc("kvmesh_router_backend_eviction_order_segments",
		"With precise.eviction_order, on an eviction-link backend: the claims' segments the router holds in its copy of the engine's LRU queue (released, not pinned by a request in flight, not yet evicted; evictorder.go). Not reported otherwise.", []string{"backend"}, nil)
	descBeliefDoubtSpan = prometheus.NewDesc("kvmesh_router_belief_doubt_span_worth_ratio",
		"With belief.doubt_span_curve: what the blocks a doubted claim covers beyond the trusted match are worth (0..1) by its distance past the edge (beyond_le capacities, as the doubt curve's ranges) and the span's length (at most span_le tokens, more than the range below), as this node's answers from every backend taught; a cell no answer has taught is not reported.", []string{"beyond_le", "span_le"}, nil)
)

func (c *backendCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descPending, descPeerPending, descWaiting, descRunning, descKVUsage, descSignalAge, descHealthy, descGeneration, descBeliefCapacity, descBeliefDoubt, descBeliefDoubtCurve, descBeliefDoubtSpan, descRetention, descOrderSegments} {
		ch <- d
	}
}

func (c *backendCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.rt.now()
	for _, b := range c.rt.backends() {
		lv := b.loadView(now, &c.rt.cfg, c.rt.peers)
		age := lv.SignalAge.Seconds()
		if lv.Has == 0 {
			age = inf
		}
		healthy := 0.0
		if b.healthy.Load() {
			healthy = 1
		}
		gen, _ := c.rt.ix.Generation(b.id)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(lv.InFlight), b.name)
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, lv.PendingPrefill, b.name)
		ch <- prometheus.MustNewConstMetric(descPeerPending, prometheus.GaugeValue, lv.PeerPendingPrefill, b.name)
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, lv.Waiting, b.name)
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, lv.Running, b.name)
		ch <- prometheus.MustNewConstMetric(descKVUsage, prometheus.GaugeValue, lv.KVUsage, b.name)
		ch <- prometheus.MustNewConstMetric(descSignalAge, prometheus.GaugeValue, age, b.name)
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, b.name)
		ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(gen), b.name)
		if r, ok := b.edge.retention(); ok {
			ch <- prometheus.MustNewConstMetric(descRetention, prometheus.GaugeValue, float64(r)/1e3, b.name)
		}
		if c.rt.orderKept(b) {
			ch <- prometheus.MustNewConstMetric(descOrderSegments, prometheus.GaugeValue, float64(b.order.segments()), b.name)
		}
		if cfg := &c.rt.cfg.Belief; cfg.Enabled {
			capacity := c.rt.inTokens(math.Float64frombits(b.belief.kappa.Load()))
			ch <- prometheus.MustNewConstMetric(descBeliefCapacity, prometheus.GaugeValue, capacity, b.name)
			ch <- prometheus.MustNewConstMetric(descBeliefDoubt, prometheus.GaugeValue, b.belief.doubtTrust(cfg), b.name)
			for i, worth := range b.belief.curveOf(cfg) {
				ch <- prometheus.MustNewConstMetric(descBeliefDoubtCurve, prometheus.GaugeValue, worth, b.name, doubtRangeLabel(i, cfg))
			}
		}
	}
	if cfg := &c.rt.cfg.Belief; cfg.Enabled && cfg.DoubtSpanCurve {
		for d := range doubtRanges {
			for i := range spanRanges {
				if worth, ok := c.rt.spans.worthOf(d, i); ok {
					ch <- prometheus.MustNewConstMetric(descBeliefDoubtSpan, prometheus.GaugeValue, worth, doubtRangeLabel(d, cfg), spanRangeLabel(i))
				}
			}
		}
	}
}
