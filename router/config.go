package router

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// BackendConfig names one OpenAI-compatible server (a vLLM or SGLang
// replica).
type BackendConfig struct {
	// Name identifies the backend in claims, metrics, logs and the
	// x-kvmesh-route header. Every router node of a mesh must use the same
	// name for the same backend: claims are replicated by name. Empty means
	// the URL.
	Name string `yaml:"name"`
	// URL is the server's base URL, e.g. http://10.0.0.7:8000 (no /v1).
	URL string `yaml:"url"`
	// Models the backend serves. Empty means discover them from the
	// backend's GET /v1/models (refreshed every DiscoveryInterval); LoRA
	// adapters appear there as model names.
	Models []string `yaml:"models"`
	// Weight is the backend's relative capacity (default 1): a backend of
	// weight 2 is considered half as loaded as one of weight 1 with the same
	// counts, and gets twice the share of new prefixes.
	// Between minBackendWeight and maxBackendWeight: a weight of 1e-300
	// made the backend's load per unit of weight overflow to +Inf.
	Weight float64 `yaml:"weight"`
	// KVCapacityTokens is the backend's KV cache size in tokens, for the
	// claim belief (see BeliefConfig). 0: read it from the backend's
	// metrics (vLLM's cache_config_info, SGLang's max_total_num_tokens),
	// or learn it from the backend's answers.
	KVCapacityTokens int64 `yaml:"kv_capacity_tokens"`
}

// Config configures a Router. Start from DefaultConfig; the serve command
// loads YAML (snake_case keys, durations as "30s") on top of it.
type Config struct {
	// Backends are the servers requests are routed to (discovery mode
	// static; empty with the other modes).
	Backends []BackendConfig `yaml:"backends"`
	// Discovery says where the backends come from: this list, DNS or
	// Kubernetes EndpointSlices (see DiscoveryConfig).
	Discovery DiscoveryConfig `yaml:"discovery"`

	// Policy names the selection policy: one of PolicyNames(). "kvmesh" is
	// the cache- and load-aware default; the others exist to be compared
	// against it.
	Policy string `yaml:"policy"`

	// TenantHeader is the request header naming the tenant. Claims are
	// keyed by (model, tenant, cache_salt), so tenants never share cached
	// prefixes. "X-Tenant-ID" is the common spelling of API gateways.
	TenantHeader string `yaml:"tenant_header"`

	// MaxBodyBytes bounds a request body; larger ones get 413. 32 MiB holds
	// a 128K-token prompt with images referenced by URL several times over,
	// while bounding what one request can make the router buffer.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`

	// MaxModelBytes and MaxCacheSaltBytes bound the body's "model" and
	// "cache_salt" strings; longer ones get 400 before any other work. 256
	// bytes is above the longest Hugging Face repository id (96 + 1 + 96)
	// and any served-model or LoRA adapter name; a salt is a secret of tens
	// of bytes, and 1 KiB holds any encoding of one. A model id longer than
	// MaxModelBytes in a backend's GET /v1/models is skipped (no request
	// could name it), counted in
	// kvmesh_router_discovered_models_skipped_total.
	MaxModelBytes     int `yaml:"max_model_bytes"`
	MaxCacheSaltBytes int `yaml:"max_cache_salt_bytes"`
	// MaxModelsPerBackend bounds the models kept from one backend's GET
	// /v1/models; the rest of its list is skipped, counted in
	// kvmesh_router_discovered_models_skipped_total and logged once per
	// discovery. Every model served is a value of the model label of the
	// request metrics (three series and more per endpoint): without a
	// bound a backend listing hundreds of thousands of ids (its answer may
	// hold 4 MiB) would make every one of them a series a client can
	// create. 256 is far above what a real server lists (a base model and
	// its LoRA adapters), while it bounds the series per backend.
	MaxModelsPerBackend int `yaml:"max_models_per_backend"`
	// MaxMessages bounds a prompt's messages (a chat request's messages, a
	// completions prompt's segments, a responses input's items, an
	// embeddings batch's inputs); more get 400 before the body is parsed.
	// 8,192: a 128K-token context holds that many only at 16 tokens (one KV
	// block) per message.
	MaxMessages int `yaml:"max_messages"`
	// MaxJSONValues bounds the JSON values (strings, numbers, objects,
	// arrays...) of a routed body; more get 413 before the body is parsed.
	// Parsing costs per value: 32 MiB of tiny values would take the router
	// seconds. 262,144 is twice a 128K-token prompt given as token ids;
	// raise it for models whose context takes longer prompts given as ids.
	MaxJSONValues int `yaml:"max_json_values"`
	// MaxLearnPositions bounds the depths at which one request learns
	// claims; a longer list is thinned evenly, keeping the deepest. 512
	// holds a 128K-token prompt's checkpoints (one per 512 tokens) and 256
	// message ends besides, while one request can no longer claim a block
	// per message.
	MaxLearnPositions int `yaml:"max_learn_positions"`
	// TenantIndexShare is the share of the claim index one tenant (one
	// value of TenantHeader; no header is one tenant too) may fill with new
	// claims per ConfirmedTTL, as this node learns them. A tenant past its
	// share is still routed and served, and still refreshes the claims it
	// has, but learns no new ones until its earlier ones age out: it cannot
	// evict everyone else's. 0.5 leaves any other tenant at least half of
	// the index and lets a lone tenant replace half the index every
	// ConfirmedTTL; 1 turns the bound off.
	TenantIndexShare float64 `yaml:"tenant_index_share"`
	// BodyReadTimeout and BodyMinRate bound how slowly a client may send a
	// request body: it must arrive within BodyReadTimeout plus one second
	// per BodyMinRate bytes, or the request gets 408 and the connection is
	// closed (a slowloris client no longer holds a connection and a
	// goroutine for minutes). 10 s as for the headers; 32 KiB/s is far
	// below any data-center client yet makes 2,000 held connections cost
	// their sender 64 MiB/s. A 32 MiB body may take 17 min.
	BodyReadTimeout time.Duration `yaml:"body_read_timeout"`
	BodyMinRate     int64         `yaml:"body_min_bytes_per_second"`
	// MaxConnections bounds the API listener's open connections (0: no
	// bound); past it new connections wait in the kernel's accept queue. A
	// node proxies a few thousand concurrent streams at most (vLLM runs 256
	// per replica); 16,384 leaves room for idle keep-alive connections and
	// keeps them and as many backend connections within the usual 65,536
	// file descriptors.
	MaxConnections int `yaml:"max_connections"`

	// ReadHeaderTimeout and IdleTimeout are for the serve command's
	// http.Server. 10 s of header reading defeats slowloris without hurting
	// any real client; 2 min keeps idle client keep-alive connections long
	// enough for chat clients that pause between turns.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`

	// BackendHeaderTimeout bounds the wait for a backend's response headers.
	// A non-streaming completion sends its headers only when generation is
	// done, so this must exceed the longest generation: 10 min covers 8K
	// output tokens at 15 tokens/s. A timeout is answered 504 and not
	// retried (the backend may still be working on it).
	BackendHeaderTimeout time.Duration `yaml:"backend_response_header_timeout"`
	// ClientWriteTimeout cuts off a client that takes no byte of its answer
	// for this long (the router's write to it blocked: its socket buffers
	// and the kernel's are full), ending the backend request with it. A
	// client that stops reading a streamed answer otherwise held the
	// backend's sequence, its in-flight count and an admission slot for
	// good. 60 s: buffers absorb megabytes first, so only a client that
	// stopped reading gets there. 0: never.
	ClientWriteTimeout time.Duration `yaml:"client_write_timeout"`
	// BackendStreamIdleTimeout ends an answer whose backend sends no byte
	// for this long after its headers (a hung engine or connection with
	// the socket still open): the client's answer ends there (its first
	// bytes went out: no retry) and the backend counts a failure. Without
	// it the client waited as long as the backend stayed silent. 5 min:
	// engines pause a stream for seconds (other requests' prefills), never
	// minutes. 0: never.
	BackendStreamIdleTimeout time.Duration `yaml:"backend_stream_idle_timeout"`
	// BackendDialTimeout bounds a TCP connect to a backend. 2 s: backends
	// sit in the same network; a connect that takes longer is a dead host,
	// and the request is retried elsewhere.
	BackendDialTimeout time.Duration `yaml:"backend_dial_timeout"`
	// MaxIdleConnsPerBackend is the keep-alive pool size per backend. 256
	// covers the concurrency one router sends one vLLM replica (its default
	// max_num_seqs is 256) without re-dialing.
	MaxIdleConnsPerBackend int `yaml:"max_idle_conns_per_backend"`

	// Retries is how many other backends a request may be re-sent to after a
	// connection failure or a 5xx answer, always before any byte reached
	// the client. 2 rides out one dead and one overloaded replica at once.
	Retries int `yaml:"retries"`

	// ProvisionalTTL is the lifetime of claims learned when a request is
	// dispatched, before the backend has answered. 30 s covers the prefill
	// of even a long prompt, so concurrent requests with the same prefix
	// follow the first one; if the request fails before its answer's
	// first byte the claims fade quickly. A 2xx answer's first byte
	// confirms them (ConfirmedTTL): the prefill is done, however long the
	// answer then takes, and even if it then breaks off.
	ProvisionalTTL time.Duration `yaml:"provisional_claim_ttl"`
	// ConfirmedTTL is the lifetime of claims confirmed by a 2xx answer
	// (at its first byte, and again when it completes). It should be of
	// the order of how long a backend keeps an unused prefix in its KV
	// cache: a vLLM replica under steady load turns its cache over in
	// minutes, and chat users come back within minutes.
	// 10 min; a claim that outlives the cached blocks costs one misrouted
	// request (a miss the backend would have had anyway), one that expires
	// too early wastes a hit.
	ConfirmedTTL time.Duration `yaml:"confirmed_claim_ttl"`

	// ProbePath, ProbeInterval and ProbeTimeout shape active health checks
	// (GET ProbePath, 2xx is healthy). vLLM and SGLang both serve /health.
	// Every 2 s notices a restart within seconds at a negligible cost; 1 s
	// is generous for an endpoint that does no work. ProbeInterval 0
	// disables probes (ejected backends then return after EjectionTime).
	ProbePath     string        `yaml:"probe_path"`
	ProbeInterval time.Duration `yaml:"probe_interval"`
	ProbeTimeout  time.Duration `yaml:"probe_timeout"`

	// EjectAfter consecutive failures (connection errors, 5xx answers,
	// timeouts, failed probes) take a backend out of rotation. 3 tolerates
	// a stray error without flapping.
	EjectAfter int `yaml:"eject_after_failures"`
	// MaxEjectedShare caps the share of the listed backends that may be
	// ejected at once when answers (5xx, header timeouts, streams broken
	// off) would eject one more; one may be when none is. A client's requests can cause those
	// failures on every backend they reach (a prompt that makes the
	// engine fail, one that takes longer than the header timeout), and
	// without a cap a few such requests eject the whole fleet. A backend
	// that refuses connections or fails its probe is down whatever the
	// clients send: it is ejected past the cap. 0.5, as Envoy's outlier
	// detection caps ejections (its default is 10%, too few for a fleet of
	// 4): half the fleet still serves while the rest is out. 1: no cap.
	MaxEjectedShare float64 `yaml:"max_ejected_share"`
	// EjectionTime is the least time a backend stays ejected; after it, the
	// next successful probe re-admits it. 10 s is long enough for a crashed
	// process to be seen down, short enough to recover capacity quickly.
	EjectionTime time.Duration `yaml:"ejection_time"`
	// ColdAfter: a backend unreachable (no connection at all) for at least
	// this long is assumed to have restarted, losing its KV cache; when it
	// comes back its claims are invalidated everywhere. 5 s is shorter than
	// any real vLLM restart (loading weights takes longer) and longer than a
	// network blip.
	ColdAfter time.Duration `yaml:"cold_after"`

	// DiscoveryInterval is how often backends without configured Models are
	// asked for GET /v1/models. 30 s picks up new LoRA adapters quickly
	// enough for humans; the list rarely changes.
	DiscoveryInterval time.Duration `yaml:"discovery_interval"`

	// ScrapePath and ScrapeInterval: each backend's Prometheus metrics are
	// scraped for waiting/running requests and KV-cache usage. 1 s matches
	// how fast queues change under load; a backend that sent an ORCA report
	// more recently than that is not scraped.
	ScrapePath     string        `yaml:"scrape_path"`
	ScrapeInterval time.Duration `yaml:"scrape_interval"`
	// SignalFresh and SignalMaxAge weigh load signals by age: a signal up to
	// SignalFresh old counts fully, then its weight falls linearly to zero
	// at SignalMaxAge. 2 s = two scrape intervals; 6 s: queues seen six
	// seconds ago say little about now.
	SignalFresh  time.Duration `yaml:"signal_fresh"`
	SignalMaxAge time.Duration `yaml:"signal_max_age"`

	// BackendLimits bound what the router reads from its backends (their
	// /metrics pages, GET /v1/models answers and ORCA load reports); see
	// BackendLimits.
	BackendLimits BackendLimits `yaml:"backend_limits"`

	// ORCAFormat is sent as endpoint-load-metrics-format on proxied
	// requests so backends (vLLM >= 0.11.1) return an in-band load report.
	// TEXT is the cheapest to parse; "" disables the request.
	ORCAFormat string `yaml:"orca_format"`

	// ForwardPaths are path prefixes forwarded to a backend as they are
	// (besides the routed /v1/chat/completions, /v1/completions,
	// /v1/responses, /v1/embeddings and the answered GET /v1/models). Other
	// paths get 404. The defaults are the OpenAI API and vLLM's and SGLang's
	// extra endpoints.
	ForwardPaths []string `yaml:"forward_paths"`

	// ForwardDeny are path prefixes under ForwardPaths that are refused
	// (403) rather than forwarded: endpoints that change one backend's
	// state, which a client of the API must not reach through the router
	// and which, sent to whichever backend is least loaded, would change
	// one replica of the fleet only. The defaults are vLLM's runtime LoRA
	// endpoints (with VLLM_ALLOW_RUNTIME_LORA_UPDATING, anyone who can
	// reach the API could load an adapter from a path of their choosing);
	// an operator calls each backend directly.
	ForwardDeny []string `yaml:"forward_deny"`

	// Belief is how far claims are believed: the model of each backend's
	// cache turnover (see BeliefConfig).
	Belief BeliefConfig `yaml:"belief"`

	// Admission caps the requests in flight per node and per backend, with
	// a bounded, tenant-fair wait queue (see AdmissionConfig; off by
	// default).
	Admission AdmissionConfig `yaml:"admission"`

	// KVMesh, ConsistentHash and SGLang configure their policies.
	KVMesh         KVMeshConfig         `yaml:"kvmesh"`
	ConsistentHash ConsistentHashConfig `yaml:"consistent_hash"`
	SGLang         SGLangConfig         `yaml:"sglang_cache_aware"`
}

// DefaultConfig returns the defaults documented on each field. Backends is
// empty: a router needs at least one.
func DefaultConfig() Config {
	return Config{
		Policy:                   PolicyKVMesh,
		TenantHeader:             "X-Tenant-ID",
		MaxBodyBytes:             32 << 20,
		MaxModelBytes:            256,
		MaxCacheSaltBytes:        1024,
		MaxModelsPerBackend:      256,
		MaxMessages:              8192,
		MaxJSONValues:            1 << 18,
		MaxLearnPositions:        512,
		TenantIndexShare:         0.5,
		BodyReadTimeout:          10 * time.Second,
		BodyMinRate:              32 << 10,
		MaxConnections:           16384,
		ReadHeaderTimeout:        10 * time.Second,
		IdleTimeout:              2 * time.Minute,
		BackendHeaderTimeout:     10 * time.Minute,
		ClientWriteTimeout:       time.Minute,
		BackendStreamIdleTimeout: 5 * time.Minute,
		BackendDialTimeout:       2 * time.Second,
		MaxIdleConnsPerBackend:   256,
		Retries:                  2,
		ProvisionalTTL:           30 * time.Second,
		ConfirmedTTL:             10 * time.Minute,
		ProbePath:                "/health",
		ProbeInterval:            2 * time.Second,
		ProbeTimeout:             time.Second,
		EjectAfter:               3,
		MaxEjectedShare:          0.5,
		EjectionTime:             10 * time.Second,
		ColdAfter:                5 * time.Second,
		DiscoveryInterval:        30 * time.Second,
		ScrapePath:               "/metrics",
		ScrapeInterval:           time.Second,
		SignalFresh:              2 * time.Second,
		SignalMaxAge:             6 * time.Second,
		BackendLimits:            DefaultBackendLimits(),
		ORCAFormat:               "TEXT",
		ForwardPaths: []string{"/v1/", "/v2/", "/tokenize", "/detokenize", "/pooling", "/classify",
			"/score", "/rerank", "/invocations", "/version"},
		ForwardDeny:    []string{"/v1/load_lora_adapter", "/v1/unload_lora_adapter"},
		Belief:         DefaultBeliefConfig(),
		Discovery:      DefaultDiscoveryConfig(),
		Admission:      DefaultAdmissionConfig(),
		KVMesh:         DefaultKVMeshConfig(),
		ConsistentHash: DefaultConsistentHashConfig(),
		SGLang:         DefaultSGLangConfig(),
	}
}

// Validate reports every setting that cannot work, each with the reason.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("router: "+format, args...)) }
	switch {
	case c.Discovery.Mode != DiscoveryStatic:
		if len(c.Backends) > 0 {
			bad("backends: must be empty with discovery mode %s (the discovery source lists the backends)", c.Discovery.Mode)
		}
	case len(c.Backends) == 0:
		bad("backends: at least one backend is required")
	}
	names := make(map[string]int, len(c.Backends))
	for i, b := range c.Backends {
		u, err := url.Parse(b.URL)
		switch {
		case b.URL == "":
			bad("backends[%d]: url is required", i)
		case err != nil:
			bad("backends[%d]: url %q: %v", i, b.URL, err)
		case u.Scheme != "http" && u.Scheme != "https":
			bad("backends[%d]: url %q: scheme must be http or https", i, b.URL)
		case u.Host == "":
			bad("backends[%d]: url %q has no host", i, b.URL)
		case u.RawQuery != "" || u.Fragment != "":
			bad("backends[%d]: url %q must not have a query or fragment", i, b.URL)
		}
		name := b.effectiveName()
		if len(name) > tree.MaxBackendNameBytes {
			bad("backends[%d]: name (or URL, when no name is given) of %d bytes is over the %d-byte limit (the mesh's wire carries no longer one)", i, len(name), tree.MaxBackendNameBytes)
		}
		if j, dup := names[name]; dup {
			bad("backends[%d]: name %q is already used by backends[%d]", i, name, j)
		}
		names[name] = i
		if b.KVCapacityTokens < 0 || b.KVCapacityTokens > MaxKVCapacityTokens {
			bad("backends[%d]: kv_capacity_tokens must be in [0, %d] (0: from the backend's metrics), got %d", i, int64(MaxKVCapacityTokens), b.KVCapacityTokens)
		}
		if !weightOK(b.Weight) {
			bad("backends[%d]: weight must be between %g and %g (0 means 1), got %v", i, minBackendWeight, maxBackendWeight, b.Weight)
		}
		for j, m := range b.Models {
			if m == "" {
				bad("backends[%d].models[%d]: empty model name", i, j)
			}
		}
	}
	if !slices.Contains(PolicyNames(), c.Policy) {
		bad("policy %q is unknown; choose one of %s", c.Policy, strings.Join(PolicyNames(), ", "))
	}
	if c.TenantHeader == "" || strings.ContainsAny(c.TenantHeader, " \t:\r\n") {
		bad("tenant_header %q must be a header name", c.TenantHeader)
	}
	if c.MaxBodyBytes < 1024 {
		bad("max_body_bytes must be at least 1024, got %d", c.MaxBodyBytes)
	}
	for _, l := range []struct {
		name string
		v    int
	}{
		{"max_model_bytes", c.MaxModelBytes}, {"max_cache_salt_bytes", c.MaxCacheSaltBytes}, {"max_models_per_backend", c.MaxModelsPerBackend},
		{"max_messages", c.MaxMessages}, {"max_json_values", c.MaxJSONValues}, {"max_learn_positions", c.MaxLearnPositions},
	} {
		if l.v < 1 {
			bad("%s must be at least 1, got %d", l.name, l.v)
		}
	}
	if !(c.TenantIndexShare > 0 && c.TenantIndexShare <= 1) {
		bad("tenant_index_share must be in (0, 1] (1 turns it off), got %v", c.TenantIndexShare)
	}
	if c.BodyMinRate < 1 {
		bad("body_min_bytes_per_second must be at least 1, got %d", c.BodyMinRate)
	}
	if c.MaxConnections < 0 {
		bad("max_connections must not be negative (0: no bound), got %d", c.MaxConnections)
	}
	if c.ClientWriteTimeout < 0 {
		bad("client_write_timeout must not be negative (0: never), got %v", c.ClientWriteTimeout)
	}
	if c.BackendStreamIdleTimeout < 0 {
		bad("backend_stream_idle_timeout must not be negative (0: never), got %v", c.BackendStreamIdleTimeout)
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"read_header_timeout", c.ReadHeaderTimeout}, {"idle_timeout", c.IdleTimeout}, {"body_read_timeout", c.BodyReadTimeout},
		{"backend_response_header_timeout", c.BackendHeaderTimeout}, {"backend_dial_timeout", c.BackendDialTimeout},
		{"provisional_claim_ttl", c.ProvisionalTTL}, {"confirmed_claim_ttl", c.ConfirmedTTL},
		{"probe_timeout", c.ProbeTimeout}, {"ejection_time", c.EjectionTime}, {"cold_after", c.ColdAfter},
		{"discovery_interval", c.DiscoveryInterval}, {"scrape_interval", c.ScrapeInterval},
		{"signal_max_age", c.SignalMaxAge},
	}
	for _, p := range positive {
		if p.d <= 0 {
			bad("%s must be positive, got %v", p.name, p.d)
		}
	}
	if c.ProbeInterval < 0 {
		bad("probe_interval must not be negative (0 disables probes), got %v", c.ProbeInterval)
	}
	if c.SignalFresh < 0 || c.SignalFresh >= c.SignalMaxAge {
		bad("signal_fresh (%v) must be in [0, signal_max_age (%v))", c.SignalFresh, c.SignalMaxAge)
	}
	if c.ConfirmedTTL < c.ProvisionalTTL {
		bad("confirmed_claim_ttl (%v) must not be shorter than provisional_claim_ttl (%v)", c.ConfirmedTTL, c.ProvisionalTTL)
	}
	if c.MaxIdleConnsPerBackend < 1 {
		bad("max_idle_conns_per_backend must be at least 1, got %d", c.MaxIdleConnsPerBackend)
	}
	if c.Retries < 0 || c.Retries > 16 {
		bad("retries must be in [0, 16], got %d", c.Retries)
	}
	if c.EjectAfter < 1 {
		bad("eject_after_failures must be at least 1, got %d", c.EjectAfter)
	}
	if !(c.MaxEjectedShare > 0 && c.MaxEjectedShare <= 1) {
		bad("max_ejected_share must be in (0, 1] (1: no cap), got %v", c.MaxEjectedShare)
	}
	if !strings.HasPrefix(c.ProbePath, "/") {
		bad("probe_path %q must start with /", c.ProbePath)
	}
	if !strings.HasPrefix(c.ScrapePath, "/") {
		bad("scrape_path %q must start with /", c.ScrapePath)
	}
	switch strings.ToUpper(c.ORCAFormat) {
	case "", "TEXT", "JSON":
	default:
		bad("orca_format %q must be TEXT, JSON or empty", c.ORCAFormat)
	}
	for i, p := range c.ForwardPaths {
		if !strings.HasPrefix(p, "/") {
			bad("forward_paths[%d] %q must start with /", i, p)
		}
	}
	for i, p := range c.ForwardDeny {
		if !strings.HasPrefix(p, "/") {
			bad("forward_deny[%d] %q must start with /", i, p)
		}
	}
	errs = append(errs, c.BackendLimits.validate()...)
	errs = append(errs, c.Belief.validate()...)
	errs = append(errs, c.Discovery.validate()...)
	errs = append(errs, c.Admission.validate()...)
	errs = append(errs, c.KVMesh.validate()...)
	errs = append(errs, c.ConsistentHash.validate()...)
	errs = append(errs, c.SGLang.validate()...)
	return errors.Join(errs...)
}

func (b BackendConfig) effectiveName() string {
	if b.Name != "" {
		return b.Name
	}
	return b.URL
}

// The range of a backend's weight: a million to one is far past any real
// mix of GPUs, and keeps every load per unit of weight finite.
const (
	minBackendWeight = 0.001
	maxBackendWeight = 1000.0
)

// weightOK reports whether w is a weight a backend may have (0: the
// default, 1). Validate (the config file) and check (SetBackends:
// discovery, the API) share it.
func weightOK(w float64) bool {
	return w == 0 || w >= minBackendWeight && w <= maxBackendWeight
}

func (b BackendConfig) effectiveWeight() float64 {
	if b.Weight > 0 {
		return b.Weight
	}
	return 1
}

// canonicalHeader is the canonical form of a configured header name, so a
// request header map can be indexed directly without re-canonicalizing.
func canonicalHeader(name string) string { return http.CanonicalHeaderKey(name) }
