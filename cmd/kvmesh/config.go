package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// ServeConfig is the whole configuration of `kvmesh serve`, as read from the
// YAML file given with --config. Environment variables (KVMESH_*) override
// the file and flags override both; see flags.go.
type ServeConfig struct {
	Node   NodeConfig    `yaml:"node"`
	Listen ListenConfig  `yaml:"listen"`
	Log    LogConfig     `yaml:"log"`
	Index  IndexConfig   `yaml:"index"`
	Router router.Config `yaml:"router"`
	Mesh   MeshConfig    `yaml:"mesh"`
	// Precise is precise mode: engines' KV events (precise.go).
	Precise PreciseConfig `yaml:"precise"`
	// Tracing is OpenTelemetry tracing over OTLP (tracing.go; off by
	// default).
	Tracing TracingConfig `yaml:"tracing"`
	// ShutdownTimeout bounds the graceful shutdown: in-flight requests get
	// this long to finish after SIGTERM. 60 s lets most streamed
	// completions end; a Kubernetes pod's terminationGracePeriodSeconds
	// should be longer than DrainDelay plus this.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// DrainDelay: after SIGTERM, /readyz fails at once but the API
	// listener keeps accepting for this long, so that load balancers and
	// Kubernetes' endpoints see the node leave before it stops taking
	// connections. 5 s covers an endpoints update and a balancer health
	// check every few seconds; set it above your balancer's check interval
	// times its failure count. A second signal ends it early.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// StateDir, if set, is where the node keeps a snapshot of its claim
	// state (created if missing), so that a restart, even of every node of
	// a mesh at once, starts warm. Empty: claims live in memory only (a
	// lone restarted node of a mesh gets them back from its peers anyway).
	StateDir string `yaml:"state_dir"`
	// StateInterval is how often the snapshot is written (and once more at
	// shutdown). 30 s: writing a million claims takes ~50 ms and 15 MB, and
	// what a crash loses is what 30 s of traffic taught, which claims
	// relearn within their TTL anyway.
	StateInterval time.Duration `yaml:"state_interval"`

	// reload reads the configuration again as it was first read (file,
	// environment, flags): SIGHUP's backend list (discovery.go).
	reload func() (*ServeConfig, error)
	// backendsFrom is the flag or variable (--backends, KVMESH_BACKENDS)
	// the backend list came from when a config file is used too, "" when
	// from the file or with no file: a reload reads it again unchanged, so
	// an edit of the file's list never takes effect.
	backendsFrom string
	// fileBackendsReplaced: the file lists backends, and backendsFrom
	// replaced them (warned at start).
	fileBackendsReplaced bool
}

// NodeConfig names this router node.
type NodeConfig struct {
	// Name must be unique in the mesh (claims record their origin by it).
	// Default: the hostname.
	Name string `yaml:"name"`
}

// ListenConfig places the two listeners. The API listener carries client
// traffic only; the admin listener has /metrics, /healthz, /readyz,
// /debug/route and /admin/*, and should not be exposed to clients.
type ListenConfig struct {
	API   string `yaml:"api"`
	Admin string `yaml:"admin"`
	// AdminPprof serves Go's profiles on the admin listener (/debug/pprof/).
	// Off by default: a profile costs CPU while it is taken (a CPU profile
	// runs 30 s), the dumps show the program's internals, and the admin
	// listener listens on every interface unless told otherwise.
	AdminPprof bool `yaml:"admin_pprof"`
}

// LogConfig: zerolog level (debug logs one line per routing decision) and
// format (json for machines, console for humans).
type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// IndexConfig is the claim index (package tree). Every node of a mesh must
// use the same values.
type IndexConfig struct {
	Capacity         int `yaml:"capacity"`
	BlockTokens      int `yaml:"block_tokens"`
	CheckpointTokens int `yaml:"checkpoint_tokens"`
	// RefreshMaxMillis caps, in milliseconds, how much older than its last
	// use a claim's timestamp may get (tree.Config.RefreshMaxMillis). 2000
	// (2 s): readers that model a backend's cache as an LRU need the
	// timestamp to say when the backend last saw the prefix, and a prefix
	// in constant use is then re-sent every 2 s, a few claims a second
	// mesh-wide. 0: no cap (the TTL fraction alone bounds it).
	RefreshMaxMillis int64 `yaml:"refresh_max_millis"`
	// ForgetRemoved is how long after its removal a removed backend's
	// registry name is forgotten and its id freed for a new one
	// (tree.Config.ForgetRemovedMillis). 6h: the registry holds 4,096
	// names, and without forgetting every pod name a rollout or autoscaler
	// retires stays for good; it must be at least twice the longest claim
	// life (router.confirmed_claim_ttl and provisional_claim_ttl, router.belief.lost_ttl, precise.lease_ttl),
	// so no claim of the old backend is alive anywhere. 0: never.
	ForgetRemoved time.Duration `yaml:"forget_removed"`
}

// MeshConfig turns a node into a member of a mesh of router nodes.
type MeshConfig struct {
	// Enabled turns the mesh on. Without it the node routes alone.
	Enabled bool `yaml:"enabled"`
	// Join is the seed list: host:port of serf listeners, or DNS names
	// (A records, or SRV records such as a Kubernetes headless Service's).
	Join []string `yaml:"join"`
	// Bind is the serf (membership gossip) listener, TCP and UDP.
	Bind string `yaml:"bind"`
	// Advertise is the serf address other nodes use, when Bind is a
	// wildcard address.
	Advertise string `yaml:"advertise"`
	// QUIC is the UDP listener for claim replication.
	QUIC string `yaml:"quic"`
	// QUICAdvertise is the QUIC address other nodes use, when QUIC binds a
	// wildcard address.
	QUICAdvertise string `yaml:"quic_advertise"`
	// GossipKey encrypts serf gossip: 32 bytes, base64 (`kvmesh
	// gossip-key` makes one). Required unless Dev is set.
	GossipKey string `yaml:"gossip_key"`
	// TLS: the cluster CA and this node's certificate (its CommonName is the
	// node name). `kvmesh certs` creates them for a dev or test cluster.
	TLSCA   string `yaml:"tls_ca"`
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// Dev allows a mesh without a gossip key, for a local cluster, and
	// moves the listeners left at their defaults to loopback. Never in
	// production: anyone who reaches the serf port can join.
	Dev bool `yaml:"dev"`
	// ShareLostMarks sends the prompts this node found lost at a backend to
	// the peers (mesh.Config.ShareLostMarks: off, no measured benefit yet).
	ShareLostMarks bool `yaml:"share_lost_marks"`
	// GossipCompression LZW-compresses serf's gossip
	// (mesh.Config.GossipCompression: off, it cost allocations and saved
	// little; nodes with it on and off gossip with each other).
	GossipCompression bool `yaml:"gossip_compression"`

	// The replication and load-channel intervals (mesh.Config's; leave
	// them unless a measurement says otherwise, or the backends run on a
	// simulated clock: kvmesh-bench serve-config divides them by its time
	// scale, as the harness's in-process mesh does).
	//
	// FlushInterval is how often learned claims leave the node
	// (mesh.Config.FlushInterval). 10 ms keeps learn-to-routable latency
	// at a few tens of ms while batching many requests' claims into one
	// message per peer.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// LoadInterval is how often the load loop sends what changed in this
	// node's bookings when nothing woke it earlier
	// (mesh.Config.LoadInterval). 10 ms: the router wakes it at every
	// dispatch and first byte, so this is a safety net.
	LoadInterval time.Duration `yaml:"load_interval"`
	// LoadMinGap is the least time between two load sends the router's
	// wake-ups cause (mesh.Config.LoadMinGap). 2 ms: short, because two
	// nodes routing within it may pick the same idle backend, yet at most
	// 500 messages a second per peer. 0: no coalescing.
	LoadMinGap time.Duration `yaml:"load_min_gap"`
	// LoadLazyDelay is how long a change of in-flight counts alone (a
	// request ended) waits for company before it is sent
	// (mesh.Config.LoadLazyDelay). 100 ms: decoding requests weigh little
	// in the cost, and it keeps the channel near two messages per request.
	// 0: sent at once.
	LoadLazyDelay time.Duration `yaml:"load_lazy_delay"`
}

// applyTimes sets mc's intervals from the configuration.
func (m *MeshConfig) applyTimes(mc *mesh.Config) {
	mc.FlushInterval = m.FlushInterval
	mc.LoadInterval = m.LoadInterval
	mc.LoadMinGap = m.LoadMinGap
	mc.LoadLazyDelay = m.LoadLazyDelay
}

// The bounds of the shutdown's times: past them the value is a typo (a unit
// for another: 5h for 5s) that leaves a stopping node stuck for days. A
// drain delay covers a few load balancer health checks, seconds to a
// minute; an hour is far past any. A shutdown timeout waits for the longest
// streamed completion, minutes; a day is far past any, and past every
// orchestrator's grace period.
const (
	maxDrainDelay      = time.Hour
	maxShutdownTimeout = 24 * time.Hour
)

// DefaultServeConfig is the configuration before the file, the environment
// and the flags are applied.
func DefaultServeConfig() ServeConfig {
	tc, mc := tree.DefaultConfig(), mesh.DefaultConfig()
	host, _ := os.Hostname()
	return ServeConfig{
		Node: NodeConfig{Name: host},
		// 8080 is the usual port of an HTTP proxy; 9090 keeps the admin and
		// metrics port next to it, as Prometheus exporters do.
		Listen: ListenConfig{API: ":8080", Admin: ":9090"},
		Log:    LogConfig{Level: "info", Format: "json"},
		Index: IndexConfig{Capacity: tc.Capacity, BlockTokens: tc.BlockTokens, CheckpointTokens: tc.CheckpointTokens,
			RefreshMaxMillis: tc.RefreshMaxMillis, ForgetRemoved: time.Duration(tc.ForgetRemovedMillis) * time.Millisecond},
		Router: router.DefaultConfig(),
		// 7946 is serf's and memberlist's conventional port; QUIC on 7947.
		Mesh: MeshConfig{Bind: defaultBind, QUIC: defaultQUIC,
			FlushInterval: mc.FlushInterval, LoadInterval: mc.LoadInterval, LoadMinGap: mc.LoadMinGap, LoadLazyDelay: mc.LoadLazyDelay},
		Precise:         defaultPrecise(),
		Tracing:         defaultTracing(),
		ShutdownTimeout: 60 * time.Second,
		DrainDelay:      5 * time.Second,
		StateInterval:   30 * time.Second,
	}
}

// loadConfigFile decodes a YAML file over cfg. Unknown keys are errors, so
// a typo never silently keeps a default.
func loadConfigFile(path string, cfg *ServeConfig) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// An empty file (io.EOF) means "all defaults".
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, humanizeYAMLError(err, data))
	}
	// The decoder reads one document: keys after a "---" separator (two
	// files concatenated) would be ignored without a word.
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("config %s: %w", path, err)
		}
		if len(doc.Content) > 0 && !(doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null") {
			return fmt.Errorf("config %s: line %d: a second YAML document (after ---): kvmesh reads one; put every key in it", path, doc.Content[0].Line)
		}
	}
}

// treeConfig is the index configuration as package tree wants it.
func (c *ServeConfig) treeConfig() tree.Config {
	tc := tree.DefaultConfig()
	tc.Capacity = c.Index.Capacity
	tc.BlockTokens = c.Index.BlockTokens
	tc.CheckpointTokens = c.Index.CheckpointTokens
	tc.RefreshMaxMillis = c.Index.RefreshMaxMillis
	tc.ForgetRemovedMillis = c.Index.ForgetRemoved.Milliseconds()
	return tc
}

// Validate checks the whole configuration and reports every problem at
// once, each prefixed with where it is set.
func (c *ServeConfig) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Node.Name == "" {
		add("node.name: must be set (or the hostname must be readable)")
	} else if strings.ContainsAny(c.Node.Name, " \t\n/") {
		add("node.name %q: must not contain spaces or slashes", c.Node.Name)
	} else if err := transport.ValidNodeName(c.Node.Name); err != nil && c.Mesh.Enabled {
		// A mesh node's name is its certificate's CommonName: the
		// transport would refuse it only once the listeners are open.
		add("node.name: %s", strings.TrimPrefix(err.Error(), "transport: "))
	}
	for name, addr := range map[string]string{"listen.api": c.Listen.API, "listen.admin": c.Listen.Admin} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			add("%s %q: %v", name, addr, err)
		}
	}
	if c.Listen.API == c.Listen.Admin && !strings.HasSuffix(c.Listen.API, ":0") {
		add("listen.api and listen.admin must differ (both %q)", c.Listen.API)
	}
	switch c.Log.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		add("log.level %q: want trace, debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		add("log.format %q: want json or console", c.Log.Format)
	}
	if err := c.treeConfig().Validate(); err != nil {
		add("index: %v", treeKeys.Replace(err.Error()))
	}
	// Lost marks (router.belief.lost_ttl) name backends by id too.
	if f, ttl := c.Index.ForgetRemoved, max(c.maxClaimTTL(), c.Router.Belief.LostTTL); f < 0 {
		add("index.forget_removed must not be negative (0: never forget), got %v", f)
	} else if f > 0 && f < 2*ttl {
		add("index.forget_removed %v must be at least twice the longest claim life (%v, from router.confirmed_claim_ttl, router.provisional_claim_ttl, router.belief.lost_ttl and precise.lease_ttl), or 0", f, ttl)
	}
	if err := c.Router.Validate(); err != nil {
		add("%v", err)
	}
	if share := c.Router.TenantIndexShare; share > 0 && share < 1 && c.Index.Capacity > 0 && share*float64(c.Index.Capacity) < 1 {
		add("router.tenant_index_share: %v of index.capacity %d is less than one claim: no tenant could ever learn one", share, c.Index.Capacity)
	}
	if c.ShutdownTimeout <= 0 {
		add("shutdown_timeout must be positive")
	} else if c.ShutdownTimeout > maxShutdownTimeout {
		add("shutdown_timeout must be at most %v, got %v", maxShutdownTimeout, c.ShutdownTimeout)
	}
	if c.DrainDelay < 0 {
		add("drain_delay must not be negative")
	} else if c.DrainDelay > maxDrainDelay {
		add("drain_delay must be at most %v, got %v", maxDrainDelay, c.DrainDelay)
	}
	if c.StateDir != "" && c.StateInterval <= 0 {
		add("state_interval must be positive")
	}
	if err := c.Precise.validate(c); err != nil {
		add("%v", err)
	}
	if err := c.Tracing.validate(); err != nil {
		add("%v", err)
	}
	// The mesh's intervals are checked with the mesh off too: a bad value
	// in the file is a mistake either way.
	for _, err := range c.Mesh.validateTimes() {
		add("mesh: %v", err)
	}
	if c.Mesh.Enabled {
		if err := c.Mesh.validate(); err != nil {
			add("mesh: %v", err)
		}
	}
	return errors.Join(errs...)
}

func (m *MeshConfig) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(m.Bind); err != nil {
		errs = append(errs, fmt.Errorf("bind %q: %v", m.Bind, err))
	}
	if _, _, err := net.SplitHostPort(m.QUIC); err != nil {
		errs = append(errs, fmt.Errorf("quic %q: %v", m.QUIC, err))
	}
	if m.GossipKey == "" && !m.Dev {
		errs = append(errs, errors.New("gossip_key is required (32 bytes, base64: `kvmesh gossip-key` makes one) unless dev mode is on"))
	} else if m.GossipKey != "" {
		if _, err := mesh.ParseGossipKey(m.GossipKey); err != nil {
			errs = append(errs, fmt.Errorf("gossip_key must be %d bytes in base64 (`kvmesh gossip-key` makes one); the one given is not", mesh.GossipKeyBytes))
		}
	}
	if m.TLSCA == "" || m.TLSCert == "" || m.TLSKey == "" {
		errs = append(errs, errors.New("tls_ca, tls_cert and tls_key are required (create a dev set with `kvmesh certs`)"))
	}
	return errors.Join(errs...)
}

// validateTimes checks the intervals as package mesh does (mesh.Config's
// Validate, over its defaults), one error per problem, named by YAML key.
func (m *MeshConfig) validateTimes() []error {
	mc := mesh.DefaultConfig()
	mc.Name, mc.DevMode = "validate", true // checked elsewhere (node.name, gossip_key)
	m.applyTimes(&mc)
	var errs []error
	// Bounds of a working mesh, beyond mesh.Config.Validate's "positive":
	// below a millisecond the loops spin (1 ns held an idle node at two
	// cores); a load interval past the snapshot period (LoadRefresh) delays
	// the snapshots peers count on to keep this node's bookings, and a flush
	// interval past a second delays every claim and retransmission by as
	// much.
	within := func(key string, v, lo, hi time.Duration, zero bool) {
		if (v != 0 || !zero) && (v < lo || v > hi) {
			or0 := ""
			if zero {
				or0 = " (or 0)"
			}
			errs = append(errs, fmt.Errorf("mesh: %s must be within [%v, %v]%s, got %v", key, lo, hi, or0, v))
		}
	}
	within("flush_interval", m.FlushInterval, time.Millisecond, time.Second, false)
	within("load_interval", m.LoadInterval, time.Millisecond, mc.LoadRefresh, false)
	within("load_min_gap", m.LoadMinGap, 100*time.Microsecond, max(m.LoadInterval, 100*time.Microsecond), true)
	within("load_lazy_delay", m.LoadLazyDelay, time.Millisecond, mc.LoadRefresh, true)
	if len(errs) > 0 {
		return errs
	}
	err := mc.Validate()
	if err == nil {
		return nil
	}
	for _, line := range strings.Split(strings.TrimPrefix(err.Error(), "mesh: invalid config: "), "\n") {
		errs = append(errs, errors.New(meshKeys.Replace(line)))
	}
	return errs
}

// treeKeys names package tree's Config fields by their YAML keys in errors.
var treeKeys = strings.NewReplacer("tree: ", "", "BlockTokens", "block_tokens", "CheckpointTokens", "checkpoint_tokens",
	"Capacity", "capacity", "RefreshMaxMillis", "refresh_max_millis", "ForgetRemovedMillis", "forget_removed (ms)")

// meshKeys names package mesh's Config fields that MeshConfig sets by their
// YAML keys in errors.
var meshKeys = strings.NewReplacer("FlushInterval", "flush_interval", "LoadInterval", "load_interval",
	"LoadMinGap", "load_min_gap", "LoadLazyDelay", "load_lazy_delay")

// The mesh listeners' defaults: every interface, as a cluster needs. In
// dev mode they become loopback (see devDefaults).
const (
	defaultBind = ":7946" // serf's and memberlist's conventional port
	defaultQUIC = ":7947"
)

// devDefaults keeps a dev-mode mesh off the network: the listeners not set
// by the config file, a flag or a variable (bindSet, quicSet) and still at
// their wildcard defaults move to loopback. A dev mesh has no gossip key: on every
// interface, anyone who reaches the serf port could join it.
func (m *MeshConfig) devDefaults(bindSet, quicSet bool) {
	if !m.Dev {
		return
	}
	if !bindSet && m.Bind == defaultBind {
		m.Bind = "127.0.0.1" + defaultBind
	}
	if !quicSet && m.QUIC == defaultQUIC {
		m.QUIC = "127.0.0.1" + defaultQUIC
	}
}

// warnings are the risky settings serve logs loudly at start: a dev-mode
// mesh without a gossip key listening beyond loopback, mesh settings
// without the mesh, a file's backend list that a flag or variable replaces.
func (c *ServeConfig) warnings() []string {
	var out []string
	if c.fileBackendsReplaced {
		out = append(out, fmt.Sprintf("the config file's router.backends is replaced by %s: a SIGHUP reads %s again, "+
			"so an edit of the file's list takes effect only once %s is unset", c.backendsFrom, c.backendsFrom, c.backendsFrom))
	}
	m := &c.Mesh
	if !m.Enabled && (len(m.Join) > 0 || m.GossipKey != "" || m.TLSCA != "" || m.TLSCert != "" || m.TLSKey != "") {
		return append(out, "mesh settings are given (join, gossip_key or tls_*) but the mesh is off: this node routes alone. "+
			"Set --mesh (KVMESH_MESH=true, mesh.enabled: true) to join the others.")
	}
	if !m.Enabled || !m.Dev || m.GossipKey != "" {
		return out
	}
	for _, l := range []struct{ what, addr string }{{"serf gossip (--bind)", m.Bind}, {"QUIC replication (--quic-listen)", m.QUIC}} {
		if !loopback(l.addr) {
			out = append(out, fmt.Sprintf("DEV MODE ON A NETWORK: %s listens on %s, beyond loopback, and the mesh has no gossip key: "+
				"anyone who reaches it can join the mesh and feed it claims. Bind to 127.0.0.1 or set --gossip-key (kvmesh gossip-key makes one).", l.what, l.addr))
		}
	}
	return out
}

// loopback reports whether a listen address binds only a loopback
// interface (a name such as localhost counts only if it is "localhost").
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
