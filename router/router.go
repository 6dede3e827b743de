package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvmesh/kvmesh/tree"
)

// Deps are what a Router is built on, besides its Config.
type Deps struct {
	// Index is the claim index the router reads (required). With a mesh it
	// is the index the mesh replicates into.
	Index *tree.Index
	// Learner records claims and invalidations; nil means a LocalLearner on
	// Index (a single node without a mesh).
	Learner Learner
	// Logger receives structured logs; the zero Logger discards them.
	Logger zerolog.Logger
	// Registerer receives every metric (named kvmesh_router_*); nil skips
	// registration.
	Registerer prometheus.Registerer
	// Transport carries requests to backends (proxied requests, probes,
	// scrapes, discovery); nil means a tuned http.Transport.
	Transport http.RoundTripper
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Policy overrides Config.Policy with a policy built elsewhere (the
	// benchmark's oracle arm).
	Policy Policy
	// Peers, if set, reports the bookings of the other nodes of a mesh
	// (mesh.Node): the kvmesh policy then prices each backend with the
	// prefill every node queued there, not only this one's.
	Peers PeerLoad
	// Tokenizer, if set, switches keys to token mode: prompts are hashed as
	// token ids (blocks of tree.Config.BlockTokens tokens, aligned with a
	// backend's KV blocks when the tokenizer is the model's) instead of the
	// bytes of their rendering. Every node of a mesh must use the same mode.
	Tokenizer Tokenizer
	// Precise, if set, puts its backends in precise mode: requests for the
	// models they serve are keyed by the engines' own tokens (precise.go),
	// matching the claims their KV events make. nil: approximate only.
	Precise *PreciseConfig
	// TracerProvider, if set, turns OpenTelemetry tracing on: a span per
	// request with the decision, one per attempt, the W3C trace context
	// sent to the backend (tracing.go). nil: no tracing, nothing added to
	// the request path.
	TracerProvider trace.TracerProvider
	// Discoverer, if set, finds the backends instead of
	// Config.Discovery's mode (required in kubernetes mode: package
	// router/kubediscovery builds one).
	Discoverer Discoverer
}

// Router is one kvmesh node's OpenAI-compatible, cache-aware proxy.
//
// ServeHTTP is the API handler; AdminHandler serves the debug and health
// endpoints. Start launches the background loops (probes, scrapes, model
// discovery); Close stops them. A Router that was never started still
// routes, with its configured models and without load signals beyond its
// own in-flight counts.
type Router struct {
	cfg     Config
	ix      *tree.Index
	learner Learner
	peers   PeerLoad    // nil without a mesh
	lessons PeerLessons // peers, when it carries lessons; nil otherwise
	peerAns PeerAnswers // peers, when it carries their answer totals; nil otherwise
	peerPr  PeerPrompts // peers, when it carries their routed prompt totals; nil otherwise
	gate    LessonGate  // peers, when they say whether to author lessons yet; nil: always
	// doubtPool is the fleet's doubted-claim worth per range
	// (BeliefConfig.DoubtPool), which every backend's belief points at.
	doubtPool doubtCurve
	routed    atomic.Uint64
	// routedUnits is the units of the prompts routed counts (LocalPrompts).
	routedUnits atomic.Uint64
	upt         atomic.Uint64  // float64 bits: estimated prompt units per token (belief)
	spans       spanCurve      // what doubted spans proved worth by length (belief.doubt_span_curve)
	idle        atomic.Uint64  // float64 bits: share of recent decisions with an idle candidate (belief.doubt_span_min_idle)
	lost        lostSet        // prompts whose answers showed a believed match lost (lostprefix.go)
	lostOut     lostOutbox     // this node's marks for the mesh (lostshare.go)
	reuse       reuseAverage   // share of prompt tokens answered cached (Request.Reuse)
	answers     answerCounters // this node's answer totals (LocalAnswers)
	log         zerolog.Logger
	policy      Policy
	// forwardPolicy chooses for forwarded requests, which have no prompt.
	forwardPolicy leastLoadedPolicy
	tokenizer     Tokenizer
	precise       *precise // nil without precise mode
	adm           *admission
	hold          *holdMetrics
	holdGate      holdGate     // wakes held requests when a booking ends (hold.go)
	otel          *otelTracing // nil: tracing off
	now           func() time.Time
	transport     http.RoundTripper
	owned         *http.Transport // the default transport, closed by Close
	client        *http.Client    // probes, scrapes and discovery
	metrics       *metrics

	// set is the backend set now, read lock-free on the request path;
	// setMu serializes its changes (backends.go).
	set   atomic.Pointer[backendSet]
	setMu sync.Mutex
	// ejectMu makes counting the ejected backends and ejecting one a
	// single step (health.go, Config.MaxEjectedShare). Taken under a
	// backend's mu, never the other way round.
	ejectMu   sync.Mutex
	members   map[string]*member // by name; guarded by setMu
	slots     slotTable          // each name the router or the Index knows -> its slot (slots.go); guarded by setMu
	runCtx    context.Context    // the loops' context once started; guarded by setMu
	setClosed bool               // guarded by setMu
	// retired is what this router had written to each backend it removed
	// (backend.written), for a later one of the same name to count on from:
	// peers keep the largest count they heard from us. Guarded by setMu.
	retired map[string]*atomic.Int64
	// unlisted is the one sweep of registry entries no node lists
	// (unlisted.go). Guarded by setMu after New; unlistedDone says it
	// ran or is off (read without the lock at every maintain tick).
	unlisted     unlistedSweep
	unlistedDone atomic.Bool
	// names holds every backend name a member object was made for, from
	// before it is registered until it leaves (sweepRemoved): the Index
	// never forgets a removed backend's name while the router holds it
	// (tree.Index.AddInUse). Read lock-free: the Index asks under its own
	// lock, which setMu holders take.
	names sync.Map
	disc  *discoveryMetrics
	// discoverer finds the backends (nil: the static list, changed only
	// by SetBackends).
	discoverer Discoverer
	models     modelSet

	tenantHeader string   // canonical
	orcaFormat   []string // the endpoint-load-metrics-format value sent (shared, never modified); nil = none
	seeds        seedCache
	share        tenantShare // each tenant's new claims, bounded by TenantIndexShare
	states       sync.Pool   // *reqState

	mu      sync.Mutex
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
	closed  bool
}

// New builds a Router. It validates cfg and registers the metrics.
func New(cfg Config, deps Deps) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Index == nil {
		return nil, errors.New("router: Deps.Index is required")
	}
	rt := &Router{
		cfg:          cfg,
		ix:           deps.Index,
		learner:      deps.Learner,
		peers:        deps.Peers,
		log:          deps.Logger.With().Str("component", "router").Logger(),
		now:          deps.Now,
		transport:    deps.Transport,
		tokenizer:    deps.Tokenizer,
		tenantHeader: canonicalHeader(cfg.TenantHeader),
		otel:         newOTel(deps.TracerProvider),
	}
	if rt.now == nil {
		rt.now = time.Now
	}
	if pl, ok := deps.Peers.(PeerLessons); ok {
		rt.lessons = pl
	}
	if g, ok := deps.Peers.(LessonGate); ok {
		rt.gate = g
	}
	if pa, ok := deps.Peers.(PeerAnswers); ok {
		rt.peerAns = pa
	}
	if pp, ok := deps.Peers.(PeerPrompts); ok {
		rt.peerPr = pp
	}
	if rt.learner == nil {
		l := NewLocalLearner(deps.Index, "local")
		l.Now = rt.now
		rt.learner = l
	}
	if rt.transport == nil {
		rt.owned = newTransport(&cfg)
		rt.transport = rt.owned
	}
	rt.client = &http.Client{Transport: rt.transport, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // a backend's health endpoint does not redirect us elsewhere
	}}
	switch f := cfg.ORCAFormat; {
	case f == "":
	case len(f) == 4 && (f[0] == 'j' || f[0] == 'J'):
		rt.orcaFormat = []string{orcaFormatJSON}
	default:
		rt.orcaFormat = []string{orcaFormatText}
	}
	policy := deps.Policy
	if policy == nil {
		var err error
		if policy, err = NewPolicy(cfg.Policy, cfg, deps.Index); err != nil {
			return nil, err
		}
	}
	rt.policy = policy
	m, err := newMetrics(deps.Registerer, policy.Name(), rt)
	if err != nil {
		return nil, fmt.Errorf("router: registering metrics: %w", err)
	}
	rt.metrics = m
	if rt.disc, err = newDiscoveryMetrics(deps.Registerer, cfg.Discovery.Mode); err != nil {
		return nil, fmt.Errorf("router: registering metrics: %w", err)
	}
	if rt.discoverer, err = newDiscoverer(&cfg, &deps); err != nil {
		return nil, err
	}
	deps.Index.AddInUse(func(name string) bool { _, ok := rt.names.Load(name); return ok })
	rt.startUnlistedSweep(deps.Index, cfg.Discovery.UnlistedGrace)
	if err := rt.initBackends(cfg.Backends); err != nil {
		return nil, err
	}
	if rt.adm, err = newAdmission(cfg.Admission, rt.now, deps.Registerer); err != nil {
		return nil, fmt.Errorf("router: registering metrics: %w", err)
	}
	if rt.hold, err = newHoldMetrics(deps.Registerer); err != nil {
		return nil, fmt.Errorf("router: registering metrics: %w", err)
	}
	upt := cfg.Belief.UnitsPerToken
	if deps.Tokenizer != nil {
		upt = 1 // keys over tokens
	}
	rt.upt.Store(math.Float64bits(upt))
	if err := rt.initPrecise(deps); err != nil {
		return nil, err
	}
	rt.states.New = func() any { return newReqState() }
	return rt, nil
}

// newTransport is the tuned transport for backend connections: keep-alive
// pools sized for a backend's concurrency, no transparent compression (the
// body is forwarded byte for byte), HTTP/1.1 (what vLLM and SGLang serve).
func newTransport(cfg *Config) *http.Transport {
	d := &net.Dialer{Timeout: cfg.BackendDialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil, // backends are addressed directly, never through HTTP_PROXY
		DialContext:           d.DialContext,
		MaxIdleConns:          maxIdleConns(cfg),
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerBackend,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: 0,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

// maxIdleConns bounds the transport's idle connections: per backend times
// the configured backends, none with discovery (the set changes; the
// per-backend bound still holds).
func maxIdleConns(cfg *Config) int {
	if cfg.Discovery.Mode != DiscoveryStatic && cfg.Discovery.Mode != "" {
		return 0
	}
	return cfg.MaxIdleConnsPerBackend * max(len(cfg.Backends), 1)
}

// Start launches the background loops: per backend, health probes, load
// scrapes and model discovery; the backend discovery source (Discovery);
// the drain of removed backends. It runs the first model discovery and
// probe round of the backends it has before returning (bounded by
// ProbeTimeout), so their models are known when it returns; backends
// found later join after their own first round. The loops stop when ctx
// ends or Close is called.
func (rt *Router) Start(ctx context.Context) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return errors.New("router: Start after Close")
	}
	if rt.started {
		return errors.New("router: already started")
	}
	rt.started = true
	ctx, rt.cancel = context.WithCancel(ctx)
	var first sync.WaitGroup
	rt.setMu.Lock()
	rt.runCtx = ctx
	for _, m := range rt.members {
		first.Add(1)
		rt.startLocked(m, first.Done)
	}
	rt.setMu.Unlock()
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		rt.maintain(ctx)
	}()
	if d := rt.discoverer; d != nil {
		sink := NewDiscoverySink(rt.cfg.Discovery.Mode, func(list []BackendConfig) { _ = rt.SetBackends(list) }, rt.log)
		sink.m = rt.disc
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			rt.runDiscovery(ctx, d, sink)
		}()
	}
	first.Wait()
	return nil
}

// Close stops the background loops and waits for them. In-flight requests
// are not interrupted: the serve command shuts its http.Server down first.
func (rt *Router) Close() error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	rt.closed = true
	cancel := rt.cancel
	rt.mu.Unlock()
	rt.setMu.Lock()
	rt.setClosed = true
	rt.setMu.Unlock()
	if cancel != nil {
		cancel()
	}
	rt.wg.Wait()
	if rt.precise != nil {
		rt.precise.close()
	}
	if rt.owned != nil {
		rt.owned.CloseIdleConnections()
	}
	return nil
}

// Policy returns the policy in use.
func (rt *Router) Policy() Policy { return rt.policy }

// Config returns the configuration the router was built with.
func (rt *Router) Config() Config { return rt.cfg }

// Ready reports whether at least one backend is in rotation.
func (rt *Router) Ready() bool {
	for _, b := range rt.set.Load().listed {
		if b.inRotation() {
			return true
		}
	}
	return false
}
