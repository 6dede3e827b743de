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
	peers   PeerLoad // nil without a mesh
	routed  atomic.Uint64
	upt     atomic.Uint64 // float64 bits: estimated prompt units per token (belief)
	log     zerolog.Logger
	policy  Policy
	// forwardPolicy chooses for forwarded requests, which have no prompt.
	forwardPolicy leastLoadedPolicy
	tokenizer     Tokenizer
	precise       *precise // nil without precise mode
	adm           *admission
	now           func() time.Time
	transport     http.RoundTripper
	owned         *http.Transport // the default transport, closed by Close
	client        *http.Client    // probes, scrapes and discovery
	metrics       *metrics

	backends []*backend
	models   modelSet

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
	}
	if rt.now == nil {
		rt.now = time.Now
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
	for i, bc := range cfg.Backends {
		b, err := newBackend(i, bc, deps.Index, m)
		if err != nil {
			return nil, fmt.Errorf("router: backends[%d]: %w", i, err)
		}
		if rt.peers != nil {
			b.booked = rt.peers.BookingsChanged
		}
		rt.backends = append(rt.backends, b)
	}
	rt.models.rebuild(rt.backends)
	if rt.adm, err = newAdmission(cfg.Admission, rt.now, deps.Registerer); err != nil {
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
		MaxIdleConns:          cfg.MaxIdleConnsPerBackend * max(len(cfg.Backends), 1),
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerBackend,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: 0,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

// Start launches the background loops: per backend, health probes, load
// scrapes and model discovery. It runs the first discovery and probe round
// before returning (bounded by ProbeTimeout), so models are known when it
// returns. The loops stop when ctx ends or Close is called.
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
	for _, b := range rt.backends {
		first.Add(1)
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			rt.watch(ctx, b, first.Done)
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
	for _, b := range rt.backends {
		if b.healthy.Load() {
			return true
		}
	}
	return false
}

func (rt *Router) backendByName(name string) *backend {
	for _, b := range rt.backends {
		if b.name == name {
			return b
		}
	}
	return nil
}
