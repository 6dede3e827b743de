package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Discoverer finds the backends to route to: the configured list, DNS
// records, Kubernetes EndpointSlices (package router/kubediscovery).
//
// Run watches the source until ctx ends, telling sink each complete list it
// finds (sink.Found: at least once, as soon as the list is known, then
// whenever it may have changed, and at least every DiscoveryRedeliverEvery
// even when it did not), each failed look-up (sink.Failed: the router keeps
// the last list) and each entry it skips (sink.Skipped: a record or
// endpoint with garbage). It calls sink from one goroutine at a
// time. It returns when ctx ends, or early with an error if the source
// cannot be watched at all (the router then runs it again after
// Discovery.Interval).
//
// Every node of a mesh must find the same backends under the same names:
// names key claims and the registry replicated between nodes. A removed
// backend's claims are invalidated on every node by the first that removes
// it.
type Discoverer interface {
	Run(ctx context.Context, sink *DiscoverySink) error
}

// DiscoveryRedeliverEvery bounds the time between two deliveries of a
// discoverer's list (sink.Found) while it does not change. The router's
// SetBackends skips an entry it cannot take (a full registry, a backend
// that cannot be built) and changes nothing for the entries it already has:
// an unchanged list delivered again retries the refused ones (logging each
// refusal again) and, for the rest, costs a rebuild of the backend set and
// model table with the same content (no probe, no log line, no registry
// write). A minute: a refused backend waits at most that long
// once the cause is gone, and a list of thousands is rebuilt once a minute.
const DiscoveryRedeliverEvery = time.Minute

// minDiscoveryInterval is the smallest Interval accepted. Below it the DNS
// discoverer re-resolves back to back (a round trip to the server takes
// about that long) and the Kubernetes informers resync continuously: 1ns
// is a unit typo, not a choice. The floor is low because tests and local
// demos use short intervals; in production anything under a second only
// loads the DNS or API server (the 10 s default is the advice).
const minDiscoveryInterval = 10 * time.Millisecond

// Discovery modes (DiscoveryConfig.Mode).
const (
	DiscoveryStatic     = "static"
	DiscoveryDNS        = "dns"
	DiscoveryKubernetes = "kubernetes"
)

// DiscoveryConfig says where the backends come from.
type DiscoveryConfig struct {
	// Mode is "static" (Config.Backends; the serve command reloads the
	// config file's list on SIGHUP), "dns" (DNS records, re-resolved every
	// Interval) or "kubernetes" (EndpointSlices chosen by a label selector,
	// watched; the serve command builds that discoverer).
	Mode string `yaml:"mode"`
	// Interval is how often DNS is re-resolved, and the Kubernetes
	// informers' resync period. 10 s: a new engine takes longer than that
	// to load its weights, and a vanished one is ejected by failed requests
	// and probes meanwhile; a query every 10 s per node costs the DNS
	// server nothing. A removed backend is also overruled in the registry
	// (made active again) by a node still listing it only after two
	// intervals, and an empty DNS answer empties a non-empty list only
	// when three rounds over two intervals say so. At least 10 ms
	// (minDiscoveryInterval).
	Interval time.Duration `yaml:"interval"`
	// Scheme of the discovered backends' URLs: http (vLLM's and SGLang's
	// default) or https.
	Scheme string `yaml:"scheme"`
	// Models every discovered backend serves; empty: each one's GET
	// /v1/models (or, in Kubernetes, the model label) says.
	Models []string `yaml:"models"`
	// DrainTimeout bounds the wait for a removed backend's in-flight
	// requests before its claims are invalidated and its series deleted
	// (the requests themselves go on). 10 min, as
	// backend_response_header_timeout: a non-streaming answer may take
	// that long.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// RemoveGrace is the least time a removed backend's claims are kept
	// after it left the list, in case it comes back: listed again within
	// it, it returns with its claims and its cache's state, as if it had
	// been drained. A pod whose readiness probe failed once leaves its
	// Service's endpoints for a probe period or two (10-20 s with
	// Kubernetes' defaults) with its cache intact, and a DNS answer can
	// miss a record for a round; without a grace each such flap dropped
	// its claims mesh-wide and started a new generation. 30 s covers a
	// few probe periods and a DNS TTL, and is short against a claim's
	// life (10 min): a backend really gone holds nothing routable in the
	// meantime (it is out of rotation), only its claims wait for the
	// sweep. A restarted engine is caught by its probes (cold_after) and
	// its reset prefix-cache counters, grace or not. 0: no grace.
	RemoveGrace time.Duration `yaml:"remove_grace"`
	// UnlistedGrace: a backend the claim state holds as active when the
	// node starts (restored from its --state-dir snapshot) that this node
	// has not listed within this time, and that no peer routes to, is
	// removed from the mesh's registry, once (unlistedSweep; not before
	// every peer on the load channel was heard, nor before two intervals
	// after the node's first list). Only a node that lists a backend and
	// then stops listing it removes it otherwise, so one that left while
	// every router was down (a full restart, a lone node restarted after
	// its pods rolled) kept a registry name for good, saved again in
	// every snapshot. 10 min: long after a restarted node has its list
	// and its peers' load, and short against forget_removed (6 h), after
	// which the name is freed. A node that runs for less (crash-looping)
	// never sweeps. 0: never (as before this release).
	UnlistedGrace time.Duration `yaml:"unlisted_grace"`
	// DNS is the dns mode's source.
	DNS DNSDiscoveryConfig `yaml:"dns"`
	// Kubernetes is the kubernetes mode's source.
	Kubernetes KubernetesDiscoveryConfig `yaml:"kubernetes"`
}

// DNSDiscoveryConfig: backends from A/AAAA or SRV records.
type DNSDiscoveryConfig struct {
	// Name is the name to resolve, e.g. vllm.llm.svc.cluster.local (a
	// Kubernetes headless Service: one A record per ready pod) or
	// _http._tcp.vllm.llm.svc.cluster.local (its SRV records, with the
	// port and each pod's own name).
	Name string `yaml:"name"`
	// Record is "A" (A and AAAA records: each address is a backend named
	// address:port) or "SRV" (each target is a backend named target:port,
	// reached at its address). Default: SRV when Name starts with '_',
	// else A. SRV names stay the same when a StatefulSet's pod comes back
	// with a new address; A names do not (each new address is a new
	// backend in the registry, which holds 4,096).
	Record string `yaml:"record"`
	// Port of the backends: required for A records; for SRV records it
	// replaces the records' port when set.
	Port int `yaml:"port"`
	// Server is a DNS server (host:port) to ask instead of the system's
	// resolver (/etc/resolv.conf).
	Server string `yaml:"server"`
	// Family is the address family of the backends with A records, and of
	// the SRV targets' addresses: "ipv4", "ipv6", "any" (every A and AAAA
	// record is a backend) or "auto" (the default): IPv4 only when the
	// answer holds an IPv4 address, else IPv6. A dual-stack pod has an A
	// and an AAAA record; with "any" it would be two backends, each with
	// half of its cache affinity. With SRV records, "auto" and "any" take
	// a target's lowest IPv4 address, else its lowest IPv6 one.
	Family string `yaml:"family"`
}

// KubernetesDiscoveryConfig: backends from EndpointSlices.
type KubernetesDiscoveryConfig struct {
	// Namespace to watch; default: the pod's own (from its service
	// account), else "default".
	Namespace string `yaml:"namespace"`
	// Selector is a label selector on EndpointSlices, e.g.
	// kubernetes.io/service-name=vllm (one Service) or app=vllm (the
	// Services' labels are copied to their slices). Required.
	Selector string `yaml:"selector"`
	// Port is the backends' port: a name or a number from the slices'
	// ports. Default: the slice's only port.
	Port string `yaml:"port"`
	// ModelLabel, if set, is a label of the slice (copied from its Service)
	// whose value is the model its endpoints serve; without it (or on a
	// slice without the label) models are asked from GET /v1/models.
	ModelLabel string `yaml:"model_label"`
	// Kubeconfig is a kubeconfig file for a router outside the cluster;
	// default: the in-cluster service account.
	Kubeconfig string `yaml:"kubeconfig"`
}

// DefaultDiscoveryConfig returns the defaults documented on each field.
func DefaultDiscoveryConfig() DiscoveryConfig {
	return DiscoveryConfig{Mode: DiscoveryStatic, Interval: 10 * time.Second, Scheme: "http", DrainTimeout: 10 * time.Minute, RemoveGrace: 30 * time.Second,
		UnlistedGrace: 10 * time.Minute}
}

func (c *DiscoveryConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("router: discovery: "+format, args...))
	}
	switch c.Mode {
	case DiscoveryStatic:
	case DiscoveryDNS:
		if c.DNS.Name == "" {
			bad("dns: name is required in dns mode")
		}
		switch c.DNS.record() {
		case "A":
			if c.DNS.Port < 1 || c.DNS.Port > 65535 {
				bad("dns: port must be in [1, 65535] with A records, got %d", c.DNS.Port)
			}
		case "SRV":
			if c.DNS.Port < 0 || c.DNS.Port > 65535 {
				bad("dns: port must be in [0, 65535] (0: the records'), got %d", c.DNS.Port)
			}
		default:
			bad("dns: record %q: want A or SRV", c.DNS.Record)
		}
		if c.DNS.Server != "" {
			if _, port, err := net.SplitHostPort(c.DNS.Server); err != nil {
				bad("dns: server %q: %v", c.DNS.Server, err)
			} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				bad("dns: server %q: the port must be a number in [1, 65535] (e.g. 53)", c.DNS.Server)
			}
		}
		switch c.DNS.family() {
		case familyAuto, familyAny, familyIPv4, familyIPv6:
		default:
			bad("dns: family %q: want auto, any, ipv4 or ipv6", c.DNS.Family)
		}
	case DiscoveryKubernetes:
		if strings.TrimSpace(c.Kubernetes.Selector) == "" {
			bad("kubernetes: selector is required in kubernetes mode (e.g. kubernetes.io/service-name=vllm)")
		} else if _, err := labels.Parse(c.Kubernetes.Selector); err != nil {
			bad("kubernetes: selector %q: %v", c.Kubernetes.Selector, err)
		}
		if p := c.Kubernetes.Port; p != "" {
			if n, err := strconv.Atoi(p); err == nil {
				if n < 1 || n > 65535 {
					bad("kubernetes: port %s: a port number must be in [1, 65535]", p)
				}
			} else if msgs := validation.IsDNS1123Label(p); len(msgs) > 0 {
				// An EndpointSlice port's name is a DNS label: any other name
				// matches no slice.
				bad("kubernetes: port %q: neither a number nor a port name: %s", p, strings.Join(msgs, "; "))
			}
		}
	default:
		bad("mode %q: want static, dns or kubernetes", c.Mode)
	}
	if c.Interval < minDiscoveryInterval {
		bad("interval must be at least %v, got %v", minDiscoveryInterval, c.Interval)
	}
	if c.DrainTimeout <= 0 {
		bad("drain_timeout must be positive, got %v", c.DrainTimeout)
	}
	if c.RemoveGrace < 0 || c.RemoveGrace >= c.DrainTimeout {
		bad("remove_grace (%v) must be in [0, drain_timeout (%v))", c.RemoveGrace, c.DrainTimeout)
	}
	if c.UnlistedGrace < 0 {
		bad("unlisted_grace must be 0 (off) or positive, got %v", c.UnlistedGrace)
	}
	if c.Scheme != "http" && c.Scheme != "https" {
		bad("scheme %q: want http or https", c.Scheme)
	}
	if slices.Contains(c.Models, "") {
		bad("models: empty model name")
	}
	return errs
}

// record is the record type to ask for.
func (c *DNSDiscoveryConfig) record() string {
	switch strings.ToUpper(c.Record) {
	case "":
		if strings.HasPrefix(c.Name, "_") {
			return "SRV"
		}
		return "A"
	case "A", "AAAA":
		return "A"
	case "SRV":
		return "SRV"
	}
	return c.Record
}

// Address families (DNSDiscoveryConfig.Family).
const (
	familyAuto = "auto"
	familyAny  = "any"
	familyIPv4 = "ipv4"
	familyIPv6 = "ipv6"
)

// family is the address family to keep, in lower case ("auto" when unset).
func (c *DNSDiscoveryConfig) family() string {
	if c.Family == "" {
		return familyAuto
	}
	return strings.ToLower(c.Family)
}

// DiscoverySink receives what a Discoverer finds (see Discoverer).
type DiscoverySink struct {
	source string
	found  func([]BackendConfig)
	m      *discoveryMetrics
	log    zerolog.Logger

	mu     sync.Mutex
	warned map[string]bool // skip reasons already logged at warn level
	failed bool            // the last look-up failed (logged once per run of failures)
}

// NewDiscoverySink returns a sink that calls found with each list (for a
// Discoverer's tests, or a caller driving SetBackends itself).
func NewDiscoverySink(source string, found func([]BackendConfig), log zerolog.Logger) *DiscoverySink {
	return &DiscoverySink{source: source, found: found, log: log, warned: map[string]bool{}}
}

// Found delivers the complete current list.
func (s *DiscoverySink) Found(list []BackendConfig) {
	s.mu.Lock()
	recovered := s.failed
	s.failed = false
	s.mu.Unlock()
	if recovered {
		s.log.Info().Str("source", s.source).Int("backends", len(list)).Msg("backend discovery works again")
	}
	if s.m != nil {
		s.m.lookups.Inc()
	}
	s.found(list)
}

// Failed reports a look-up that failed; the last list stays. The first
// failure of a run is logged at warn level, the rest at debug.
func (s *DiscoverySink) Failed(err error) {
	if s.m != nil {
		s.m.errors.Inc()
	}
	s.mu.Lock()
	first := !s.failed
	s.failed = true
	s.mu.Unlock()
	ev := s.log.Debug()
	if first {
		ev = s.log.Warn()
	}
	ev.Str("source", s.source).Err(err).Msg("backend discovery failed: keeping the last list")
}

// Skipped reports an entry the source listed that cannot be a backend
// (what names it, why says what is wrong). Each distinct reason is logged
// once at warn level, then at debug.
func (s *DiscoverySink) Skipped(what, why string) {
	if s.m != nil {
		s.m.skipped.Inc()
	}
	s.mu.Lock()
	key := what + "\x00" + why
	first := !s.warned[key]
	if first && len(s.warned) < 1024 {
		s.warned[key] = true
	}
	s.mu.Unlock()
	ev := s.log.Debug()
	if first {
		ev = s.log.Warn()
	}
	ev.Str("source", s.source).Str("entry", what).Str("why", why).Msg("backend discovery: entry skipped")
}

// discoveryMetrics are the kvmesh_router_discovery_* metrics.
type discoveryMetrics struct {
	lookups, errors, skipped prometheus.Counter
	added, removed           prometheus.Counter
	unlisted                 prometheus.Counter // unlistedSweep's removals
	drain                    prometheus.Observer
	backends                 [4]prometheus.Gauge // serving, drained, removing, starting
	// loops counts the backends' running watch loops (tests check that a
	// removed backend's stop).
	loops atomic.Int64
}

func newDiscoveryMetrics(reg prometheus.Registerer, mode string) (*discoveryMetrics, error) {
	const ns, sub = "kvmesh", "router"
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "discovery_lookups_total",
		Help: "Complete backend lists the discovery source (dns, kubernetes) delivered, by source."}, []string{"source"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "discovery_errors_total",
		Help: "Backend discovery look-ups that failed (the last list was kept), by source."}, []string{"source"})
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "discovery_skipped_entries_total",
		Help: "DNS records or endpoints the discovery source listed that could not be backends (garbage), by source."}, []string{"source"})
	added := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "discovery_backends_added_total",
		Help: "Backends added to the set (discovered, or listed by a reloaded config)."})
	removed := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "discovery_backends_removed_total",
		Help: "Backends no longer listed, which then drained."})
	unlisted := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "discovery_unlisted_removed_total",
		Help: "Backends active in the claim state at start that no node listed within discovery.unlisted_grace, removed from the registry."})
	drain := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "discovery_drain_duration_seconds",
		Help:    "Time from a backend's removal from the list to the end of its drain (its in-flight requests done, or drain_timeout).",
		Buckets: prometheus.ExponentialBuckets(0.1, 3, 10)})
	backends := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "discovery_backends",
		Help: "Backends in the set by state: serving (listed, not drained), drained (by an operator), removing (no longer listed, draining), starting (added, first probe pending)."},
		[]string{"state"})
	m := &discoveryMetrics{lookups: lookups.WithLabelValues(mode), errors: errs.WithLabelValues(mode),
		skipped: skipped.WithLabelValues(mode), added: added, removed: removed, unlisted: unlisted, drain: drain}
	for i, s := range []string{"serving", "drained", "removing", "starting"} {
		m.backends[i] = backends.WithLabelValues(s)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{lookups, errs, skipped, added, removed, unlisted, drain, backends} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// counts sets the per-state gauges. Callers hold Router.setMu.
func (m *discoveryMetrics) counts(members map[string]*member) {
	var n [4]int
	for _, mb := range members {
		switch {
		case mb.state == memberStarting:
			n[3]++
		case mb.state == memberRemoving:
			n[2]++
		case mb.drained:
			n[1]++
		default:
			n[0]++
		}
	}
	for i, g := range m.backends {
		g.Set(float64(n[i]))
	}
}

// newDiscoverer builds the discoverer of the configured mode; kubernetes
// needs Deps.Discoverer (the serve command builds it).
func newDiscoverer(cfg *Config, deps *Deps) (Discoverer, error) {
	if deps.Discoverer != nil {
		return deps.Discoverer, nil
	}
	switch cfg.Discovery.Mode {
	case DiscoveryDNS:
		return NewDNSDiscoverer(cfg.Discovery), nil
	case DiscoveryKubernetes:
		return nil, errors.New("router: discovery mode kubernetes needs Deps.Discoverer (package router/kubediscovery)")
	}
	return nil, nil // static: the backends are set at New, and by SetBackends
}

// runDiscovery runs d until ctx ends, again after Interval when it returns
// early.
func (rt *Router) runDiscovery(ctx context.Context, d Discoverer, sink *DiscoverySink) {
	for {
		err := d.Run(ctx, sink)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the discoverer stopped")
		}
		sink.Failed(err)
		t := time.NewTimer(rt.cfg.Discovery.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// discoveredBackend is the BackendConfig of a discovered endpoint.
func (c *DiscoveryConfig) discoveredBackend(name, hostPort string, models []string) BackendConfig {
	if len(models) == 0 && len(c.Models) > 0 {
		models = c.Models
	}
	return BackendConfig{Name: name, URL: c.Scheme + "://" + hostPort, Models: models}
}

// DiscoveredBackend is the BackendConfig of an endpoint a Discoverer found:
// named name, reached at hostPort with the configured scheme, serving
// models (nil: Models, or GET /v1/models).
func (c DiscoveryConfig) DiscoveredBackend(name, hostPort string, models []string) BackendConfig {
	return c.discoveredBackend(name, hostPort, models)
}
