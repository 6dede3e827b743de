package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/router/kvevents"
	"github.com/kvmesh/kvmesh/tree"
)

// PreciseConfig is precise mode (docs/precise.md): the engines' KV-cache
// events become claims (each engine's stream consumed by one node of the
// mesh), and requests for the models those engines serve are keyed by the
// engines' own tokens. Without streams, precise mode is off.
type PreciseConfig struct {
	// Streams are the engines that publish KV events, one per backend (by
	// its name in router.backends). A stream with an endpoint is read by
	// connecting to the engine's publisher (vLLM binds tcp://*:5557);
	// without one, the engine connects to Listen and its topic tells it
	// apart.
	Streams []kvevents.StreamConfig `yaml:"streams"`
	// Model is the base model's name in requests for streams that do not
	// set their own. Empty: a backend's only configured model.
	Model string `yaml:"model"`
	// Listen, if set (e.g. tcp://0.0.0.0:5557), is a socket engines'
	// publishers connect to (vLLM's kv-events-config endpoint pointed at
	// this node). Every node of the mesh may listen; an engine's messages
	// are consumed by the node it connects to.
	Listen string `yaml:"listen"`
	// EngineBlockTokens is the engines' KV block size (vLLM --block-size),
	// a multiple of index.block_tokens. 16 is vLLM's default.
	EngineBlockTokens int `yaml:"engine_block_tokens"`
	// TokenizerURL is a server whose POST /tokenize tokenizes as the
	// engines do (any replica of the model). Empty: the precise backends
	// themselves, in turn.
	TokenizerURL string `yaml:"tokenizer_url"`
	// TokenizeTimeout bounds the wait for a prompt's tokens; past it the
	// request is keyed by bytes (approximate) and counted. 100 ms: see
	// router.PreciseConfig.
	TokenizeTimeout time.Duration `yaml:"tokenize_timeout"`
	// MaxTokenizeInFlight bounds concurrent tokenizations (64).
	MaxTokenizeInFlight int `yaml:"max_tokenize_in_flight"`
	// TokenizeCacheTokens bounds the cache of recent prompts' tokens (4M
	// tokens, 16 MiB; 0: off).
	TokenizeCacheTokens int `yaml:"tokenize_cache_tokens"`
	// LeaseTTL is how long a claim made from a stored block lives unless
	// renewed (the owner renews the blocks the engine still holds). 10 min,
	// the confirmed claim TTL: when an owner dies, its claims fade like
	// learned ones while the next owner resyncs.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// MaxMessageBytes bounds one ZMQ message read from an engine, its
	// publisher or its replay socket; a peer declaring more loses its
	// connection before anything is allocated. 32 MiB: see
	// kvevents.Config.MaxMessageBytes.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// Mode is what the events do. "tokens" (the default): precise mode,
	// requests keyed by the engines' tokens. "evictions": requests stay
	// keyed by bytes with no tokenization on their path; the events end
	// the byte claims linked to the blocks the engines evict
	// (router.PreciseConfig.EvictionBackends, docs/precise.md). Either way
	// each stream is read by one node of the mesh.
	Mode string `yaml:"mode"`
	// TrustEvictionLinks (evictions mode) applies no belief model to the
	// claims on those backends: the events say what the engines evicted.
	// true; false keeps the model's doubts on top of the events.
	TrustEvictionLinks bool `yaml:"trust_eviction_links"`
	// EvictionLag (evictions mode) is how late an engine's events say
	// what it evicted, about one engine step (250 ms for a long prefill
	// step). Set, claims its evictions say will be gone before a request
	// reaches the engine's scheduler are doubted: a lower TTFT p99 for a
	// lower hit rate (router.PreciseConfig.EvictionLag). 0 (the default):
	// off.
	EvictionLag time.Duration `yaml:"eviction_lag"`
	// EvictionOrder (evictions mode) doubts instead the claims with less
	// of the engine's LRU queued ahead of them than the prefill booked
	// ahead of the request, by the order the router keeps of what it left
	// on each engine (router.PreciseConfig.EvictionOrder).
	EvictionOrder bool `yaml:"eviction_order"`
	// EvictionOrderSlack (with eviction_order): answers that ended within
	// this of each other may have been released by the engine in either
	// order (200 ms: about an engine step; router.PreciseConfig.
	// EvictionOrderSlack).
	EvictionOrderSlack time.Duration `yaml:"eviction_order_slack"`
	// MaxEvictionLinks bounds the links from engine blocks to byte claims
	// a node holds (evictions mode; 256K, about 10 MiB).
	MaxEvictionLinks int `yaml:"max_eviction_links"`
	// LinkTokenizeTimeout bounds the background tokenization of an
	// answered prompt for its links (evictions mode; 2 s: it is off the
	// request path, and a late link is still in time).
	LinkTokenizeTimeout time.Duration `yaml:"link_tokenize_timeout"`
	// LinkWorkers and LinkQueue (evictions mode): the goroutines that run
	// those tokenizations one at a time each, and the answered prompts
	// that may wait for one (2 and 256: router.PreciseConfig.LinkWorkers).
	LinkWorkers int `yaml:"link_workers"`
	LinkQueue   int `yaml:"link_queue"`
	// OwnershipInterval is how often a node recomputes which streams it
	// owns from the mesh's alive members. 1 s adds at most a second to
	// serf's failure detection (7-10 s) before a failed owner's streams
	// move.
	OwnershipInterval time.Duration `yaml:"ownership_interval"`
}

// defaultPrecise is precise mode's defaults, without streams.
func defaultPrecise() PreciseConfig {
	rp, kc := router.DefaultPreciseConfig(), kvevents.DefaultConfig()
	return PreciseConfig{
		EngineBlockTokens:   rp.EngineBlockTokens,
		TokenizeTimeout:     rp.TokenizeTimeout,
		MaxTokenizeInFlight: rp.MaxTokenizeInFlight,
		TokenizeCacheTokens: rp.CacheTokens,
		LeaseTTL:            kc.LeaseTTL,
		MaxMessageBytes:     kc.MaxMessageBytes,
		OwnershipInterval:   time.Second,
		Mode:                modeTokens,
		TrustEvictionLinks:  rp.TrustEvictionLinks,
		EvictionLag:         rp.EvictionLag,
		EvictionOrder:       rp.EvictionOrder,
		EvictionOrderSlack:  rp.EvictionOrderSlack,
		MaxEvictionLinks:    rp.MaxEvictionLinks,
		LinkTokenizeTimeout: rp.LinkTokenizeTimeout,
		LinkWorkers:         rp.LinkWorkers,
		LinkQueue:           rp.LinkQueue,
	}
}

// What the events do (PreciseConfig.Mode).
const (
	modeTokens    = "tokens"
	modeEvictions = "evictions"
)

// evictions reports whether the streams end byte-keyed claims
// (PreciseConfig.Mode evictions) rather than key requests by tokens.
func (p *PreciseConfig) evictions() bool { return p.Mode == modeEvictions }

// enabled reports whether precise mode is on.
func (p *PreciseConfig) enabled() bool { return len(p.Streams) > 0 || p.Listen != "" }

// routerConfig is the router's side of precise mode (nil when off).
func (p *PreciseConfig) routerConfig() *router.PreciseConfig {
	if len(p.Streams) == 0 {
		return nil
	}
	rc := router.DefaultPreciseConfig()
	for _, s := range p.Streams {
		if p.evictions() {
			rc.EvictionBackends = append(rc.EvictionBackends, s.Backend)
		} else {
			rc.Backends = append(rc.Backends, s.Backend)
		}
	}
	rc.TrustEvictionLinks = p.TrustEvictionLinks
	rc.EvictionLag = p.EvictionLag
	rc.EvictionOrder = p.EvictionOrder
	rc.EvictionOrderSlack = p.EvictionOrderSlack
	rc.MaxEvictionLinks = p.MaxEvictionLinks
	rc.LinkTokenizeTimeout = p.LinkTokenizeTimeout
	rc.LinkWorkers = p.LinkWorkers
	rc.LinkQueue = p.LinkQueue
	rc.EngineBlockTokens = p.EngineBlockTokens
	rc.TokenizerURL = p.TokenizerURL
	rc.TokenizeTimeout = p.TokenizeTimeout
	rc.MaxTokenizeInFlight = p.MaxTokenizeInFlight
	rc.CacheTokens = p.TokenizeCacheTokens
	return &rc
}

// eventsConfig is the ingestion's configuration: renewal paced by the
// lease (a quarter of it left triggers renewal, checked every fortieth).
func (p *PreciseConfig) eventsConfig(blockTokens int) kvevents.Config {
	kc := kvevents.DefaultConfig()
	kc.BlockTokens = blockTokens
	kc.Listen = p.Listen
	kc.LeaseTTL = p.LeaseTTL
	kc.RenewBefore = p.LeaseTTL / 4
	kc.RenewEvery = p.LeaseTTL / 40
	kc.MaxMessageBytes = p.MaxMessageBytes
	return kc
}

// streams returns the streams with their models resolved: the stream's
// own, else precise.model, else the backend's only configured model.
func (p *PreciseConfig) streams(backends []router.BackendConfig) ([]kvevents.StreamConfig, error) {
	out := make([]kvevents.StreamConfig, len(p.Streams))
	var errs []error
	for i, s := range p.Streams {
		if s.Model == "" {
			s.Model = p.Model
		}
		if s.Model == "" {
			for _, b := range backends {
				if (b.Name == s.Backend || (b.Name == "" && b.URL == s.Backend)) && len(b.Models) == 1 {
					s.Model = b.Models[0]
				}
			}
		}
		if s.Model == "" {
			errs = append(errs, fmt.Errorf("precise.streams[%d] (%s): no model: set the stream's model, precise.model or the backend's one model (the name requests use for the engine's base model)", i, s.Backend))
		}
		out[i] = s
	}
	return out, errors.Join(errs...)
}

// digest names the streams this node consumes, for the mesh's TagPrecise
// (mesh.Config.PreciseStreams): a hash of each stream's backend, endpoints,
// topic and model, sorted (the order streams are listed in does not
// matter), 16 hex digits; "" without
// precise mode. Nodes announcing the same digest choose each stream's
// owner among themselves.
func (p *PreciseConfig) digest(backends []router.BackendConfig) string {
	if !p.enabled() {
		return ""
	}
	streams, _ := p.streams(backends) // validated already
	lines := make([]string, len(streams))
	for i, s := range streams {
		lines[i] = strings.Join([]string{s.Backend, s.Endpoint, s.ReplayEndpoint, s.Topic, s.Model}, "\x00")
	}
	slices.Sort(lines)
	h := sha256.New() // not the listen address: it may differ node by node
	if p.evictions() {
		h.Write([]byte(modeEvictions)) // the other mode's owners make other claims
	}
	for _, l := range lines {
		h.Write([]byte{'\n'})
		h.Write([]byte(l))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// validate checks precise mode against the rest of the configuration.
func (p *PreciseConfig) validate(c *ServeConfig) error {
	if !p.enabled() {
		return nil
	}
	var errs []error
	names := map[string]bool{}
	for _, b := range c.Router.Backends {
		names[b.Name] = true
		if b.Name == "" {
			names[b.URL] = true
		}
	}
	for i, s := range p.Streams {
		if s.Backend != "" && !names[s.Backend] {
			errs = append(errs, fmt.Errorf("precise.streams[%d]: backend %q is not in router.backends", i, s.Backend))
		}
	}
	if _, err := p.streams(c.Router.Backends); err != nil {
		errs = append(errs, err)
	}
	kc := p.eventsConfig(c.Index.BlockTokens)
	if err := kc.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("precise: %s", kvKeys.Replace(err.Error())))
	} else if err := kc.ValidateStreams(p.Streams); err != nil {
		errs = append(errs, fmt.Errorf("precise: %s", kvKeys.Replace(err.Error())))
	}
	if rc := p.routerConfig(); rc != nil {
		if err := rc.Validate(c.Index.BlockTokens); err != nil {
			errs = append(errs, err)
		}
	}
	switch p.Mode {
	case modeTokens:
	case modeEvictions:
	default:
		errs = append(errs, fmt.Errorf("precise: mode must be %s or %s, got %q", modeTokens, modeEvictions, p.Mode))
	}
	if p.OwnershipInterval <= 0 {
		errs = append(errs, fmt.Errorf("precise: ownership_interval must be positive, got %v", p.OwnershipInterval))
	}
	return errors.Join(errs...)
}

// kvKeys names package kvevents' Config fields by their YAML keys in errors.
var kvKeys = strings.NewReplacer("kvevents: ", "", "LeaseTTL", "lease_ttl", "RenewBefore", "lease_ttl", "RenewEvery", "lease_ttl",
	"BlockTokens", "index.block_tokens", "MaxMessageBytes", "max_message_bytes")

// startPrecise starts the KV-event ingestion into sink (the mesh node,
// whose changes replicate everywhere, or alone the router's learner): with
// a mesh (members set), the streams this node owns among the alive members
// (kvevents.FollowMembers: each engine's stream has one consumer in the
// mesh, and moves when its owner fails); alone, every stream. It returns a
// stop function.
func startPrecise(ctx context.Context, cfg *ServeConfig, ix *tree.Index, sink kvevents.Sink, members func() []string,
	log zerolog.Logger, reg prometheus.Registerer) (stop func(), err error) {
	p := &cfg.Precise
	streams, err := p.streams(cfg.Router.Backends)
	if err != nil {
		return nil, err
	}
	m, err := kvevents.NewManager(p.eventsConfig(cfg.Index.BlockTokens), streams,
		kvevents.Deps{Index: ix, Sink: sink, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		m.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	if members != nil {
		go func() {
			defer close(done)
			if len(cfg.Mesh.Join) > 0 {
				awaitPeers(ctx, members, joinGrace)
			}
			m.FollowMembers(ctx, cfg.Node.Name, members, p.OwnershipInterval)
		}()
	} else {
		m.SetOwned(m.Backends()) // a node alone owns every stream
		close(done)
	}
	log.Info().Int("streams", len(streams)).Str("listen", p.Listen).Bool("mesh", members != nil).Msg("precise mode: consuming KV events")
	return func() {
		cancel()
		<-done
		m.Close()
	}, nil
}

// parseStreams reads --kv-events: "backend=tcp://host:port" (connect to
// the engine's publisher) or a bare backend name (the engine connects to
// --kv-events-listen with the backend's name as its topic), comma-separated.
func parseStreams(v string) ([]kvevents.StreamConfig, error) {
	var out []kvevents.StreamConfig
	for _, item := range list(v) {
		name, ep, _ := strings.Cut(item, "=")
		if name == "" {
			return nil, fmt.Errorf("stream %q: want backend=tcp://host:port or a backend name", item)
		}
		s := kvevents.StreamConfig{Backend: name, Endpoint: ep}
		if ep == "" {
			s.Topic = name
		} else if !strings.HasPrefix(ep, "tcp://") {
			return nil, fmt.Errorf("stream %q: the endpoint must start with tcp://", item)
		}
		out = append(out, s)
	}
	return out, nil
}

// preciseSettings are precise mode's flags (appended to serveSettings).
var preciseSettings = []setting{
	{name: "kv-events", key: "precise.streams", usage: "engines publishing KV events (precise mode), comma-separated: backend=tcp://host:port connects to the engine's publisher; a bare backend name waits for the engine to connect to --kv-events-listen with the name as its topic (replaces the config file's list)",
		get: func(c *ServeConfig) string {
			var parts []string
			for _, s := range c.Precise.Streams {
				parts = append(parts, s.Backend+"="+s.Endpoint)
			}
			return strings.Join(parts, ",")
		},
		apply: func(c *ServeConfig, v string) error {
			s, err := parseStreams(v)
			if err == nil {
				c.Precise.Streams = s
			}
			return err
		}},
	{name: "kv-events-replay", key: "precise.streams.replay_endpoint", usage: "the engines' replay sockets (vLLM's replay_endpoint), backend=tcp://host:port,...: a sequence gap is replayed instead of invalidating the backend",
		get: func(c *ServeConfig) string {
			var parts []string
			for _, s := range c.Precise.Streams {
				if s.ReplayEndpoint != "" {
					parts = append(parts, s.Backend+"="+s.ReplayEndpoint)
				}
			}
			return strings.Join(parts, ",")
		},
		apply: func(c *ServeConfig, v string) error {
			for _, item := range list(v) {
				name, ep, ok := strings.Cut(item, "=")
				if !ok || !strings.HasPrefix(ep, "tcp://") {
					return fmt.Errorf("replay endpoint %q: want backend=tcp://host:port", item)
				}
				found := false
				for i := range c.Precise.Streams {
					if c.Precise.Streams[i].Backend == name {
						c.Precise.Streams[i].ReplayEndpoint, found = ep, true
					}
				}
				if !found {
					return fmt.Errorf("replay endpoint %q: %s has no stream (--kv-events)", item, name)
				}
			}
			return nil
		}},
	strSetting("kv-events-mode", "precise.mode", "what engines' KV events do: tokens (precise mode: requests keyed by the engines' tokens) or evictions (requests keyed by bytes; the events end the claims of evicted prefixes)", func(c *ServeConfig) *string { return &c.Precise.Mode }),
	strSetting("kv-events-listen", "precise.listen", "bind a socket engines' KV-event publishers connect to, e.g. tcp://0.0.0.0:5557 (precise mode)", func(c *ServeConfig) *string { return &c.Precise.Listen }),
	strSetting("kv-events-model", "precise.model", "the engines' base model name in requests, for streams that do not set one (precise mode)", func(c *ServeConfig) *string { return &c.Precise.Model }),
	intSetting("engine-block-tokens", "precise.engine_block_tokens", "the engines' KV block size (vLLM --block-size), a multiple of index.block_tokens (precise mode)", func(c *ServeConfig) *int { return &c.Precise.EngineBlockTokens }),
	strSetting("tokenizer-url", "precise.tokenizer_url", "a server whose POST /tokenize tokenizes as the engines do (default: the precise backends themselves)", func(c *ServeConfig) *string { return &c.Precise.TokenizerURL }),
	durationSetting("tokenize-timeout", "precise.tokenize_timeout", "longest wait for a prompt's tokens before it is keyed by bytes (precise mode)", func(c *ServeConfig) *time.Duration { return &c.Precise.TokenizeTimeout }),
}

func init() { serveSettings = append(serveSettings, preciseSettings...) }

// maxClaimTTL is the longest any claim may live: the router's TTLs and, in
// precise mode, the event leases. Peers cap what they receive to it.
func (c *ServeConfig) maxClaimTTL() time.Duration {
	ttl := max(c.Router.ConfirmedTTL, c.Router.ProvisionalTTL)
	if c.Precise.enabled() {
		ttl = max(ttl, c.Precise.LeaseTTL)
	}
	return ttl
}

// joinGrace is how long a node with seeds waits to see a peer before it
// takes streams as if alone. A node (re)starting into a mesh would
// otherwise own every stream until its join completes, and the first
// message of each would invalidate that engine's claims on every node. A
// join takes under a second; 5 s also covers a slow DNS seed, and the
// mesh's first node waits it out once.
const joinGrace = 5 * time.Second

// awaitPeers returns once members() lists another node, after grace, or
// when ctx ends.
func awaitPeers(ctx context.Context, members func() []string, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for len(members()) < 2 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// preciseSink is where the events' claim changes go, and how a node finds
// the mesh's alive members (nil alone): the mesh node replicates them
// everywhere; a node alone writes through its router's learner.
// evictionSink is the sink of evictions mode (router.Router.EvictionSink):
// with a mesh, the node ends the claims of linked blocks for the streams
// it owns, and the tombstones its peers send end the byte claims this node
// linked.
func evictionSink(rt *router.Router, node meshNode) (kvevents.Sink, error) {
	var sink kvevents.Sink
	if node != nil {
		node.OnEnded(rt.EndLinked)
		sink = rt.EvictionSink(node)
	} else {
		sink = rt.EvictionSink(nil)
	}
	if sink == nil {
		return nil, errors.New("precise: mode evictions: the router has no eviction-link backends")
	}
	return sink, nil
}

func preciseSink(node meshNode, local *router.LocalLearner) (kvevents.Sink, func() []string) {
	if node != nil {
		return node, node.AliveMembers
	}
	return local, nil
}
